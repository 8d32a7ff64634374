"""The shared kernel: what every app of QTG may depend on, and which depends on no app.

- ``errors``  the domain error hierarchy (each error a stable code and an HTTP status)
- ``policies`` the shape of a policy's answer: a Refusal (or None), raised as its error
- ``actors``  who acted (a user or a named system component)
- ``money``   Decimal amounts: the column type and how an amount is written
- ``models``  the append-only base of audit tables
- ``admin``   admin building blocks: read-only admins and inlines, bulk confirmation pages
"""
