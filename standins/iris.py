"""A local attestation service shaped like Circle's Iris v2 API, watching local devchains.

    GET /v2/messages/{sourceDomain}?transactionHash=0x...

answers as Circle's does (field names of the v2 "Get messages and attestations" endpoint):

- 404 ``{"error": "Message not found"}`` while the transaction is unknown to the source chain,
  failed, or emitted no ``MessageSent`` through that domain's MessageTransmitter;
- 200 ``{"messages": [{"status": "pending_confirmations", "attestation": "PENDING",
  "message": "0x", "eventNonce": ..., "cctpVersion": 1, ...}]}`` until the burn's block has
  ``confirmations`` confirmations (the including block counts as one);
- then 200 with ``"status": "complete"``, the message bytes and the attestation: the test
  attester's 65-byte signature over keccak256(message) (:func:`standins.cctp.sign_attestation`),
  plus ``decodedMessage`` / ``decodedMessageBody``.

Until it attests, every answer is read from the chain as it is now (a burn removed by a reorg
is "not found" again). Once it has attested a transaction's messages it remembers them, as the
real service does: a reorg deeper than its confirmations (lower them with the ``confirmations``
fault to provoke one) leaves an attestation for a burn the chain no longer has, which a client
must notice before it mints.

Faults for tests, through ``POST /control/faults`` (JSON) or :meth:`IrisService.set_faults`:
``status`` (answer that HTTP status, e.g. 503, instead of the real answer), ``rate_limit``
(answer 429 with a ``Retry-After``), ``retry_after`` (seconds, sent with either), ``times``
(how many requests the fault lasts; absent: until cleared), ``delay`` (seconds to wait before
answering), ``tamper`` (sign with a key that is not the attester's), ``confirmations`` (change
the confirmations needed). ``DELETE /control/faults`` clears them; ``GET /control/requests``
lists the requests served (time, path, status), ``GET /control/health`` answers 200.

Run in a thread (``with IrisService(...) as iris: iris.url``) or as a process:
``python -m standins.iris --config iris.json`` (see :func:`main`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from eth_abi import decode as abi_decode
from eth_utils import keccak

import standins  # noqa: F401  (web3 / eth-account under the interpreter's recursion limit)
from standins.cctp import Message, bytes32_to_address, sign_attestation

MESSAGE_SENT_TOPIC = "0x" + keccak(text="MessageSent(bytes)").hex()
# What signs a tampered attestation: a fixed key that no transmitter trusts.
IMPOSTOR_KEY = keccak(b"qtg standins iris impostor").hex()
CCTP_VERSION = 1
_TX_HASH = re.compile(r"^0x[0-9a-fA-F]{64}$")
_PATH = re.compile(r"^/v2/messages/(\d+)$")


@dataclass(frozen=True)
class SourceDomain:
    """A chain the service watches: its JSON-RPC URL and its MessageTransmitter's address."""

    rpc_url: str
    message_transmitter: str


@dataclass
class Faults:
    status: int | None = None
    rate_limit: bool = False
    retry_after: float | None = None
    times: int | None = None
    delay: float = 0.0
    tamper: bool = False
    confirmations: int | None = None

    FIELDS = ("status", "rate_limit", "retry_after", "times", "delay", "tamper", "confirmations")


@dataclass(frozen=True)
class Served:
    at: float
    path: str
    status: int


class _Chain:
    """Minimal JSON-RPC reader of one source chain (thread-safe)."""

    def __init__(self, source: SourceDomain) -> None:
        self.source = source
        self._client = httpx.Client(base_url=source.rpc_url, timeout=10.0)
        self._lock = threading.Lock()
        self._id = 0

    def rpc(self, method: str, *params: Any) -> Any:
        with self._lock:
            self._id += 1
            response = self._client.post(
                "/", json={"jsonrpc": "2.0", "id": self._id, "method": method, "params": params}
            )
        response.raise_for_status()
        body = response.json()
        if body.get("error"):
            raise RuntimeError(f"{method}: {body['error']}")
        return body.get("result")

    def close(self) -> None:
        self._client.close()


@dataclass
class _State:
    faults: Faults = field(default_factory=Faults)
    served: list[Served] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class IrisService:
    """The stand-in: ``domains`` maps a CCTP domain id to the chain it watches."""

    def __init__(
        self,
        domains: dict[int, SourceDomain],
        *,
        attester_key: str | bytes,
        confirmations: int = 1,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if confirmations < 1:
            raise ValueError("confirmations must be at least 1")
        self.chains = {int(d): _Chain(source) for d, source in domains.items()}
        self.attester_key = attester_key
        self.confirmations = confirmations
        self.state = _State()
        # (domain, tx hash) -> the messages attested for it
        self._attested: dict[tuple[int, str], list[bytes]] = {}
        self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> IrisService:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="iris-standin", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        for chain in self.chains.values():
            chain.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> IrisService:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    # -- control -----------------------------------------------------------------------------

    def set_faults(self, **faults: Any) -> None:
        unknown = set(faults) - set(Faults.FIELDS)
        if unknown:
            raise ValueError(f"unknown faults: {', '.join(sorted(unknown))}")
        with self.state.lock:
            self.state.faults = Faults(**faults)

    def clear_faults(self) -> None:
        with self.state.lock:
            self.state.faults = Faults()

    def reset(self) -> None:
        """No faults, nothing served, nothing attested (a test's fresh start)."""
        with self.state.lock:
            self.state.faults = Faults()
            self.state.served.clear()
            self._attested.clear()

    def served(self) -> list[Served]:
        with self.state.lock:
            return list(self.state.served)

    def _take_fault(self) -> Faults:
        """The faults for this request; a fault limited to ``times`` requests is cleared
        once it has served them."""
        with self.state.lock:
            faults = self.state.faults
            if faults.times is not None:
                left = faults.times - 1
                self.state.faults = (
                    Faults(**{**faults.__dict__, "times": left}) if left > 0 else Faults()
                )
                if faults.times <= 0:
                    return Faults()
            return faults

    def _record(self, path: str, status: int) -> None:
        with self.state.lock:
            self.state.served.append(Served(time.time(), path, status))

    # -- the API -----------------------------------------------------------------------------

    def messages(self, domain: int, tx_hash: str, faults: Faults) -> tuple[int, dict[str, Any]]:
        """The answer to ``GET /v2/messages/{domain}?transactionHash=tx_hash``."""
        chain = self.chains.get(domain)
        if chain is None:
            return 400, {"error": f"Invalid source domain: {domain}"}
        if not _TX_HASH.match(tx_hash):
            return 400, {"error": "Invalid transactionHash"}
        key = IMPOSTOR_KEY if faults.tamper else self.attester_key
        with self.state.lock:
            attested = self._attested.get((domain, tx_hash.lower()))
        if attested is not None:
            return 200, {"messages": [_entry(raw, final=True, key=key) for raw in attested]}
        receipt = chain.rpc("eth_getTransactionReceipt", tx_hash)
        if not receipt or int(receipt.get("status") or "0x0", 16) != 1:
            return 404, {"error": "Message not found"}
        transmitter = chain.source.message_transmitter.lower()
        raw_messages = [
            bytes(abi_decode(["bytes"], bytes.fromhex(log["data"][2:]))[0])
            for log in receipt["logs"]
            if log["address"].lower() == transmitter
            and log["topics"]
            and log["topics"][0].lower() == MESSAGE_SENT_TOPIC
        ]
        if not raw_messages:
            return 404, {"error": "Message not found"}
        head = int(chain.rpc("eth_blockNumber"), 16)
        confirmations = head - int(receipt["blockNumber"], 16) + 1
        final = confirmations >= (faults.confirmations or self.confirmations)
        if final:
            with self.state.lock:
                self._attested[(domain, tx_hash.lower())] = raw_messages
        return 200, {"messages": [_entry(raw, final=final, key=key) for raw in raw_messages]}


def _entry(raw: bytes, *, final: bool, key: str | bytes) -> dict[str, Any]:
    message = Message.parse(raw)
    entry: dict[str, Any] = {
        "message": "0x",
        "eventNonce": str(message.nonce),
        "attestation": "PENDING",
        "cctpVersion": CCTP_VERSION,
        "status": "pending_confirmations",
        "decodedMessage": None,
        "delayReason": None,
    }
    if not final:
        return entry
    burn = message.burn
    return {
        **entry,
        "message": "0x" + raw.hex(),
        "attestation": "0x" + sign_attestation(raw, key).hex(),
        "status": "complete",
        "decodedMessage": {
            "sourceDomain": str(message.source_domain),
            "destinationDomain": str(message.destination_domain),
            "nonce": str(message.nonce),
            "sender": "0x" + message.sender.hex(),
            "recipient": "0x" + message.recipient.hex(),
            "destinationCaller": "0x" + message.destination_caller.hex(),
            "messageBody": "0x" + message.body.hex(),
            "decodedMessageBody": {
                "burnToken": bytes32_to_address(burn.burn_token),
                "mintRecipient": bytes32_to_address(burn.mint_recipient),
                "amount": str(burn.amount),
                "messageSender": bytes32_to_address(burn.message_sender),
            },
        },
    }


def _handler_for(service: IrisService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: tests read GET /control/requests instead

        def _send(
            self,
            status: int,
            body: dict[str, Any] | list[Any],
            headers: dict[str, str] | None = None,
        ) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            # A client that gave up waiting (a slow answer) is not told.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(data)

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            data = json.loads(self.rfile.read(length) or b"{}") if length else {}
            if not isinstance(data, dict):
                raise ValueError("a JSON object is expected")
            return data

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            if url.path == "/control/health":
                return self._send(200, {"status": "ok"})
            if url.path == "/control/requests":
                return self._send(200, [s.__dict__ for s in service.served()])
            match = _PATH.match(url.path)
            if match is None:
                return self._send(404, {"error": "Not found"})
            faults = service._take_fault()
            if faults.delay:
                time.sleep(faults.delay)
            headers = {}
            if faults.retry_after is not None:
                headers["Retry-After"] = str(int(faults.retry_after))
            if faults.rate_limit:
                status, body = 429, {"error": "Too Many Requests"}
            elif faults.status:
                status, body = faults.status, {"error": "Service unavailable"}
            else:
                tx_hash = (parse_qs(url.query).get("transactionHash") or [""])[0]
                if not tx_hash:
                    status, body = 400, {"error": "transactionHash or nonce is required"}
                else:
                    try:
                        status, body = service.messages(int(match.group(1)), tx_hash, faults)
                    except (httpx.HTTPError, RuntimeError) as exc:
                        status, body = 503, {"error": f"source chain unavailable: {exc}"}
            service._record(self.path, status)
            self._send(status, body, headers)

        def do_POST(self) -> None:
            if urlsplit(self.path).path != "/control/faults":
                return self._send(404, {"error": "Not found"})
            try:
                service.set_faults(**self._body())
            except (ValueError, TypeError) as exc:
                return self._send(400, {"error": str(exc)})
            return self._send(200, service.state.faults.__dict__)

        def do_DELETE(self) -> None:
            if urlsplit(self.path).path != "/control/faults":
                return self._send(404, {"error": "Not found"})
            service.clear_faults()
            return self._send(200, service.state.faults.__dict__)

    return Handler


# -- as a process ----------------------------------------------------------------------------


def write_config(
    path: Path,
    *,
    domains: dict[int, SourceDomain],
    attester_key_file: Path,
    confirmations: int,
    port: int,
) -> None:
    """The file ``python -m standins.iris --config`` reads."""
    path.write_text(
        json.dumps(
            {
                "port": port,
                "confirmations": confirmations,
                "attester_key_file": str(attester_key_file),
                "domains": {
                    str(d): {"rpc_url": s.rpc_url, "message_transmitter": s.message_transmitter}
                    for d, s in domains.items()
                },
            },
            indent=2,
        )
    )


def from_config(path: Path) -> IrisService:
    config = json.loads(Path(path).read_text())
    return IrisService(
        {int(d): SourceDomain(**entry) for d, entry in config["domains"].items()},
        attester_key=Path(config["attester_key_file"]).read_text().strip(),
        confirmations=int(config.get("confirmations", 1)),
        port=int(config.get("port", 0)),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Local Iris v2 attestation service")
    parser.add_argument("--config", required=True, type=Path, help="see write_config()")
    args = parser.parse_args(argv)
    service = from_config(args.config)
    print(f"iris stand-in listening on {service.url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        service.serve_forever()


if __name__ == "__main__":
    main()
