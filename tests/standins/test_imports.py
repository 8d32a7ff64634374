"""Importing the stand-ins leaves the interpreter as it was (no devchain needed)."""

import subprocess
import sys

CHECK = """
import sys
before = sys.getrecursionlimit()
import standins.cctp, standins.contracts, standins.anvil
print(before, sys.getrecursionlimit())
"""


def test_importing_the_standins_keeps_the_recursion_limit():
    # py_ecc (under eth-account) raises the limit to 100000 when first imported; check in a
    # fresh interpreter, since web3 is already imported in this one.
    out = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert out[0] == out[1] == "1000"
