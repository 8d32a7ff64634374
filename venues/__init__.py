"""Real venues: EVM chains, exchanges, CCTP and Solana (DESIGN.md section 8).

Each adapter is a sub-package (``venues.evm``, ``venues.cex``, ``venues.cctp``,
``venues.solana``) whose ``executors`` module registers its executors when Django starts,
exactly as the sandbox does; its reviewed configuration lives beside it in
``venues/chains.yaml`` and ``venues/exchanges.yaml`` (no secrets inside: accounts name the env
vars or files that hold their keys). ``QTG_VENUES`` says which implementation serves a name
that both the sandbox and an adapter provide: ``off`` the sandbox, ``local`` and ``live`` the
adapters (``local``: against the stand-ins that ``make run`` starts).
"""
