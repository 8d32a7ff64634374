"""A local anvil devchain for tests: start, drive (mine, reorg, drop, snapshot) and stop it.

anvil comes from the npm package ``@foundry-rs/anvil`` pinned in ``standins/package.json``
(``npm ci --prefix standins``, run by ``make install``); its binary ships inside the registry
package for each platform, so nothing is downloaded at run time.

    with Anvil(chain_id=31337) as chain:
        w3 = chain.web3
        alice, bob = chain.accounts[:2]
        ...

Each :class:`Anvil` is its own process on a free port, stopped on exit (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from eth_account import Account
from eth_account.signers.local import LocalAccount
from web3 import Web3

STANDINS_DIR = Path(__file__).resolve().parent
NODE_MODULES = STANDINS_DIR / "node_modules"

# anvil's default dev accounts come from this well-known mnemonic (public: never use on a real
# chain). Account i is at m/44'/60'/0'/0/i and holds `balance_ether` ETH at genesis.
DEV_MNEMONIC = "test test test test test test test test test test test junk"
DEV_DERIVATION_PATH = "m/44'/60'/0'/0/{}"

# (sys.platform, machine) -> the npm package that carries the binary, as the launcher script of
# @foundry-rs/anvil maps process.platform/process.arch.
_PLATFORM_PACKAGES = {
    ("linux", "x86_64"): "anvil-linux-amd64",
    ("linux", "amd64"): "anvil-linux-amd64",
    ("linux", "aarch64"): "anvil-linux-arm64",
    ("linux", "arm64"): "anvil-linux-arm64",
    ("darwin", "x86_64"): "anvil-darwin-amd64",
    ("darwin", "arm64"): "anvil-darwin-arm64",
    ("win32", "amd64"): "anvil-win32-amd64",
    ("win32", "x86_64"): "anvil-win32-amd64",
}


# Extra arguments for a test session's devchain: every block's state kept in memory. A session
# mines thousands of blocks (each test's rewound by a snapshot), and anvil otherwise lets the
# states of the oldest blocks go, those of the contracts deployed at its start included; a
# reorg down to such a block then rebuilds the chain on a state without those contracts.
KEEP_EVERY_STATE = ("--prune-history", "100000")


class AnvilNotInstalled(RuntimeError):
    """The anvil binary is not in standins/node_modules (run `npm ci --prefix standins`)."""


class AnvilError(RuntimeError):
    """anvil did not start, or stopped answering."""


class RPCError(RuntimeError):
    """A JSON-RPC call returned an error object."""

    def __init__(self, method: str, error: dict[str, Any]):
        self.method = method
        self.code = error.get("code")
        self.message = error.get("message", "")
        self.data = error.get("data")
        super().__init__(f"{method}: {self.message} (code {self.code})")


def find_anvil() -> Path:
    """The anvil binary installed by ``npm ci --prefix standins`` for this platform."""
    machine = platform.machine().lower()
    package = _PLATFORM_PACKAGES.get((sys.platform, machine))
    if package is None:
        raise AnvilNotInstalled(f"@foundry-rs/anvil has no binary for {sys.platform}/{machine}")
    name = "anvil.exe" if sys.platform == "win32" else "anvil"
    candidates = [
        NODE_MODULES / "@foundry-rs" / package / "bin" / name,
        # Where the package's postinstall puts the binary when the optional platform package
        # could not be installed.
        NODE_MODULES / "@foundry-rs" / "anvil" / "dist" / name,
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise AnvilNotInstalled(
        f"anvil not found in {NODE_MODULES} (looked for @foundry-rs/{package}/bin/{name}); "
        "run `make install` or `npm ci --prefix standins`"
    )


def anvil_missing_reason() -> str | None:
    """Why devchain tests cannot run here, or None when anvil is installed."""
    try:
        find_anvil()
    except AnvilNotInstalled as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class DevAccount:
    """One of anvil's funded dev accounts."""

    index: int
    address: str  # checksummed
    private_key: str  # 0x-prefixed hex

    @property
    def signer(self) -> LocalAccount:
        return Account.from_key(self.private_key)


@functools.cache
def dev_accounts(count: int = 10) -> tuple[DevAccount, ...]:
    """The first `count` accounts of :data:`DEV_MNEMONIC`, as anvil funds them."""
    Account.enable_unaudited_hdwallet_features()
    accounts = []
    for i in range(count):
        acct = Account.from_mnemonic(DEV_MNEMONIC, account_path=DEV_DERIVATION_PATH.format(i))
        accounts.append(DevAccount(i, acct.address, acct.key.to_0x_hex()))
    return tuple(accounts)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Anvil:
    """One anvil process: a devchain with its own chain id on a free local port.

    ``automine=True`` (anvil's default) mines a block per transaction as it arrives;
    ``automine=False`` starts with ``--no-mining`` (transactions wait in the mempool until
    :meth:`mine`); ``block_time`` mines a block every that many seconds instead.
    ``finalized_lag`` (even): anvil's ``finalized`` block tag trails the head by that many
    blocks (anvil's own default is 64; ``--slots-in-an-epoch`` is half of it). A tag that
    trails further, for a while, is played by ``standins.rpc_proxy`` (``trail_finalized``).
    """

    def __init__(
        self,
        chain_id: int = 31337,
        *,
        automine: bool = True,
        block_time: float | None = None,
        accounts: int = 10,
        balance_ether: int = 10_000,
        base_fee_wei: int | None = None,
        hardfork: str | None = None,
        finalized_lag: int | None = None,
        startup_timeout: float = 20.0,
        extra_args: Iterable[str] = (),
    ):
        if block_time is not None and not automine:
            raise ValueError("block_time and automine=False are exclusive")
        self.chain_id = chain_id
        self.automine = automine
        self.block_time = block_time
        self.account_count = accounts
        self.balance_ether = balance_ether
        self.base_fee_wei = base_fee_wei
        self.hardfork = hardfork
        if finalized_lag is not None and (finalized_lag < 2 or finalized_lag % 2):
            raise ValueError("finalized_lag must be an even number >= 2")
        self.finalized_lag = finalized_lag
        self.startup_timeout = startup_timeout
        self.extra_args = tuple(extra_args)
        self.port: int | None = None
        self.process: subprocess.Popen | None = None
        self._stderr_path: str | None = None
        self._client: httpx.Client | None = None
        self._web3: Web3 | None = None
        self._request_id = 0

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        if self.port is None:
            raise AnvilError("anvil is not started")
        return f"http://127.0.0.1:{self.port}"

    def _command(self, port: int) -> list[str]:
        cmd = [
            str(find_anvil()),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--chain-id",
            str(self.chain_id),
            "--accounts",
            str(self.account_count),
            "--balance",
            str(self.balance_ether),
            "--mnemonic",
            DEV_MNEMONIC,
            "--silent",
        ]
        if not self.automine:
            cmd.append("--no-mining")
        if self.block_time is not None:
            cmd += ["--block-time", str(self.block_time)]
        if self.base_fee_wei is not None:
            cmd += ["--block-base-fee-per-gas", str(self.base_fee_wei)]
        if self.hardfork is not None:
            cmd += ["--hardfork", self.hardfork]
        if self.finalized_lag is not None:
            cmd += ["--slots-in-an-epoch", str(self.finalized_lag // 2)]
        return cmd + list(self.extra_args)

    def start(self) -> Anvil:
        if self.process is not None:
            raise AnvilError("anvil is already started")
        last_error = ""
        # A free port can be taken between probing and binding; try a few.
        for _ in range(3):
            port = free_port()
            fd, self._stderr_path = tempfile.mkstemp(prefix="anvil-", suffix=".log")
            with os.fdopen(fd, "wb") as stderr:
                self.process = subprocess.Popen(
                    self._command(port),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                    start_new_session=True,  # a Ctrl-C in the test run is not sent twice
                )
            self.port = port
            self._client = httpx.Client(base_url=self.url, timeout=10.0)
            if self._wait_ready():
                return self
            last_error = self._stderr_tail()
            self._cleanup()
            if "Address already in use" not in last_error:
                break
        raise AnvilError(f"anvil did not start: {last_error or 'no output'}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                if int(self.rpc("eth_chainId"), 16) == self.chain_id:
                    return True
            except (httpx.TransportError, RPCError):
                pass
            time.sleep(0.02)
        return False

    def _stderr_tail(self) -> str:
        if not self._stderr_path:
            return ""
        with contextlib.suppress(OSError), open(self._stderr_path, errors="replace") as f:
            return f.read()[-2000:].strip()
        return ""

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate the process (SIGKILL if it has not exited after `timeout` seconds)."""
        self._cleanup(timeout)

    def _cleanup(self, timeout: float = 5.0) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        self._web3 = None
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=timeout)
            self.process = None
        if self._stderr_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._stderr_path)
            self._stderr_path = None
        self.port = None

    def __enter__(self) -> Anvil:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    # -- access ------------------------------------------------------------------------------

    @property
    def web3(self) -> Web3:
        """A web3 client on this chain (one per Anvil, created on first use)."""
        if self._web3 is None:
            self._web3 = Web3(Web3.HTTPProvider(self.url, request_kwargs={"timeout": 10}))
        return self._web3

    @property
    def accounts(self) -> tuple[DevAccount, ...]:
        """The funded dev accounts (anvil's well-known mnemonic)."""
        return dev_accounts(self.account_count)

    def rpc(self, method: str, *params: Any) -> Any:
        """One raw JSON-RPC call; raises :class:`RPCError` on an error response."""
        if self._client is None:
            raise AnvilError("anvil is not started")
        self._request_id += 1
        response = self._client.post(
            "/",
            json={"jsonrpc": "2.0", "id": self._request_id, "method": method, "params": params},
        )
        response.raise_for_status()
        body = response.json()
        if body.get("error") is not None:
            raise RPCError(method, body["error"])
        return body.get("result")

    # -- chain control -----------------------------------------------------------------------

    def block_number(self, tag: str = "latest") -> int:
        """The number of the ``latest`` block (or of ``finalized``, ``safe``)."""
        if tag == "latest":
            return int(self.rpc("eth_blockNumber"), 16)
        return int(self.rpc("eth_getBlockByNumber", tag, False)["number"], 16)

    def mine(self, blocks: int = 1) -> None:
        """Mine `blocks` blocks now (with whatever the mempool holds), automine on or off."""
        self.rpc("anvil_mine", hex(blocks))

    def set_automine(self, enabled: bool) -> None:
        """Automine on: each transaction is mined as it arrives. Off: they wait for :meth:`mine`."""
        self.rpc("evm_setAutomine", enabled)

    def get_automine(self) -> bool:
        return bool(self.rpc("anvil_getAutomine"))

    @contextlib.contextmanager
    def manual_mining(self) -> Iterator[Anvil]:
        """Automine off inside the block, back to what it was after."""
        previous = self.get_automine()
        self.set_automine(False)
        try:
            yield self
        finally:
            self.set_automine(previous)

    def set_interval_mining(self, seconds: float) -> None:
        """Mine a block every `seconds` (0 switches interval mining off)."""
        self.rpc("evm_setIntervalMining", seconds)

    def reorg(self, depth: int, txs: Iterable[tuple[str | bytes, int]] = ()) -> None:
        """Replace the last `depth` blocks with new ones (the head height stays the same).

        `txs` are (raw signed transaction, block offset) pairs to include in the replacement
        blocks (offset 0 is the first replaced block). Transactions of the removed blocks that
        are not in `txs` disappear: they are neither in the new blocks nor in the mempool.
        """
        pairs = [[_hex(raw), offset] for raw, offset in txs]
        self.rpc("anvil_reorg", depth, pairs)

    def rollback(self, depth: int = 1) -> None:
        """Remove the last `depth` blocks (head height goes down; their txs are gone)."""
        self.rpc("anvil_rollback", depth)

    def drop_transaction(self, tx_hash: str | bytes) -> str | None:
        """Remove a pending transaction from the mempool; returns its hash or None if absent."""
        return self.rpc("anvil_dropTransaction", _hex(tx_hash))

    def drop_all_transactions(self) -> None:
        self.rpc("anvil_dropAllTransactions")

    def pending_transaction_hashes(self) -> list[str]:
        """Hashes of the transactions waiting in the mempool (txpool_content, pending part)."""
        content = self.rpc("txpool_content")
        return [tx["hash"] for by_nonce in content["pending"].values() for tx in by_nonce.values()]

    def snapshot(self) -> str:
        """Save the chain state; :meth:`revert` returns to it (once: the id is then used up)."""
        return self.rpc("evm_snapshot")

    def revert(self, snapshot_id: str) -> bool:
        return bool(self.rpc("evm_revert", snapshot_id))

    def set_next_block_base_fee(self, wei: int) -> None:
        self.rpc("anvil_setNextBlockBaseFeePerGas", hex(wei))

    def set_balance(self, address: str, wei: int) -> None:
        self.rpc("anvil_setBalance", address, hex(wei))

    def increase_time(self, seconds: int) -> None:
        self.rpc("evm_increaseTime", seconds)


def _hex(value: str | bytes) -> str:
    if isinstance(value, bytes | bytearray):
        return "0x" + bytes(value).hex()
    return value if value.startswith("0x") else "0x" + value
