"""Start and stop the local Solana node from tests (in a thread) or as a child process, and
drive its control API."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import asdict
from decimal import Decimal

from ..processes import stop_child, stop_server, wait_listening
from .ledger import Ledger, Settings
from .server import SolanaServer

STARTUP_TIMEOUT_SECONDS = 20


class ControlError(RuntimeError):
    """The control API refused a request (bad payload, unknown mint...)."""


class LocalSolana:
    """The local node on a free port: `with LocalSolana(Settings(slot_seconds=0.05)) as node:`.

    `in_process=True` serves from a thread of this process (fast, for tests);
    `in_process=False` runs `python -m standins.solana` as a child process (for `make run` and
    for tests whose workers live in other processes).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        in_process: bool = True,
    ) -> None:
        self.settings = settings or Settings()
        self.host = host
        self.port = port
        self.in_process = in_process
        self.url: str | None = None
        self._server: SolanaServer | None = None
        self._thread: threading.Thread | None = None
        self._process: subprocess.Popen | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> LocalSolana:
        if self.in_process:
            self._server = SolanaServer((self.host, self.port), Ledger(self.settings))
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name="local-solana",
                daemon=True,
            )
            self._thread.start()
            self.url = self._server.base_url
        else:
            self._start_process()
        return self

    def _start_process(self) -> None:
        options = {k.replace("_", "-"): v for k, v in asdict(self.settings).items()}
        command = [sys.executable, "-m", "standins.solana", "--host", self.host]
        command += ["--port", str(self.port)]
        for name, value in options.items():
            command += [f"--{name}", str(value)]
        self._process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        try:
            self.url = wait_listening(
                self._process, what="local solana", timeout=STARTUP_TIMEOUT_SECONDS
            )
        except RuntimeError:
            self._process = None
            raise

    def stop(self) -> None:
        if self._server is not None:
            stop_server(self._server, self._thread)
            self._server = None
        if self._process is not None:
            stop_child(self._process)
            self._process = None

    def __enter__(self) -> LocalSolana:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # --- control API -------------------------------------------------------------------------

    def control(self, method: str, action: str, payload: dict | None = None) -> dict:
        data = json.dumps(payload or {}).encode() if method == "POST" else None
        request = urllib.request.Request(
            f"{self.url}/_control/{action}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise ControlError(exc.read().decode()) from None

    def state(self) -> dict:
        """Slots per commitment, queued and landed transactions, every send and its outcome."""
        return self.control("GET", "state")

    def airdrop(self, address, lamports: int) -> int:
        """Credit `lamports` at once; returns the new balance."""
        payload = {"address": str(address), "lamports": lamports}
        return self.control("POST", "airdrop", payload)["lamports"]

    def create_mint(self, decimals: int = 6) -> str:
        """A new SPL mint (authority: the node's faucet); returns its address."""
        return self.control("POST", "mints", {"decimals": decimals})["mint"]

    def create_token_account(self, mint, owner) -> str:
        """The owner's associated token account for `mint` (created when missing)."""
        payload = {"mint": str(mint), "owner": str(owner)}
        return self.control("POST", "token-accounts", payload)["address"]

    def mint_to(self, mint, owner, amount: Decimal | str) -> str:
        """Mint `amount` whole tokens into the owner's associated token account."""
        payload = {"mint": str(mint), "owner": str(owner), "amount": str(amount)}
        return self.control("POST", "mint-to", payload)["address"]

    def drop_next(self, count: int = 1) -> None:
        """The next `count` sent transactions are accepted (signature returned) and never land,
        however often their bytes are sent again."""
        self.control("POST", "drop-next", {"count": count})

    def hold_next(self, until_slot: int) -> None:
        """The next sent transaction lands at `until_slot`, if its blockhash is valid then."""
        self.control("POST", "hold-next", {"until_slot": until_slot})

    def lag_status(self, signature: str, seconds: float) -> None:
        """getSignatureStatuses misses the landing of ``signature`` for ``seconds`` (its
        context slot stuck at now)."""
        self.control("POST", "lag-status", {"signature": signature, "seconds": seconds})

    def slow(self, seconds: float, method: str | None = None, times: int | None = None) -> None:
        """Answer `method` (every method by default) `seconds` late, after doing the work."""
        self.control("POST", "slow", {"seconds": seconds, "method": method, "times": times})

    def clear_faults(self) -> None:
        self.control("DELETE", "faults")

    def advance(self, slots: int = 1) -> int:
        """Produce `slots` blocks now; returns the new slot."""
        return self.control("POST", "advance", {"slots": slots})["slot"]

    def expire_blockhashes(self) -> int:
        """Jump past every blockhash handed out so far; returns the new slot."""
        return self.control("POST", "expire-blockhashes")["slot"]

    def pause(self) -> int:
        """Stop the clock (slots then advance only through `advance`); returns the slot."""
        return self.control("POST", "pause")["slot"]

    def resume(self) -> int:
        return self.control("POST", "resume")["slot"]
