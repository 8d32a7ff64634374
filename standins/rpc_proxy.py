"""A JSON-RPC proxy in front of a devchain that can lose answers: the request reaches the
chain, the caller never hears back (what a timeout after the node accepted a transaction looks
like). Everything else passes through unchanged.

    with LossyRpcProxy(chain.url) as proxy:
        proxy.lose_response("eth_sendRawTransaction", times=1)
        ... point the product at proxy.url ...
        proxy.lost  # [(method, params)] whose answers were lost
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx


class LossyRpcProxy:
    def __init__(self, upstream: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.upstream = upstream
        self._lock = threading.Lock()
        self._lose: dict[str, int] = {}
        self.lost: list[tuple[str, Any]] = []
        self._client = httpx.Client(timeout=30.0)
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def lose_response(self, method: str, *, times: int = 1) -> None:
        """The next ``times`` calls of ``method`` reach the chain; their answers are lost
        (the caller gets a 502 from the proxy)."""
        with self._lock:
            self._lose[method] = times

    def _should_lose(self, method: str) -> bool:
        with self._lock:
            left = self._lose.get(method, 0)
            if left <= 0:
                return False
            self._lose[method] = left - 1
            return True

    def start(self) -> LossyRpcProxy:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._client.close()

    def __enter__(self) -> LossyRpcProxy:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    request = json.loads(body)
                except ValueError:
                    request = {}
                method = request.get("method", "") if isinstance(request, dict) else ""
                answer = proxy._client.post(
                    proxy.upstream, content=body, headers={"Content-Type": "application/json"}
                )
                if method and proxy._should_lose(method):
                    proxy.lost.append((method, request.get("params")))
                    data, status = b'{"error": "upstream answer lost"}', 502
                else:
                    data, status = answer.content, answer.status_code
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
