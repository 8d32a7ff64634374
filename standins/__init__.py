"""Local stand-ins that speak the real protocols, for tests and local runs (DESIGN.md §8).

- :mod:`standins.anvil`: an anvil devchain process (from ``standins/node_modules``) and its
  control RPCs (mine, automine, reorg, drop, snapshot/revert).
- :mod:`standins.contracts`: our Solidity sources (``standins/contracts/``), compiled with the
  npm ``solc`` package, and helpers to deploy and call them with locally signed transactions.
- :mod:`standins.cctp`: the CCTP v1 stand-in (transmitter, messenger, USDC) and attestations.
- :mod:`standins.exchange`: a local exchange speaking the part of Binance's and Upbit's REST APIs
  that ccxt calls (balances, withdrawals, deposits), with faults on request.
- :mod:`standins.solana`: a local Solana JSON-RPC node over LiteSVM (from solders): slots on a
  clock, commitment levels, the blockhash validity window, SPL tokens, faults on request.
- :mod:`standins.local`: ``QTG_VENUES=local make run`` (``python -m standins.local``) starts
  the stand-ins above for the real adapters, then the product's ``run_embedded``.

Node tools are pinned in ``standins/package.json`` + ``package-lock.json`` and installed by
``npm ci --prefix standins`` (``make install``).
"""

import sys

# py_ecc (imported by eth-keys, so by eth-account and web3) raises the interpreter's recursion
# limit to 100000 when it is imported. With that limit, recursion that should end in
# RecursionError (json.loads of "[[[[...", which the API answers with a 400) overflows the C
# stack and kills the process with a segfault. Import it here, under the limit we found, and put
# the limit back: importing the stand-ins must not change how the rest of the process behaves.
_recursion_limit = sys.getrecursionlimit()
import eth_account  # noqa: E402, F401
import web3  # noqa: E402, F401

sys.setrecursionlimit(_recursion_limit)


def devchain_missing_reason() -> str | None:
    """Why devchain tests cannot run on this machine (no anvil, or no compiler for a stale
    build), or None when they can."""
    from standins.anvil import anvil_missing_reason
    from standins.contracts import build_is_fresh, compiler_missing_reason

    reason = anvil_missing_reason()
    if reason is None and not build_is_fresh():
        reason = compiler_missing_reason()
    return reason
