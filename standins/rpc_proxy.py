"""A JSON-RPC proxy in front of a devchain that plays the faults of real RPC backends:

- lost answers: the request reaches the chain, the caller never hears back (what a timeout
  after the node accepted a transaction looks like);
- a lagging backend: lookups of chosen transactions (``eth_getTransactionReceipt``,
  ``eth_getTransactionByHash``) answer ``null`` for some seconds although the chain has them
  (a load-balanced provider whose index is behind its head); ``miss_receipts`` answers the
  next N receipt lookups of a transaction ``null`` (one backend of the pool missed it once);
- another node implementation's error answers: ``answer_error`` answers chosen calls with a
  JSON-RPC error (Hardhat's "Nonce too high", Erigon's "existing tx with same hash"),
  after passing the call on or without;
- a ``finalized`` block tag that trails the head by a chosen number of blocks (the chain's
  finalized checkpoint, not its head: ``eth_getBlockByNumber("finalized")`` and any
  ``"finalized"`` block parameter are answered at head - N);
- a lagging endpoint: ``trail_head`` answers ``eth_blockNumber`` and every ``"latest"`` block
  parameter at head - N, and a receipt in a block above that as ``null`` (one endpoint of a
  chain that several are configured for, behind the others).

Everything else passes through unchanged, and every call is logged (``calls``: what a client
asked, batches included).

A JSON-RPC batch (an array of calls, answered by an array) gets, call by call, what each call
would get alone, as a node answers a batch: a lagging lookup is a ``null`` element, a trailing
head or finalized tag answers the elements that read them, an ``answer_error`` is a JSON-RPC
error object in that call's element (the others answered; web3 then raises for the whole
batch, as it does for any element with an error). A lost answer cannot be lost for one element:
the batch is one HTTP exchange, so every call of it reaches the chain and the whole answer is
lost (a 502), and each of its calls is in ``lost``. With no fault armed a batch is passed on
as it came (one round trip to the chain).

    with LossyRpcProxy(chain.url) as proxy:
        proxy.lose_response("eth_sendRawTransaction", times=1)
        proxy.lag_lookups(tx_hash, seconds=8)
        proxy.trail_finalized(blocks=20)
        ... point the product at proxy.url ...
        proxy.lost  # [(method, params)] whose answers were lost

The same controls are JSON-RPC methods of the proxy itself, for another process (local mode,
a shell): ``standin_lagLookups [hash, seconds]``, ``standin_trailFinalized [blocks | null]``,
``standin_loseResponse [method, times]``, ``standin_answerError [method, message, times,
forward]``, ``standin_trailHead [blocks | null]``, ``standin_missReceipts [hash, times]``.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

LOOKUPS = ("eth_getTransactionReceipt", "eth_getTransactionByHash")
LOST_ANSWER = b'{"error": "upstream answer lost"}', 502  # what the caller gets instead


def _error_element(call: Any, code: int, message: str) -> dict[str, Any]:
    """A batch's element answering ``call`` with a JSON-RPC error (JSON-RPC 2.0 §5.1, §6)."""
    found = call.get("id") if isinstance(call, dict) else None
    return {"jsonrpc": "2.0", "id": found, "error": {"code": code, "message": message}}


class LossyRpcProxy:
    def __init__(self, upstream: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.upstream = upstream
        self._lock = threading.Lock()
        self._lose: dict[str, int] = {}
        self._lagging: dict[str, float] = {}  # tx hash (lower case) -> monotonic deadline
        self._missing: dict[str, int] = {}  # tx hash (lower case) -> receipt lookups left
        self._finalized_trail: int | None = None
        self._head_trail: int | None = None
        self._errors: dict[str, list] = {}  # method -> [message, times left, forward first?]
        self.errored: list[tuple[str, str]] = []
        self.lost: list[tuple[str, Any]] = []  # a lost batch: each of its calls
        self.lagged: list[tuple[str, str]] = []  # (method, hash) answered null on purpose
        # Every call the proxy was asked, in order: (method, params); a JSON-RPC batch is one
        # entry per call it carries, and one ("batch", size) entry for its round trip.
        self.calls: list[tuple[str, Any]] = []
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

    def answer_error(
        self, method: str, message: str, *, times: int = 1, forward: bool = False
    ) -> None:
        """The next ``times`` calls of ``method`` are answered with the JSON-RPC error
        ``message`` (code -32000); ``forward``: the chain acts on the call first."""
        with self._lock:
            self._errors[method] = [message, times, forward]

    def _error_for(self, method: str) -> tuple[str, bool] | None:
        with self._lock:
            entry = self._errors.get(method)
            if not entry or entry[1] <= 0:
                return None
            entry[1] -= 1
            self.errored.append((method, entry[0]))
            return entry[0], entry[2]

    def lag_lookups(self, tx_hash: str, *, seconds: float) -> None:
        """For ``seconds`` from now, the receipt and the body of ``tx_hash`` are answered
        ``null`` (not found), whatever the chain holds."""
        with self._lock:
            self._lagging[tx_hash.lower()] = time.monotonic() + float(seconds)

    def miss_receipts(self, tx_hash: str, *, times: int = 1) -> None:
        """The next ``times`` receipt lookups (``eth_getTransactionReceipt``) of ``tx_hash`` are
        answered ``null``, whatever the chain holds; the ones after them pass through."""
        with self._lock:
            self._missing[tx_hash.lower()] = int(times)

    def trail_finalized(self, blocks: int | None) -> None:
        """The ``finalized`` tag answered at head - ``blocks`` (None: the chain's own)."""
        with self._lock:
            self._finalized_trail = None if blocks is None else max(0, int(blocks))

    def trail_head(self, blocks: int | None) -> None:
        """The head answered at head - ``blocks`` (None: the chain's own)."""
        with self._lock:
            self._head_trail = None if blocks is None else max(0, int(blocks))

    def _head(self) -> int:
        answer = self._client.post(
            self.upstream, json={"jsonrpc": "2.0", "id": 0, "method": "eth_blockNumber"}
        ).json()
        return int(answer["result"], 16)

    def _behind(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """The answer of an endpoint trailing the head, or None (pass the call on)."""
        with self._lock:
            trail = self._head_trail
        if trail is None:
            return None
        method, params = request.get("method"), request.get("params") or []
        head = max(0, self._head() - trail)
        if method == "eth_blockNumber":
            return {"jsonrpc": "2.0", "id": request.get("id"), "result": hex(head)}
        if method == "eth_getTransactionReceipt":
            answer = self._client.post(self.upstream, json=request).json()
            found = answer.get("result")
            if found and int(found["blockNumber"], 16) > head:
                return {"jsonrpc": "2.0", "id": request.get("id"), "result": None}
            return answer
        if isinstance(params, list) and "latest" in params:
            rewritten = [hex(head) if p == "latest" else p for p in params]
            return self._client.post(self.upstream, json={**request, "params": rewritten}).json()
        return None

    def _should_lose(self, method: str) -> bool:
        with self._lock:
            left = self._lose.get(method, 0)
            if left <= 0:
                return False
            self._lose[method] = left - 1
            return True

    def _lags(self, method: str, params: Any) -> bool:
        if method not in LOOKUPS or not params:
            return False
        tx_hash = str(params[0]).lower()
        with self._lock:
            if method == "eth_getTransactionReceipt" and self._missing.get(tx_hash, 0) > 0:
                self._missing[tx_hash] -= 1
                self.lagged.append((method, tx_hash))
                return True
            deadline = self._lagging.get(tx_hash)
            if deadline is None or time.monotonic() >= deadline:
                return False
            self.lagged.append((method, tx_hash))
            return True

    def _control(self, method: str, params: list[Any]) -> Any:
        if method == "standin_lagLookups":
            self.lag_lookups(str(params[0]), seconds=float(params[1]))
        elif method == "standin_trailFinalized":
            self.trail_finalized(params[0] if params else None)
        elif method == "standin_answerError":
            forward = bool(params[3]) if len(params) > 3 else False
            times = int(params[2]) if len(params) > 2 else 1
            self.answer_error(str(params[0]), str(params[1]), times=times, forward=forward)
        elif method == "standin_trailHead":
            self.trail_head(params[0] if params else None)
        elif method == "standin_missReceipts":
            self.miss_receipts(str(params[0]), times=int(params[1]) if len(params) > 1 else 1)
        elif method == "standin_loseResponse":
            self.lose_response(str(params[0]), times=int(params[1]) if len(params) > 1 else 1)
        else:
            raise KeyError(method)
        return True

    def _finalized_number(self) -> str | None:
        """The block number the ``finalized`` tag stands for now (None: pass it through)."""
        with self._lock:
            trail = self._finalized_trail
        if trail is None:
            return None
        answer = self._client.post(
            self.upstream, json={"jsonrpc": "2.0", "id": 0, "method": "eth_blockNumber"}
        ).json()
        head = int(answer["result"], 16)
        return hex(max(0, head - trail))

    def _rewrite(self, request: dict[str, Any]) -> dict[str, Any]:
        params = request.get("params")
        if not isinstance(params, list) or "finalized" not in params:
            return request
        number = self._finalized_number()
        if number is None:
            return request
        return {**request, "params": [number if p == "finalized" else p for p in params]}

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

    def _answer(self, body: bytes) -> tuple[bytes, int]:
        try:
            request = json.loads(body)
        except ValueError:
            request = {}
        if isinstance(request, list) and request:
            return self._answer_batch(body, request)
        if not isinstance(request, dict):
            return self._forward(body)
        method = request.get("method", "")
        if not method.startswith("standin_"):
            with self._lock:
                self.calls.append((method, request.get("params")))
        answer, status, lost = self._answer_call(request, body)
        if lost:
            self._record_lost([request])
            return LOST_ANSWER
        return answer, status

    def _answer_batch(self, body: bytes, requests: list[Any]) -> tuple[bytes, int]:
        """Each call of a batch answered as it would be alone (see the module's docstring)."""
        with self._lock:
            self.calls.append(("batch", len(requests)))
            self.calls.extend(
                (str(call.get("method", "")), call.get("params"))
                for call in requests
                if isinstance(call, dict)
            )
        if not self._faults_armed(requests):
            return self._forward(body)
        answers: list[Any] = []
        any_lost = False
        for call in requests:
            if not isinstance(call, dict):
                answers.append(_error_element(call, -32600, "Invalid Request"))
                continue
            answer, status, lost = self._answer_call(call, json.dumps(call).encode())
            any_lost = any_lost or lost
            try:
                answers.append(json.loads(answer))
            except ValueError:
                answers.append(_error_element(call, -32603, f"upstream answered {status}"))
        if any_lost:
            self._record_lost(requests)
            return LOST_ANSWER
        return json.dumps(answers).encode(), 200

    def _answer_call(self, request: dict[str, Any], body: bytes) -> tuple[bytes, int, bool]:
        """One call's answer: its bytes, its HTTP status and whether it is to be lost (the
        chain acted on the call; the caller never hears back)."""
        method = request.get("method", "")
        params = request.get("params") or []
        if method.startswith("standin_"):
            try:
                result = {"result": self._control(method, params)}
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                result = {"error": {"code": -32601, "message": f"{method}: {exc}"}}
            data = {"jsonrpc": "2.0", "id": request.get("id"), **result}
            return json.dumps(data).encode(), 200, False
        behind = self._behind(request)
        if behind is not None:
            return json.dumps(behind).encode(), 200, False
        if self._lags(method, params):
            data = {"jsonrpc": "2.0", "id": request.get("id"), "result": None}
            return json.dumps(data).encode(), 200, False
        error = self._error_for(method)
        if error is not None:
            message, forward = error
            if forward:
                self._forward(body)
            answer = {"code": -32000, "message": message}
            data = {"jsonrpc": "2.0", "id": request.get("id"), "error": answer}
            return json.dumps(data).encode(), 200, False
        forwarded = self._rewrite(request)
        answer, status = self._forward(
            body if forwarded is request else json.dumps(forwarded).encode()
        )
        return answer, status, bool(method) and self._should_lose(method)

    def _forward(self, body: bytes) -> tuple[bytes, int]:
        answer = self._client.post(
            self.upstream, content=body, headers={"Content-Type": "application/json"}
        )
        return answer.content, answer.status_code

    def _record_lost(self, requests: list[Any]) -> None:
        with self._lock:
            self.lost.extend(
                (str(call.get("method", "")), call.get("params"))
                for call in requests
                if isinstance(call, dict)
            )

    def _faults_armed(self, requests: list[Any]) -> bool:
        """Whether any fault (or a control call) may touch a call of ``requests``."""
        if any(
            isinstance(call, dict) and str(call.get("method", "")).startswith("standin_")
            for call in requests
        ):
            return True
        now = time.monotonic()
        with self._lock:
            return (
                self._finalized_trail is not None
                or self._head_trail is not None
                or any(left > 0 for left in self._lose.values())
                or any(left > 0 for left in self._missing.values())
                or any(entry[1] > 0 for entry in self._errors.values())
                or any(deadline > now for deadline in self._lagging.values())
            )

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                data, status = proxy._answer(body)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def main(argv: list[str] | None = None) -> None:
    """``python -m standins.rpc_proxy --upstream URL [--port N]``: the proxy as a process (local
    mode), driven through its ``standin_*`` JSON-RPC methods."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="the devchain's RPC URL")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    proxy = LossyRpcProxy(args.upstream, host=args.host, port=args.port)
    try:
        proxy._server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        proxy._server.server_close()


if __name__ == "__main__":
    main()
