"""Start and stop the local exchange from tests (in a thread) or as a child process, and hand
out the ccxt options that point a ccxt client at it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from ..processes import stop_child, stop_server, wait_listening
from .config import build_venues, resolve_config
from .courier import Courier
from .server import ExchangeServer

STARTUP_TIMEOUT_SECONDS = 20


class ControlError(RuntimeError):
    """The control API refused a request (bad payload, unknown withdrawal...)."""


def local_urls(exchange_id: str, base_url: str) -> dict:
    """ccxt's `urls['api']` for `exchange_id` with every entry moved onto `base_url`/<venue>,
    keeping each entry's path (https://api.binance.com/sapi/v1 -> <base>/binance/sapi/v1)."""
    import ccxt

    api = getattr(ccxt, exchange_id)().urls["api"]
    base = urlsplit(f"{base_url.rstrip('/')}/{exchange_id}")

    def move(value):
        if isinstance(value, dict):
            return {k: move(v) for k, v in value.items()}
        path = urlsplit(value).path if "://" in value else ""
        return urlunsplit((base.scheme, base.netloc, base.path + path, "", ""))

    return move(api)


def spot_error_tables(exchange_id: str) -> dict | None:
    """ccxt's binance picks its spot/wallet error table by URL prefix (https://api.binance.com/):
    at any other URL it falls back to the common table, where e.g. -4026 means BadRequest
    instead of InsufficientFunds. Merging the spot table into the common one restores the
    mapping ccxt applies against the real api.binance.com (spot and sapi share that host)."""
    if exchange_id != "binance":
        return None
    import ccxt

    spot = ccxt.binance().describe()["exceptions"]["spot"]
    return {"exact": dict(spot.get("exact", {})), "broad": dict(spot.get("broad", {}))}


class LocalExchange:
    """The local exchange on a free port: `with LocalExchange() as exchange: ...`.

    `in_process=True` serves from a thread of this process (fast, for tests);
    `in_process=False` runs `python -m standins.exchange` as a child process (for `make run`).
    """

    def __init__(
        self,
        config: dict | str | Path | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        in_process: bool = True,
        deliver_after: float | None = None,
    ) -> None:
        self.config = resolve_config(config)
        self.host = host
        self.port = port
        self.in_process = in_process
        # Seconds after which withdrawals are broadcast and delivered (courier.py); None: never.
        self.deliver_after = deliver_after
        self.base_url: str | None = None
        self._server: ExchangeServer | None = None
        self._thread: threading.Thread | None = None
        self._process: subprocess.Popen | None = None
        self._config_file: str | None = None

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> LocalExchange:
        if self.in_process:
            self._server = ExchangeServer((self.host, self.port), build_venues(self.config))
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name="local-exchange",
                daemon=True,
            )
            self._thread.start()
            if self.deliver_after is not None:
                Courier(
                    self._server.venues, self._server.stopping, deliver_after=self.deliver_after
                ).start()
            self.base_url = self._server.base_url
        else:
            self._start_process()
        return self

    def _start_process(self) -> None:
        fd, self._config_file = tempfile.mkstemp(prefix="local-exchange-", suffix=".json")
        with os.fdopen(fd, "w") as handle:
            json.dump(self.config, handle)
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "standins.exchange",
                "--host",
                self.host,
                "--port",
                str(self.port),
                "--config",
                self._config_file,
                *(
                    ["--deliver-after", str(self.deliver_after)]
                    if self.deliver_after is not None
                    else []
                ),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            self.base_url = wait_listening(
                self._process, what="local exchange", timeout=STARTUP_TIMEOUT_SECONDS
            )
        except RuntimeError:
            self._process = None
            self.stop()
            raise

    def stop(self) -> None:
        if self._server is not None:
            stop_server(self._server, self._thread)
            self._server = None
        if self._process is not None:
            stop_child(self._process)
            self._process = None
        if self._config_file is not None:
            Path(self._config_file).unlink(missing_ok=True)
            self._config_file = None

    def __enter__(self) -> LocalExchange:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # --- ccxt ------------------------------------------------------------------------------

    def credentials(self, exchange_id: str, account: str = "main") -> dict:
        spec = self.config[exchange_id]["accounts"][account]
        return {"apiKey": spec["api_key"], "secret": spec["secret"]}

    def ccxt_config(self, exchange_id: str, account: str = "main", **overrides) -> dict:
        """Options for `getattr(ccxt, exchange_id)(...)`: every `urls['api']` entry on the
        local exchange, the account's credentials, no client-side rate limiting."""
        config = {
            **self.credentials(exchange_id, account),
            "urls": {"api": local_urls(exchange_id, self.base_url)},
            "enableRateLimit": False,
            "timeout": 10_000,
        }
        tables = spot_error_tables(exchange_id)
        if tables is not None:
            config["exceptions"] = tables
        config.update(overrides)
        return config

    # --- control API -----------------------------------------------------------------------

    def control(self, method: str, path: str, payload: dict | None = None) -> dict:
        data = json.dumps(payload).encode() if payload is not None else None
        request = urllib.request.Request(
            f"{self.base_url}/_control/{path.lstrip('/')}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise ControlError(exc.read().decode()) from None

    def state(self, exchange_id: str) -> dict:
        return self.control("GET", "state")[exchange_id]

    def reset(self) -> None:
        self.control("POST", "reset")

    def deliver(self, older_than: float = 0) -> list[dict]:
        """Broadcast the withdrawals accepted ``older_than`` seconds ago or more and credit the
        deposits they make (see courier.py); what was delivered."""
        return self.control("POST", "deliver", {"older_than": older_than})["delivered"]

    def credit_deposit(self, exchange_id: str, **deposit) -> dict:
        """account (default main), coin, network, amount, address, txid, tag, status."""
        return self.control("POST", f"{exchange_id}/deposits", deposit)

    def complete_deposit(self, exchange_id: str, txid: str) -> dict:
        return self.control("POST", f"{exchange_id}/deposits/complete", {"txid": txid})

    def settle_withdrawal(self, exchange_id: str, **settlement) -> dict:
        """id or client_id; status (default completed); txid (generated when completing);
        reverse: a completed withdrawal fails afterwards (status failed/rejected/canceled)."""
        return self.control("POST", f"{exchange_id}/withdrawals/settle", settlement)

    def set_balance(self, exchange_id: str, coin: str, amount: str, account: str = "main") -> dict:
        payload = {"account": account, "coin": coin, "amount": amount}
        return self.control("POST", f"{exchange_id}/balances", payload)

    def set_whitelist(
        self, exchange_id: str, addresses: list[str] | None, account: str = "main"
    ) -> dict:
        payload = {"account": account, "addresses": addresses}
        return self.control("POST", f"{exchange_id}/whitelist", payload)

    def add_fault(self, exchange_id: str, kind: str, **fault) -> dict:
        """kind: maintenance | timeout_after_accept | drop_after_accept | slow_before_accept
        | answer_other_id | empty_accept; endpoint (default every endpoint), times (default
        until cleared), hold_seconds, account (default every account of the venue)."""
        return self.control("POST", f"{exchange_id}/faults", {"kind": kind, **fault})

    def release_holds(self, exchange_id: str) -> int:
        """Let the withdraw requests a slow_before_accept fault holds now go on at once; how
        many there were."""
        return self.control("POST", f"{exchange_id}/faults/release")["released"]

    def clear_faults(self, exchange_id: str) -> dict:
        return self.control("DELETE", f"{exchange_id}/faults")

    def configure(self, exchange_id: str, **settings) -> dict:
        """withdrawal_visibility_seconds, clock_offset_ms, rate_limit
        ({limit, window_seconds, ban_after, ban_seconds} or None)."""
        return self.control("POST", f"{exchange_id}/settings", settings)
