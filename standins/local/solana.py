"""``QTG_VENUES=local``: the local Solana node as a child process of ``make run``.

Starts ``python -m standins.solana`` on a free port (400 ms slots, mainnet's commitment depths
and blockhash window), makes a demo treasury (100 SOL, 100 000 USDC of a fresh 6-decimal
mint), and adds a ``solana`` chain to the chains config the product reads (merged into the
file another adapter may have written already). The treasury's key is written to a file
readable by its owner only, which the config names: it never enters the database.
"""

import json
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from solders.keypair import Keypair

from venues import conf

TREASURY = "solana-treasury"
TREASURY_SOL = 100 * 10**9
TREASURY_USDC = "100000"
STARTUP_TIMEOUT_SECONDS = 20


def _control(url: str, action: str, payload: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{url}/_control/{action}",
        data=json.dumps(payload).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _spawn(var_dir: Path) -> tuple[subprocess.Popen, str]:
    log = (var_dir / "solana.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "standins.solana", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    # It prints one line once it listens; a node that hangs instead is killed.
    timer = threading.Timer(STARTUP_TIMEOUT_SECONDS, process.kill)
    timer.start()
    try:
        line = process.stdout.readline().strip()
    finally:
        timer.cancel()
    if not line.startswith("LISTENING "):
        process.kill()
        raise RuntimeError(f"the local Solana node did not start (see {var_dir / 'solana.log'})")
    return process, line.split(" ", 1)[1]


def _chains_file(env: dict[str, str], var_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The chains config to extend: one an adapter before us wrote, else the reviewed one."""
    current = Path(env["QTG_CHAINS_CONFIG"]) if env.get("QTG_CHAINS_CONFIG") else None
    source = current or conf.config_path("chains")
    data = yaml.safe_load(source.read_text()) if source.exists() else None
    data = data or {"version": 1, "chains": {}}
    data.setdefault("chains", {})
    return current or var_dir / "chains.yaml", data


def start(env: dict[str, str], var_dir: Path) -> list[subprocess.Popen]:
    process, url = _spawn(var_dir)
    try:
        treasury = Keypair()
        key_file = var_dir / "solana-treasury.json"
        key_file.touch(mode=0o600)
        key_file.write_text(json.dumps(list(bytes(treasury))))
        _control(url, "airdrop", {"address": str(treasury.pubkey()), "lamports": TREASURY_SOL})
        mint = _control(url, "mints", {"decimals": 6})["mint"]
        _control(
            url, "mint-to", {"mint": mint, "owner": str(treasury.pubkey()), "amount": TREASURY_USDC}
        )
        path, config = _chains_file(env, var_dir)
        config["chains"]["solana"] = {
            "kind": "solana",
            "rpc_url_env": "QTG_SOLANA_RPC_URL",
            "commitment": {"blockhash": "confirmed", "landed": "confirmed", "final": "finalized"},
            "tokens": {"SOL": {"decimals": 9}, "USDC": {"mint": mint, "decimals": 6}},
            "accounts": {
                TREASURY: {"address": str(treasury.pubkey()), "key": {"file": str(key_file)}}
            },
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
    except BaseException:
        process.kill()
        process.wait()
        raise
    env["QTG_CHAINS_CONFIG"] = str(path)
    env["QTG_SOLANA_RPC_URL"] = url
    return [process]
