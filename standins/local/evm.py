"""``QTG_VENUES=local make run`` (``standins.local``): an anvil devchain as a child process, a
6-decimal test USDC deployed on it, and a chains config naming it (account ``treasury``:
anvil's dev account 1, holding the token; its key is the public dev mnemonic's, never a real
one).

The product reaches the chain through two endpoints, each a fault-playing RPC proxy in front
of anvil (``standins.rpc_proxy`` as a child process): ``QTG_DEVCHAIN_RPC_URL`` (the primary)
and ``QTG_DEVCHAIN_RPC_URL_B``. Their faults are JSON-RPC calls to those URLs, from a shell:

    curl -s $QTG_DEVCHAIN_RPC_URL -H 'Content-Type: application/json' \
      -d '{"jsonrpc":"2.0","id":1,"method":"standin_lagLookups","params":["0x<hash>",30]}'
    # standin_trailFinalized [blocks], standin_trailHead [blocks] (a lagging endpoint),
    # standin_loseResponse [method, times], standin_answerError [method, message, times]
    # and anvil's own: anvil_reorg [depth, []] on the devchain (its URL: QTG_DEVCHAIN_ANVIL_URL)

    QTG_VENUES=local make run
    # then create an evm_transfer movement: source treasury, destination any 0x address,
    # params {"chain": "devchain"}, asset USDC or ETH
"""

from pathlib import Path
from subprocess import Popen
from typing import Any

import yaml

CHAIN = "devchain"
CHAIN_ID = 31337
RPC_ENV = "QTG_DEVCHAIN_RPC_URL"
RPC_ENV_B = "QTG_DEVCHAIN_RPC_URL_B"
ANVIL_ENV = "QTG_DEVCHAIN_ANVIL_URL"
# A finalized transfer is looked at this long before its movement completes (a reorg played
# meanwhile pages final_reorg).
POST_FINAL_WATCH = 5
KEY_ENV = "QTG_DEVCHAIN_TREASURY_KEY"
TREASURY = "treasury"
MINTED_USDC = 1_000_000  # whole tokens for the treasury


def start(env: dict[str, str], var_dir: Path) -> list[Popen[Any]]:
    """Start anvil, deploy the token, write ``var_dir/chains.yaml`` and point ``env`` at it;
    returns the anvil process (stopped by ``make run`` at the end)."""
    from standins.anvil import Anvil
    from standins.contracts import deploy_test_token, transact

    chain = Anvil(chain_id=CHAIN_ID, finalized_lag=2).start()
    try:
        owner, treasury = chain.accounts[0], chain.accounts[1]
        usdc = deploy_test_token(chain.web3, owner, decimals=6, symbol="USDC")
        transact(chain.web3, owner, usdc.functions.mint(treasury.address, MINTED_USDC * 10**6))
        config = {
            "version": 1,
            "chains": {
                CHAIN: {
                    "kind": "evm",
                    "chain_id": CHAIN_ID,
                    "rpc_url_env": RPC_ENV,
                    "rpc_endpoints": [RPC_ENV_B],
                    "finality": "tag",  # anvil's finalized block, 2 behind the head
                    "post_final_watch": POST_FINAL_WATCH,
                    "block_seconds": 1,
                    "replace_after_seconds": 30,
                    "max_fee_gwei": 100,
                    "tokens": {"USDC": {"address": usdc.address, "decimals": 6}},
                    "accounts": {TREASURY: {"address": treasury.address, "key": {"env": KEY_ENV}}},
                }
            },
        }
        path = var_dir / "chains.yaml"
        path.write_text(
            "# Written by standins.local.evm for QTG_VENUES=local (the anvil devchain).\n"
            + yaml.safe_dump(config, sort_keys=False)
        )
        # Blocks every second, so confirmations accumulate without anyone sending.
        chain.set_interval_mining(1)
        proxies = [start_proxy(chain.url), start_proxy(chain.url)]
    except BaseException:
        chain.stop()
        raise
    env["QTG_CHAINS_CONFIG"] = str(path)
    env[ANVIL_ENV] = chain.url
    (env[RPC_ENV], first), (env[RPC_ENV_B], second) = proxies
    env[KEY_ENV] = treasury.signer.key.hex()
    return [chain.process, first, second]


def start_proxy(upstream: str, *, timeout: float = 20.0) -> tuple[str, Popen[Any]]:
    """``standins.rpc_proxy`` in front of ``upstream`` as a child process: (its URL, it)."""
    import sys
    import time

    import httpx

    from standins.anvil import free_port

    port = free_port()
    process = Popen(
        [sys.executable, "-m", "standins.rpc_proxy", "--upstream", upstream, "--port", str(port)],
        cwd=Path(__file__).resolve().parents[2],
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            answer = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "eth_chainId"})
            if answer.status_code == 200 and answer.json().get("result"):
                return url, process
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"the RPC proxy in front of {upstream} did not start")
