"""web3 and eth-account, imported without changing the process's recursion limit.

py_ecc (imported by eth-keys, so by eth-account and web3) raises the interpreter's recursion
limit to 100000 on import; with it, input that should end in ``RecursionError`` (deeply nested
JSON, which the API answers with a 400) overflows the C stack and kills the process. Product
code imports them from here, which puts the limit back (``standins`` does the same for tests).
"""

import sys

_recursion_limit = sys.getrecursionlimit()
import eth_account  # noqa: E402
import web3  # noqa: E402
from eth_account import Account  # noqa: E402
from web3 import Web3  # noqa: E402

sys.setrecursionlimit(_recursion_limit)

__all__ = ["Account", "Web3", "eth_account", "web3"]
