"""Exchanges through ccxt: the exchange lane's executors (``executors``), the accounts of
``venues/exchanges.yaml`` (``config``), the withdrawal journal and the shared request budget
of each credential (``models``, ``journal``, ``ratelimit``), and the local exchange that
``make run`` starts under ``QTG_VENUES=local`` (``local``)."""
