"""A second Solana RPC endpoint in front of the same local node, playing what another RPC
provider of the same chain does wrong (one of several endpoints a chain is configured with):

- ``miss_landing(signature)``: getSignatureStatuses answers ``null`` for ``signature`` at the
  node's own context slot, although it landed (a status index that lost it);
- ``trail_slots(n)``: the endpoint is ``n`` slots behind: getSlot / getBlockHeight answer
  ``n`` less, every response context slot is ``n`` less, and a status whose slot is above
  that answers ``null`` (a lagging provider);
- ``fail(method)``: ``method`` (or ``"*"``: every method) is answered with a JSON-RPC error
  ("Node is unhealthy"), without reaching the node.

Everything else passes through unchanged. The same controls are JSON-RPC methods of the proxy
(another process, a shell): ``standin_missLanding [signature]``, ``standin_trailSlots [n]``,
``standin_fail [method | null]``, ``standin_clear []``.

    with SolanaRpcProxy(node.url) as second:
        second.miss_landing(signature)
        ... list second.url as one more endpoint of the chain ...
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

UNHEALTHY = -32005  # the code real nodes answer with when they are behind / unhealthy


class SolanaRpcProxy:
    def __init__(self, upstream: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.upstream = upstream
        self._lock = threading.Lock()
        self._missed: set[str] = set()
        self._trail = 0
        self._failing: set[str] = set()
        self.calls: list[str] = []  # every method asked, in order
        self._client = httpx.Client(timeout=30.0)
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # --- controls ----------------------------------------------------------------------------

    def miss_landing(self, signature: str) -> None:
        with self._lock:
            self._missed.add(str(signature))

    def trail_slots(self, slots: int) -> None:
        with self._lock:
            self._trail = max(0, int(slots))

    def fail(self, method: str | None = "*") -> None:
        """Answer ``method`` with an error from now on (None: stop failing)."""
        with self._lock:
            if method is None:
                self._failing.clear()
            else:
                self._failing.add(method)

    def clear(self) -> None:
        with self._lock:
            self._missed.clear()
            self._trail = 0
            self._failing.clear()

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> SolanaRpcProxy:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="solana-rpc-proxy",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._client.close()

    def __enter__(self) -> SolanaRpcProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- serving -----------------------------------------------------------------------------

    def _control(self, method: str, params: list) -> Any:
        if method == "standin_missLanding":
            self.miss_landing(params[0])
        elif method == "standin_trailSlots":
            self.trail_slots(params[0] if params else 0)
        elif method == "standin_fail":
            self.fail(params[0] if params else "*")
        elif method == "standin_clear":
            self.clear()
        else:
            return None
        return {"ok": True}

    def answer(self, request: dict) -> dict:
        method = str(request.get("method", ""))
        params = request.get("params") or []
        rid = request.get("id")
        self.calls.append(method)
        if method.startswith("standin_"):
            result = self._control(method, params)
            if result is None:
                return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": method}}
            return {"jsonrpc": "2.0", "id": rid, "result": result}
        with self._lock:
            failing = method in self._failing or "*" in self._failing
            trail = self._trail
            missed = set(self._missed)
        if failing:
            error = {"code": UNHEALTHY, "message": "Node is unhealthy", "data": {}}
            return {"jsonrpc": "2.0", "id": rid, "error": error}
        answer = self._client.post(self.upstream, json=request).json()
        result = answer.get("result")
        if result is None:
            return answer
        if method in ("getSlot", "getBlockHeight") and isinstance(result, int):
            answer["result"] = max(0, result - trail)
            return answer
        if not isinstance(result, dict) or "context" not in result:
            return answer
        context_slot = max(0, int(result["context"]["slot"]) - trail)
        result["context"]["slot"] = context_slot
        if method == "getSignatureStatuses":
            signatures = params[0] if params else []
            result["value"] = [
                None
                if status is None
                or signature in missed
                or (trail and int(status.get("slot", 0)) > context_slot)
                else status
                for signature, status in zip(signatures, result["value"], strict=False)
            ]
        return answer

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    request = json.loads(body)
                    if isinstance(request, list):
                        payload: Any = [proxy.answer(item) for item in request]
                    else:
                        payload = proxy.answer(request)
                    status = 200
                except (ValueError, httpx.HTTPError) as exc:
                    payload, status = {"error": str(exc)}, 502
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
