"""Our own Solidity contracts for the devchain: compile (through node + solc JS) and deploy.

The sources are in ``standins/contracts/``. :func:`load_artifacts` returns their ABIs and
bytecode from ``standins/build/contracts.json``, compiling first (``node standins/compile.js``)
when the build is missing or was made from other sources or another compiler version.

Transactions here are signed locally with the sender's key (as QTG's executors sign), never by
the node, so the same helpers work against any JSON-RPC node.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eth_account.signers.local import LocalAccount
from web3 import Web3
from web3.contract import Contract
from web3.exceptions import ContractLogicError
from web3.types import TxReceipt

from standins.anvil import NODE_MODULES, STANDINS_DIR, DevAccount

CONTRACTS_DIR = STANDINS_DIR / "contracts"
COMPILE_SCRIPT = STANDINS_DIR / "compile.js"
BUILD_FILE = STANDINS_DIR / "build" / "contracts.json"
SOLC_PACKAGE = NODE_MODULES / "solc" / "package.json"

_compile_lock = threading.Lock()


class CompilerNotInstalled(RuntimeError):
    """node or the solc npm package is missing (run `npm ci --prefix standins`)."""


class CompileError(RuntimeError):
    """solc refused the sources."""


class TransactionFailed(RuntimeError):
    """A transaction was mined with status 0."""

    def __init__(self, receipt: TxReceipt):
        self.receipt = receipt
        super().__init__(f"transaction {receipt['transactionHash'].to_0x_hex()} reverted")


@dataclass(frozen=True)
class Artifact:
    name: str
    abi: list[dict[str, Any]]
    bytecode: str  # 0x-prefixed creation code


def compiler_missing_reason() -> str | None:
    """Why the contracts cannot be compiled here, or None."""
    if shutil.which("node") is None:
        return "node is not on PATH"
    if not SOLC_PACKAGE.is_file():
        return f"solc is not installed in {NODE_MODULES}; run `npm ci --prefix standins`"
    return None


def sources_digest() -> str:
    """SHA-256 over the Solidity sources, the compile script and the solc version."""
    digest = hashlib.sha256()
    for path in [*sorted(CONTRACTS_DIR.glob("*.sol")), COMPILE_SCRIPT]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    if SOLC_PACKAGE.is_file():
        digest.update(json.loads(SOLC_PACKAGE.read_text())["version"].encode())
    return digest.hexdigest()


def compile_contracts(out: Path = BUILD_FILE) -> None:
    """Run ``node compile.js`` now (whatever the state of the build)."""
    reason = compiler_missing_reason()
    if reason:
        raise CompilerNotInstalled(reason)
    result = subprocess.run(
        ["node", str(COMPILE_SCRIPT), "--out", str(out), "--digest", sources_digest()],
        cwd=STANDINS_DIR,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode != 0:
        raise CompileError(result.stderr.strip() or result.stdout.strip())


def _read_build(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def build_is_fresh(build_file: Path = BUILD_FILE) -> bool:
    """Whether `build_file` was compiled from the current sources."""
    build = _read_build(build_file)
    return build is not None and build.get("sourcesDigest") == sources_digest()


def load_artifacts(build_file: Path = BUILD_FILE) -> Mapping[str, Artifact]:
    """All compiled contracts by name, compiling first if the build is missing or stale."""
    with _compile_lock:
        expected = sources_digest()
        build = _read_build(build_file)
        if build is None or build.get("sourcesDigest") != expected:
            compile_contracts(build_file)
            build = _read_build(build_file)
            if build is None or build.get("sourcesDigest") != expected:
                raise CompileError(f"{build_file} is not the build of the current sources")
    return {name: Artifact(name, c["abi"], c["bytecode"]) for name, c in build["contracts"].items()}


@functools.cache
def artifacts() -> Mapping[str, Artifact]:
    """:func:`load_artifacts`, once per process."""
    return load_artifacts()


# -- sending ---------------------------------------------------------------------------------


def _signer(sender: DevAccount | LocalAccount) -> LocalAccount:
    return sender.signer if isinstance(sender, DevAccount) else sender


def send_transaction(
    w3: Web3,
    sender: DevAccount | LocalAccount,
    tx: dict[str, Any],
    *,
    wait: bool = True,
    check: bool = True,
    timeout: float = 30,
) -> TxReceipt | bytes:
    """Fill in what `tx` leaves out (nonce, gas, EIP-1559 fees, chain id), sign it with the
    sender's key and send the raw bytes. With `wait`, returns the receipt (raising
    :class:`TransactionFailed` on status 0 when `check`); without, returns the hash."""
    account = _signer(sender)
    tx = {"from": account.address, **tx}
    tx.setdefault("chainId", w3.eth.chain_id)
    tx.setdefault("nonce", w3.eth.get_transaction_count(account.address, "pending"))
    if "gasPrice" not in tx:
        tx.setdefault("maxPriorityFeePerGas", w3.to_wei(1, "gwei"))
        if "maxFeePerGas" not in tx:
            base_fee = w3.eth.get_block("latest")["baseFeePerGas"]
            tx["maxFeePerGas"] = 2 * base_fee + tx["maxPriorityFeePerGas"]
    if "gas" not in tx:
        tx["gas"] = w3.eth.estimate_gas(tx)
    signed = account.sign_transaction(tx)
    tx_hash = w3.eth.send_raw_transaction(signed.raw_transaction)
    if not wait:
        return tx_hash
    receipt = w3.eth.wait_for_transaction_receipt(tx_hash, timeout=timeout, poll_latency=0.02)
    if check and receipt["status"] != 1:
        raise TransactionFailed(receipt)
    return receipt


def transact(
    w3: Web3, sender: DevAccount | LocalAccount, call: Any, **tx: Any
) -> TxReceipt | bytes:
    """Send a contract function call, e.g. ``transact(w3, alice, token.functions.mint(a, 1))``.

    Gas is estimated by the node, so a call that would revert raises web3's
    ``ContractLogicError`` (with the revert reason) before anything is signed; pass ``gas=`` to
    send it anyway and get a mined, failed transaction."""
    wait = tx.pop("wait", True)
    check = tx.pop("check", True)
    built = call.build_transaction({"from": _signer(sender).address, **tx})
    return send_transaction(w3, sender, built, wait=wait, check=check)


def replay_revert_reason(w3: Web3, tx_hash: bytes | str) -> str | None:
    """Why a mined transaction reverted, by re-running it as ``eth_call`` on the state its block
    started from (what explorers do). None if the replay does not revert (the revert depended on
    a transaction earlier in the same block). The message reads e.g.
    ``execution reverted: TestToken: transfers are blocked``."""
    tx = w3.eth.get_transaction(tx_hash)
    call = {
        "from": tx["from"],
        "to": tx["to"],
        "data": tx["input"],
        "value": tx["value"],
        "gas": tx["gas"],
    }
    try:
        w3.eth.call(call, block_identifier=tx["blockNumber"] - 1)
    except ContractLogicError as exc:
        return exc.message
    return None


def deploy(w3: Web3, sender: DevAccount | LocalAccount, name: str, *args: Any) -> Contract:
    """Deploy contract `name` with constructor `args`; returns the bound contract."""
    artifact = artifacts()[name]
    factory = w3.eth.contract(abi=artifact.abi, bytecode=artifact.bytecode)
    built = factory.constructor(*args).build_transaction({"from": _signer(sender).address})
    receipt = send_transaction(w3, sender, built)
    return w3.eth.contract(address=receipt["contractAddress"], abi=artifact.abi)


def at(w3: Web3, name: str, address: str) -> Contract:
    """Contract `name` already deployed at `address`."""
    return w3.eth.contract(address=Web3.to_checksum_address(address), abi=artifacts()[name].abi)


def deploy_test_token(
    w3: Web3, owner: DevAccount | LocalAccount, *, decimals: int, symbol: str = "TST"
) -> Contract:
    """A TestToken (owner mints; transfers can be blocked) with the given decimals."""
    return deploy(w3, owner, "TestToken", f"Test token {symbol}", symbol, decimals)
