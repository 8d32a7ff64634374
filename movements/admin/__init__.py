"""The operator console for movements (Django admin), one module per part:

- ``changelist``: the movements list (columns, filters, search, bulk approve / reject);
- ``movement``: the movement page (nodes, approvals, overrides, the audit trail, the plan
  graph) and the page of each action on one movement, and the route templates;
- ``actions``: which action is offered to whom and when (the services' own policies) and
  their forms;
- ``controls``: approval policies, the address book and two-person overrides;
- ``graph``: the plan graph's layout; ``filters``: the list's filters.

Django's admin autodiscovery imports this package; the pages register on import.
"""

from movements.admin import controls, movement

__all__ = ["controls", "movement"]
