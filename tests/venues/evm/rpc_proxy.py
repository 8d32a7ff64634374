"""A JSON-RPC proxy in front of anvil that can lose answers: a request for a stalled method
is held past the client's timeout, after being forwarded (the node acted, the answer is lost)
or not (the node never heard of it); or, for a raw transaction, answered with its hash and
never passed on (a node that accepts and never propagates)."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
from eth_utils import keccak


class RPCProxy:
    def __init__(self, upstream: str, *, hold_seconds: float) -> None:
        self.upstream = upstream
        self.hold_seconds = hold_seconds
        # method -> (times left to stall, forward first?)
        self.stalls: dict[str, list] = {}
        self.stalled: list[str] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = httpx.Response(200, content=body).json()
                # A JSON-RPC batch (reads) passes through; single calls can be stalled.
                method = request.get("method", "") if isinstance(request, dict) else ""
                stall = proxy._take(method)
                if stall == "swallow":
                    raw = bytes.fromhex(request["params"][0].removeprefix("0x"))
                    answer = {
                        "jsonrpc": "2.0",
                        "id": request["id"],
                        "result": "0x" + keccak(raw).hex(),
                    }
                    content = json.dumps(answer).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(content)))
                    self.end_headers()
                    self.wfile.write(content)
                    return
                if stall is not None and not stall:
                    time.sleep(proxy.hold_seconds)
                    return
                answer = httpx.post(
                    proxy.upstream,
                    content=body,
                    headers={"Content-Type": "application/json"},
                    timeout=30,
                )
                if stall:
                    time.sleep(proxy.hold_seconds)
                    return
                self.send_response(answer.status_code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def stall(self, method: str, *, times: int, forward: bool | str) -> None:
        """``forward``: True (the node acts, the answer is lost), False (nothing reaches the
        node) or "swallow" (answered with the hash, nothing reaches the node)."""
        with self._lock:
            self.stalls[method] = [times, forward]

    def _take(self, method: str):
        with self._lock:
            entry = self.stalls.get(method)
            if not entry or entry[0] <= 0:
                return None
            entry[0] -= 1
            self.stalled.append(method)
            return entry[1]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
