"""A JSON-RPC proxy in front of anvil that can lose answers: a request for a stalled method
is held past the client's timeout, after being forwarded (the node acted, the answer is lost)
or not (the node never heard of it); or, for a raw transaction, answered with its hash and
never passed on (a node that accepts and never propagates).

A JSON-RPC batch is one HTTP request, so its calls share its fate: each call of a stalled
method counts as one stalled call, as it would alone, and the whole request is held (the client
times out on the batch, as on any request it sends); it is forwarded first only if every
stalled call in it says so (a request that never reached the node carried none of its calls).
A swallowed raw transaction in a batch is answered with its hash in its own element, the
batch's other calls passed on."""

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
                answer = proxy._answer(json.loads(body), body)
                if answer is None:  # held past the client's timeout: no answer at all
                    return
                status, content = answer
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

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

    def _answer(self, request, body: bytes) -> tuple[int, bytes] | None:
        """(status, content) for the request, or None: held, never answered."""
        calls = request if isinstance(request, list) else [request]
        stalls = [
            self._take(call.get("method", "")) if isinstance(call, dict) else None for call in calls
        ]
        held = [stall for stall in stalls if stall is True or stall is False]
        if held:
            if all(held):
                self._post(body)
            time.sleep(self.hold_seconds)
            return None
        if "swallow" not in stalls:
            return self._post(body)
        swallowed = {index: _hash_answer(call) for index, call in enumerate(calls) if stalls[index]}
        if not isinstance(request, list):
            return 200, json.dumps(swallowed[0]).encode()
        passed = [call for index, call in enumerate(calls) if index not in swallowed]
        answers = json.loads(self._post(json.dumps(passed).encode())[1]) if passed else []
        by_id = {answer.get("id"): answer for answer in answers}
        merged = [swallowed.get(i) or by_id.get(call.get("id")) for i, call in enumerate(calls)]
        return 200, json.dumps(merged).encode()

    def _post(self, content: bytes) -> tuple[int, bytes]:
        answer = httpx.post(
            self.upstream,
            content=content,
            headers={"Content-Type": "application/json"},
            timeout=30,
        )
        return answer.status_code, answer.content

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def _hash_answer(call: dict) -> dict:
    """What a node that accepts a raw transaction answers: its hash."""
    raw = bytes.fromhex(call["params"][0].removeprefix("0x"))
    return {"jsonrpc": "2.0", "id": call["id"], "result": "0x" + keccak(raw).hex()}
