"""Local stand-ins that speak the real protocols, for tests and local runs (DESIGN.md §8).

- :mod:`standins.anvil`: an anvil devchain process (from ``standins/node_modules``) and its
  control RPCs (mine, automine, reorg, drop, snapshot/revert).
- :mod:`standins.contracts`: our Solidity sources (``standins/contracts/``), compiled with the
  npm ``solc`` package, and helpers to deploy and call them with locally signed transactions.
- :mod:`standins.cctp`: the CCTP v1 stand-in (transmitter, messenger, USDC) and attestations.

Node tools are pinned in ``standins/package.json`` + ``package-lock.json`` and installed by
``npm ci --prefix standins`` (``make install``).
"""


def devchain_missing_reason() -> str | None:
    """Why devchain tests cannot run on this machine (no anvil, or no compiler for a stale
    build), or None when they can."""
    from standins.anvil import anvil_missing_reason
    from standins.contracts import build_is_fresh, compiler_missing_reason

    reason = anvil_missing_reason()
    if reason is None and not build_is_fresh():
        reason = compiler_missing_reason()
    return reason
