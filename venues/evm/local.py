"""``make run`` under ``QTG_VENUES=local``: an anvil devchain as a child process, a 6-decimal
test USDC deployed on it, and a chains config naming it (account ``treasury``: anvil's dev
account 1, holding the token; its key is the public dev mnemonic's, never a real one).

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
KEY_ENV = "QTG_DEVCHAIN_TREASURY_KEY"
TREASURY = "treasury"
MINTED_USDC = 1_000_000  # whole tokens for the treasury


def start(env: dict[str, str], var_dir: Path) -> list[Popen[Any]]:
    """Start anvil, deploy the token, write ``var_dir/chains.yaml`` and point ``env`` at it;
    returns the anvil process (stopped by ``make run`` at the end)."""
    import standins  # noqa: F401  (web3 under the process's recursion limit)
    from standins.anvil import Anvil
    from standins.contracts import deploy_test_token, transact

    chain = Anvil(chain_id=CHAIN_ID).start()
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
                    "confirmations": 2,
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
            "# Written by venues.evm.local for QTG_VENUES=local (the anvil devchain).\n"
            + yaml.safe_dump(config, sort_keys=False)
        )
        # Blocks every second, so confirmations accumulate without anyone sending.
        chain.set_interval_mining(1)
    except BaseException:
        chain.stop()
        raise
    env["QTG_CHAINS_CONFIG"] = str(path)
    env[RPC_ENV] = chain.url
    env[KEY_ENV] = treasury.signer.key.hex()
    return [chain.process]
