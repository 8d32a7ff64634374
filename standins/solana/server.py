"""The HTTP server: JSON-RPC 2.0 on `/` (single calls and batches), the unauthenticated control
API under `/_control` that tests use, and the clock thread that produces slots."""

from __future__ import annotations

import json
import logging
import threading
import time
from decimal import Decimal, InvalidOperation
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from solders.pubkey import Pubkey

from .ledger import Ledger, LedgerError
from .rpc import RpcError, SolanaRpc

logger = logging.getLogger("standins.solana")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600


class SolanaServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], ledger: Ledger) -> None:
        super().__init__(address, _Handler)
        self.ledger = ledger
        self.rpc = SolanaRpc(ledger)
        self.stopping = threading.Event()
        self._clock = threading.Thread(target=self._run_clock, name="solana-clock", daemon=True)
        self._clock.start()

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def _run_clock(self) -> None:
        """A slot every `slot_seconds` while not paused, measured from the start so that slow
        ticks do not make the chain drift."""
        interval = self.ledger.settings.slot_seconds
        deadline = time.monotonic() + interval
        while not self.stopping.wait(max(0.0, deadline - time.monotonic())):
            deadline += interval
            if not self.ledger.paused:
                self.ledger.tick()

    def server_close(self) -> None:
        self.stopping.set()
        super().server_close()


class _Handler(BaseHTTPRequestHandler):
    server: SolanaServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args) -> None:
        logger.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/_control/state":
            self._send(200, self.server.ledger.snapshot())
        else:
            self._send(404, {"error": "not found"})

    def do_DELETE(self) -> None:
        if self.path.rstrip("/") == "/_control/faults":
            self.server.ledger.clear_faults()
            self._send(200, {"faults": "cleared"})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if path.startswith("/_control/"):
            self._control(path.removeprefix("/_control/").strip("/"), body)
        elif path in ("", "/"):
            self._json_rpc(body)
        else:
            self._send(404, {"error": "not found"})

    # --- JSON-RPC ----------------------------------------------------------------------------

    def _json_rpc(self, body: bytes) -> None:
        try:
            payload = json.loads(body)
        except ValueError:
            self._send(200, _error(None, RpcError(PARSE_ERROR, "Parse error")))
            return
        if isinstance(payload, list):
            answer = [self._call(item) for item in payload]
        else:
            answer = self._call(payload)
        self._send(200, answer)

    def _call(self, request: object) -> dict:
        if not isinstance(request, dict) or not isinstance(request.get("method"), str):
            return _error(None, RpcError(INVALID_REQUEST, "Invalid request"))
        request_id = request.get("id")
        method = request["method"]
        try:
            result = self.server.rpc.call(method, request.get("params") or [])
            answer = {"jsonrpc": "2.0", "result": result, "id": request_id}
        except RpcError as exc:
            answer = _error(request_id, exc)
        # "Slow" answers after the work is done: a send that times out has still been taken.
        delay = self.server.ledger.delay_for(method)
        if delay:
            time.sleep(delay)
        return answer

    # --- control API -------------------------------------------------------------------------

    def _control(self, action: str, body: bytes) -> None:
        ledger = self.server.ledger
        try:
            data = json.loads(body) if body else {}
            if not isinstance(data, dict):
                raise LedgerError("body must be a JSON object")
            result = _CONTROL[action](ledger, data) if action in _CONTROL else None
        except (LedgerError, KeyError, ValueError, TypeError, InvalidOperation) as exc:
            self._send(400, {"error": f"{type(exc).__name__}: {exc}"})
            return
        if action not in _CONTROL:
            self._send(404, {"error": f"unknown control action {action!r}"})
        else:
            self._send(200, result)

    def _send(self, status: int, payload: object) -> None:
        body = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up waiting (a "slow" answer): what it asked has been done anyway.
            logger.debug("client went away before the answer")


def _error(request_id, exc: RpcError) -> dict:
    return {"jsonrpc": "2.0", "error": exc.as_json(), "id": request_id}


def _key(data: dict, name: str) -> Pubkey:
    return Pubkey.from_string(data[name])


def _pause(ledger: Ledger, paused: bool) -> dict:
    ledger.paused = paused
    return {"paused": paused, "slot": ledger.slot}


_CONTROL = {
    "airdrop": lambda ledger, d: {
        "lamports": ledger.airdrop(_key(d, "address"), int(d["lamports"]))
    },
    "mints": lambda ledger, d: {"mint": str(ledger.create_mint(int(d.get("decimals", 6))))},
    "token-accounts": lambda ledger, d: {
        "address": str(ledger.create_token_account(_key(d, "mint"), _key(d, "owner")))
    },
    "mint-to": lambda ledger, d: {
        "address": str(ledger.mint_to(_key(d, "mint"), _key(d, "owner"), Decimal(str(d["amount"]))))
    },
    "drop-next": lambda ledger, d: ledger.drop_next(int(d.get("count", 1))) or {"ok": True},
    "hold-next": lambda ledger, d: ledger.hold_next(int(d["until_slot"])) or {"ok": True},
    "lag-status": lambda ledger, d: (
        ledger.lag_status(str(d["signature"]), float(d["seconds"])) or {"ok": True}
    ),
    "slow": lambda ledger, d: (
        ledger.set_slow(float(d["seconds"]), d.get("method") or "*", d.get("times")) or {"ok": True}
    ),
    "advance": lambda ledger, d: {"slot": ledger.advance(int(d.get("slots", 1)))},
    "expire-blockhashes": lambda ledger, d: {"slot": ledger.expire_blockhashes()},
    "pause": lambda ledger, d: _pause(ledger, True),
    "resume": lambda ledger, d: _pause(ledger, False),
}
