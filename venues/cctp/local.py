"""``QTG_VENUES=local``: CCTP across two local devchains, for ``make run``.

``start(env, var_dir)`` (called by ``venues.local.start_standins`` after the EVM adapter's own
``start``) makes sure two anvil devchains run — ``ethereum`` (chain id 31337, CCTP domain 0)
and ``arbitrum`` (31338, domain 3); a chain the EVM adapter already started (same chain id in
the configuration it wrote) is reused, a missing one is started here (automine while the
contracts deploy, then a block every second so that confirmations accumulate) — deploys the
CCTP stand-in contracts on both and links them, mints demo USDC to the ``treasury`` account
on ``ethereum``, starts the Iris stand-in (``python -m standins.iris``) watching both chains
with a local attester key, and writes the chain configuration (``var_dir/chains.yaml``) with
each chain's ``cctp`` block and ``iris_url_env``. The dev accounts' keys are anvil's
well-known public ones: local use only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from subprocess import Popen
from typing import Any

import httpx
import yaml

IRIS_URL_ENV = "QTG_IRIS_URL"
CHAINS = (
    # name, chain id, CCTP domain, RPC env var, account name, dev account index, key env var
    ("ethereum", 31337, 0, "QTG_LOCAL_ETHEREUM_RPC_URL", "treasury", 1, "QTG_LOCAL_TREASURY_KEY"),
    ("arbitrum", 31338, 3, "QTG_LOCAL_ARBITRUM_RPC_URL", "relayer", 3, "QTG_LOCAL_RELAYER_KEY"),
)
VAULT = "vault"  # on arbitrum: where the demo movement mints
DEMO_USDC_UNITS = 1_000_000 * 10**6  # the treasury's demo balance on ethereum
CONFIRMATIONS = 3


def _existing_config(env: dict[str, str], var_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The configuration another adapter wrote in this run (``QTG_CHAINS_CONFIG`` in ``env``),
    else a new one in ``var_dir`` (a file left by an earlier run names chains that are gone)."""
    if env.get("QTG_CHAINS_CONFIG"):
        path = Path(env["QTG_CHAINS_CONFIG"])
        data = yaml.safe_load(path.read_text()) if path.exists() else None
        if isinstance(data, dict):
            return path, data
        return path, {"version": 1, "chains": {}}
    return var_dir / "chains.yaml", {"version": 1, "chains": {}}


def _running_chain(config: dict[str, Any], env: dict[str, str], chain_id: int) -> str | None:
    """The RPC URL of a chain with ``chain_id`` another adapter already configured."""
    for entry in (config.get("chains") or {}).values():
        if isinstance(entry, dict) and entry.get("chain_id") == chain_id:
            url = env.get(str(entry.get("rpc_url_env") or ""), "")
            if url:
                return url
    return None


def _forget_chain(config: dict[str, Any], chain_id: int) -> None:
    """Drop entries of ``chain_id`` whose chain is not running (started here instead)."""
    chains = config.get("chains") or {}
    for name in [
        n for n, e in chains.items() if isinstance(e, dict) and e.get("chain_id") == chain_id
    ]:
        del chains[name]


def _wait_healthy(url: str, process: Popen[Any], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the Iris stand-in exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/control/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"the Iris stand-in did not answer at {url}")


def start(env: dict[str, str], var_dir: Path) -> list[Popen[Any]]:
    from eth_utils import keccak

    from standins.anvil import Anvil, dev_accounts, free_port
    from standins.cctp import deploy_cctp, link
    from standins.iris import SourceDomain, write_config
    from venues.ethlib import Account, Web3

    started: list[Popen[Any]] = []
    path, config = _existing_config(env, var_dir)
    chains = config.setdefault("chains", {})
    accounts = dev_accounts()
    attester_key = keccak(b"qtg local iris attester").hex()
    key_file = var_dir / "iris-attester.key"
    key_file.write_text(attester_key)
    os.chmod(key_file, 0o600)
    attester = Account.from_key(attester_key).address
    domains = {}
    ours: list[Anvil] = []
    try:
        for name, chain_id, domain, rpc_env, account, index, key_env in CHAINS:
            url = _running_chain(config, env, chain_id)
            started_here = url is None
            if started_here:
                anvil = Anvil(chain_id=chain_id).start()  # automine while deploying
                started.append(anvil.process)
                ours.append(anvil)
                url = anvil.url
            w3 = Web3(Web3.HTTPProvider(url, request_kwargs={"timeout": 10}))
            deployed = deploy_cctp(w3, accounts[0], domain=domain, attester=attester)
            domains[name] = (deployed, url, rpc_env, account, index, key_env, chain_id)
            if started_here:
                _forget_chain(config, chain_id)
        link(domains["ethereum"][0], domains["arbitrum"][0])
        domains["ethereum"][0].mint_usdc(accounts[1].address, DEMO_USDC_UNITS)
        for anvil in ours:
            anvil.set_interval_mining(1)  # then a block a second: confirmations accumulate

        for name, (deployed, url, rpc_env, account, index, key_env, chain_id) in domains.items():
            entry = chains.get(name) if isinstance(chains.get(name), dict) else None
            if entry is None or entry.get("chain_id") != chain_id:
                entry = {
                    "kind": "evm",
                    "chain_id": chain_id,
                    "rpc_url_env": rpc_env,
                    "confirmations": CONFIRMATIONS,
                    "block_seconds": 1,
                    "replace_after_seconds": 60,
                    "max_fee_gwei": 100,
                }
            env[str(entry["rpc_url_env"])] = url
            entry.setdefault("tokens", {})["USDC"] = {
                "address": deployed.usdc.address,
                "decimals": 6,
            }
            entry.setdefault("accounts", {}).setdefault(
                account, {"address": accounts[index].address, "key": {"env": key_env}}
            )
            env.setdefault(key_env, accounts[index].private_key)
            entry["cctp"] = {
                "domain": deployed.domain,
                "token_messenger": deployed.messenger.address,
                "message_transmitter": deployed.transmitter.address,
                "usdc": deployed.usdc.address,
            }
            if name == "arbitrum":
                # The demo's destination: an account without a key (nothing is sent from it).
                entry["accounts"].setdefault(VAULT, {"address": accounts[4].address})
                entry["cctp"]["relayer"] = account
            chains[name] = entry

        iris_config = var_dir / "iris.json"
        write_config(
            iris_config,
            domains={
                d.domain: SourceDomain(url, d.transmitter.address)
                for d, url, *_ in domains.values()
            },
            attester_key_file=key_file,
            confirmations=CONFIRMATIONS,
            port=free_port(),
        )
        iris = subprocess.Popen(
            [sys.executable, "-m", "standins.iris", "--config", str(iris_config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        started.append(iris)
        port = yaml.safe_load(iris_config.read_text())["port"]
        iris_url = f"http://127.0.0.1:{port}"
        _wait_healthy(iris_url, iris)
        env[IRIS_URL_ENV] = iris_url
        config["iris_url_env"] = IRIS_URL_ENV
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        env["QTG_CHAINS_CONFIG"] = str(path)
    except BaseException:
        for process in started:
            process.terminate()
        raise
    return started
