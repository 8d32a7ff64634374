"""A product process that loads the EVM adapter (web3, eth-account) keeps its recursion limit."""

import os
import subprocess
import sys

CHECK = """
import sys
before = sys.getrecursionlimit()
import django
django.setup()
import venues.evm.executors, venues.signing, eth_account
print(before, sys.getrecursionlimit(), 'web3' in sys.modules)
"""


def test_loading_the_evm_adapter_keeps_the_recursion_limit():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "qtg.settings"}
    out = subprocess.run(
        [sys.executable, "-c", CHECK],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=env,
    ).stdout.split()

    assert out == ["1000", "1000", "True"]
