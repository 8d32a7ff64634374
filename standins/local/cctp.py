"""``QTG_VENUES=local``: CCTP across two local devchains, for ``make run``.

``start(env, var_dir)`` runs after the EVM adapter's (``standins.local.evm``: the anvil chain
``devchain``, id 31337, and its ``treasury`` account). It makes sure two devchains run —
``devchain`` (chain id 31337, CCTP domain 0; the EVM adapter's, reused under its name, or
started here) and ``devchain-b`` (31338, domain 3, started here; automine while the contracts
deploy, then a block every second so that confirmations accumulate) — deploys the CCTP
stand-in contracts on both and links them, mints demo USDC to ``treasury`` on ``devchain``,
deploys CCTP V2 (TokenMessengerV2 / MessageTransmitterV2 of the stand-in, minting the same
USDC, fees to dev account 5) beside V1 on both and links them, starts the Iris stand-in
(``python -m standins.iris``) watching both chains' V1 and V2 transmitters with a local attester
key, Circle's rate limit and a fee schedule (fast 1 bp, standard 0), and writes the chain
configuration (the EVM adapter's file, else ``var_dir/chains.yaml``) with each chain's ``cctp``
block (V1 and V2 addresses) and ``iris_url_env``. On
``devchain-b`` the account ``relayer`` submits mints and ``vault`` (no key) receives the
demo's. Nonce cursors and in-flight transactions an earlier run left for these chain names
are forgotten (the chains are new, the database is not). The dev accounts' keys are anvil's
well-known public ones: local use only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen
from typing import Any

import httpx
import yaml

IRIS_URL_ENV = "QTG_IRIS_URL"
SOURCE, DESTINATION = "devchain", "devchain-b"
TREASURY, RELAYER, VAULT = "treasury", "relayer", "vault"
DEMO_USDC_UNITS = 1_000_000 * 10**6  # the treasury's demo balance on the source chain
CONFIRMATIONS = 3


@dataclass(frozen=True)
class LocalChain:
    name: str
    chain_id: int
    domain: int
    rpc_env: str
    account: str  # the account this side needs: the burner / the relayer
    dev_index: int  # its anvil dev account
    key_env: str


CHAINS = (
    LocalChain(SOURCE, 31337, 0, "QTG_DEVCHAIN_RPC_URL", TREASURY, 1, "QTG_DEVCHAIN_TREASURY_KEY"),
    LocalChain(DESTINATION, 31338, 3, "QTG_DEVCHAIN_B_RPC_URL", RELAYER, 3, "QTG_DEVCHAIN_B_KEY"),
)


def _existing_config(env: dict[str, str], var_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The configuration another adapter wrote in this run (``QTG_CHAINS_CONFIG`` in ``env``),
    else a new one in ``var_dir`` (a file left by an earlier run names chains that are gone)."""
    if env.get("QTG_CHAINS_CONFIG"):
        path = Path(env["QTG_CHAINS_CONFIG"])
        data = yaml.safe_load(path.read_text()) if path.exists() else None
        if isinstance(data, dict):
            data.setdefault("chains", {})
            return path, data
        return path, {"version": 1, "chains": {}}
    return var_dir / "chains.yaml", {"version": 1, "chains": {}}


def _running(config: dict[str, Any], env: dict[str, str], chain_id: int) -> tuple[str, str]:
    """(name, RPC URL) of a chain with ``chain_id`` another adapter started in this run."""
    for name, entry in config["chains"].items():
        if isinstance(entry, dict) and entry.get("chain_id") == chain_id:
            url = env.get(str(entry.get("rpc_url_env") or ""), "")
            if url:
                return str(name), url
    return "", ""


def _forget_old_chains(names: list[str]) -> None:
    """The local chains are new on every run, the database is not: what QTG remembers of the
    chains of an earlier run under these names (nonce cursors, transactions still in flight)
    is about chains that are gone. Cursors are dropped (the next nonce is read from the new
    chain) and those transactions are closed with that evidence, through the transaction
    service (DROPPED where the table allows it, else FAILED)."""
    from qtg.core.actors import Actor
    from venues.models import (
        LIVE_TX_STATES,
        ChainTransaction,
        NonceCursor,
        TxState,
        can_transition_tx_state,
    )
    from venues.transactions import chain_transaction_transition

    NonceCursor.objects.filter(chain__in=names).delete()
    stale = ChainTransaction.objects.filter(
        chain__in=names, state__in=[*LIVE_TX_STATES, TxState.CREATED]
    )
    for tx in stale:
        target = TxState.DROPPED if can_transition_tx_state(tx.state, TxState.DROPPED) else None
        chain_transaction_transition(
            chain_transaction_id=tx.pk,
            to_state=target or TxState.FAILED,
            actor=Actor.system("standins.local.cctp"),
            evidence={"finding": "the local devchain of an earlier run is gone"},
        )


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
    from standins.cctp import CctpDomain, deploy_cctp, link
    from standins.cctp_v2 import CctpV2Domain, deploy_cctp_v2, link_v2
    from standins.iris import SourceDomain, write_config
    from standins.iris_v2 import FeeSchedule, RateLimit
    from venues.ethlib import Account, Web3

    started: list[Popen[Any]] = []
    path, config = _existing_config(env, var_dir)
    accounts = dev_accounts()
    attester_key = keccak(b"qtg local iris attester").hex()
    key_file = var_dir / "iris-attester.key"
    key_file.write_text(attester_key)
    os.chmod(key_file, 0o600)
    attester = Account.from_key(attester_key).address
    deployed: dict[str, tuple[LocalChain, CctpDomain, str]] = {}
    deployed_v2: dict[str, CctpV2Domain] = {}
    ours: list[Anvil] = []
    try:
        for spec in CHAINS:
            name, url = _running(config, env, spec.chain_id)
            if not url:
                # automine while deploying; its finalized block 2 behind the head
                anvil = Anvil(chain_id=spec.chain_id, finalized_lag=2).start()
                started.append(anvil.process)
                ours.append(anvil)
                name, url = spec.name, anvil.url
                config["chains"][name] = {
                    "kind": "evm",
                    "chain_id": spec.chain_id,
                    "rpc_url_env": spec.rpc_env,
                    "confirmations": CONFIRMATIONS,
                    "block_seconds": 1,
                    "replace_after_seconds": 60,
                    "max_fee_gwei": 100,
                }
                env[spec.rpc_env] = url
            w3 = Web3(Web3.HTTPProvider(url, request_kwargs={"timeout": 30}))
            domain = deploy_cctp(w3, accounts[0], domain=spec.domain, attester=attester)
            deployed[name] = (spec, domain, url)
            deployed_v2[name] = deploy_cctp_v2(
                w3,
                accounts[0],
                domain=spec.domain,
                attester=attester,
                usdc=domain.usdc,
                fee_recipient=accounts[5].address,
            )
        (source_name, (_, a, _)), (_, (_, b, _)) = deployed.items()
        link(a, b)
        link_v2(*deployed_v2.values())
        _forget_old_chains(list(deployed))

        for name, (spec, domain, _) in deployed.items():
            entry = config["chains"][name]
            entry.setdefault("tokens", {}).setdefault(
                "USDC", {"address": domain.usdc.address, "decimals": 6}
            )
            chain_accounts = entry.setdefault("accounts", {})
            if spec.account not in chain_accounts:
                chain_accounts[spec.account] = {
                    "address": accounts[spec.dev_index].address,
                    "key": {"env": spec.key_env},
                }
                env[spec.key_env] = accounts[spec.dev_index].private_key
            entry["cctp"] = {
                "domain": domain.domain,
                "token_messenger": domain.messenger.address,
                "message_transmitter": domain.transmitter.address,
                "usdc": domain.usdc.address,
                "token_messenger_v2": deployed_v2[name].messenger.address,
                "message_transmitter_v2": deployed_v2[name].transmitter.address,
            }
            if spec.account == RELAYER:
                entry["cctp"]["relayer"] = RELAYER
                chain_accounts.setdefault(VAULT, {"address": accounts[4].address})

        treasury = config["chains"][source_name]["accounts"][TREASURY]["address"]
        a.mint_usdc(Web3.to_checksum_address(treasury), DEMO_USDC_UNITS)
        for anvil in ours:
            anvil.set_interval_mining(1)  # then a block a second: confirmations accumulate

        iris_config = var_dir / "iris.json"
        port = free_port()
        write_config(
            iris_config,
            domains={
                d.domain: SourceDomain(
                    url, d.transmitter.address, deployed_v2[name].transmitter.address
                )
                for name, (_, d, url) in deployed.items()
            },
            attester_key_file=key_file,
            confirmations=CONFIRMATIONS,
            port=port,
            fees=FeeSchedule(),
            rate_limit=RateLimit(),
        )
        iris = subprocess.Popen(
            [sys.executable, "-m", "standins.iris", "--config", str(iris_config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        started.append(iris)
        iris_url = f"http://127.0.0.1:{port}"
        _wait_healthy(iris_url, iris)
        env[IRIS_URL_ENV] = iris_url
        config["iris_url_env"] = IRIS_URL_ENV
        path.write_text(
            "# Written by standins.local.evm and standins.local.cctp for QTG_VENUES=local.\n"
            + yaml.safe_dump(config, sort_keys=False)
        )
        env["QTG_CHAINS_CONFIG"] = str(path)
    except BaseException:
        for process in started:
            process.terminate()
        raise
    return started
