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
the confirmations needed; a V2 message is signed no sooner than that either: a slow
attester). ``DELETE /control/faults`` clears them; ``GET /control/requests``
lists the requests served (time, path, status), ``GET /control/health`` answers 200.

CCTP V2 (a domain whose ``SourceDomain`` names a ``message_transmitter_v2``): messages sent
through that transmitter are attested as Circle's V2 attester does (see :mod:`standins.iris_v2`:
fast at the source's ``safe`` block, standard at ``finalized``, fee and nonce filled in),
``GET /v2/messages/{d}?nonce=`` finds a signed one by nonce, ``POST /v2/reattest/{nonce}``
re-signs it as finalized, ``GET /v2/burn/USDC/fees/{src}/{dst}`` serves the fee schedule, and
``rate_limit=RateLimit()`` enforces Circle's API limit (35 requests/s per caller, then 429 and a
5-minute block) on the ``/v2`` endpoints.

Run in a thread (``with IrisService(...) as iris: iris.url``) or as a process:
``python -m standins.iris --config iris.json`` (see :func:`main`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from eth_abi import decode as abi_decode
from eth_utils import keccak

import standins  # noqa: F401  (web3 / eth-account under the interpreter's recursion limit)
from standins.cctp import Message, bytes32_to_address, sign_attestation
from standins.cctp_v2 import FINALITY_THRESHOLD_FINALIZED, MessageV2
from standins.iris_v2 import (
    REATTEST_ACCEPTED,
    AttestedV2,
    FeeSchedule,
    RateLimit,
    RateLimiter,
    assign_nonce,
    complete,
    complete_entry,
    decide,
    pending_entry,
)

MESSAGE_SENT_TOPIC = "0x" + keccak(text="MessageSent(bytes)").hex()
# What signs a tampered attestation: a fixed key that no transmitter trusts.
IMPOSTOR_KEY = keccak(b"qtg standins iris impostor").hex()
CCTP_VERSION = 1
_TX_HASH = re.compile(r"^0x[0-9a-fA-F]{64}$")
_PATH = re.compile(r"^/v2/messages/(\d+)$")
_FEES_PATH = re.compile(r"^/v2/burn/USDC/fees/(\d+)/(\d+)$")
_REATTEST_PATH = re.compile(r"^/v2/reattest/(0x[0-9a-fA-F]{64})$")


@dataclass(frozen=True)
class SourceDomain:
    """A chain the service watches: its JSON-RPC URL, its MessageTransmitter's address and,
    if CCTP V2 is deployed there, its MessageTransmitterV2's."""

    rpc_url: str
    message_transmitter: str
    message_transmitter_v2: str | None = None


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
        fees: FeeSchedule | None = None,
        rate_limit: RateLimit | None = None,
        expiration_blocks: int | None = None,
    ) -> None:
        if confirmations < 1:
            raise ValueError("confirmations must be at least 1")
        self.chains = {int(d): _Chain(source) for d, source in domains.items()}
        self.attester_key = attester_key
        self.confirmations = confirmations
        self.state = _State()
        # (domain, tx hash) -> the messages attested for it
        self._attested: dict[tuple[int, str], list[bytes]] = {}
        # V2: nonce -> the message signed for it
        self._attested_v2: dict[bytes, AttestedV2] = {}
        self.fees = fees or FeeSchedule()
        self.rate_limiter = RateLimiter(rate_limit) if rate_limit else None
        self.expiration_blocks = expiration_blocks
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
            self._attested_v2.clear()
        if self.rate_limiter:
            self.rate_limiter.reset()

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
        remembered = self._remembered_v2(domain, tx_hash)
        if remembered and not any(a.reattest_requested for a in remembered):
            return 200, {"messages": [complete_entry(a.message, key) for a in remembered]}
        receipt = chain.rpc("eth_getTransactionReceipt", tx_hash)
        if not receipt or int(receipt.get("status") or "0x0", 16) != 1:
            if remembered:  # attested, then removed by a reorg: the attestation stays out there
                return 200, {"messages": [complete_entry(a.message, key) for a in remembered]}
            return 404, {"error": "Message not found"}
        if chain.source.message_transmitter_v2:
            v2 = self._messages_v2(domain, chain, tx_hash, receipt, key, faults)
            if v2 is not None:
                return 200, {"messages": v2}
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

    # -- V2 ----------------------------------------------------------------------------------

    def _remembered_v2(self, domain: int, tx_hash: str) -> list[AttestedV2]:
        with self.state.lock:
            found = [
                a
                for a in self._attested_v2.values()
                if a.source_domain == domain and a.tx_hash == tx_hash.lower()
            ]
        return sorted(found, key=lambda a: a.log_index)

    def _expiration_block(self, destination_domain: int) -> int:
        if not self.expiration_blocks or destination_domain not in self.chains:
            return 0
        head = int(self.chains[destination_domain].rpc("eth_blockNumber"), 16)
        return head + self.expiration_blocks

    def _messages_v2(
        self,
        domain: int,
        chain: _Chain,
        tx_hash: str,
        receipt: dict[str, Any],
        key: str | bytes,
        faults: Faults,
    ) -> list[dict[str, Any]] | None:
        """The entries for the V2 messages `receipt` emitted, signing those now due; None if
        it emitted none through the domain's MessageTransmitterV2. The ``confirmations`` fault
        makes the attester slow: nothing new is signed before the burn has that many."""
        transmitter = (chain.source.message_transmitter_v2 or "").lower()
        logs = [
            log
            for log in receipt["logs"]
            if log["address"].lower() == transmitter
            and log["topics"]
            and log["topics"][0].lower() == MESSAGE_SENT_TOPIC
        ]
        if not logs:
            return None
        source_block = int(receipt["blockNumber"], 16)
        slow = bool(faults.confirmations) and (
            int(chain.rpc("eth_blockNumber"), 16) - source_block + 1 < faults.confirmations
        )
        safe = _tag_number(chain, "safe")
        finalized = _tag_number(chain, "finalized")
        entries = []
        for log in logs:
            log_index = int(log["logIndex"], 16)
            nonce = assign_nonce(domain, tx_hash, log_index)
            with self.state.lock:
                known = self._attested_v2.get(nonce)
            if known is not None:
                if known.reattest_requested and source_block <= finalized:
                    self._reattest_now(known)
                entries.append(complete_entry(known.message, key))
                continue
            emitted = bytes(abi_decode(["bytes"], bytes.fromhex(log["data"][2:]))[0])
            message = MessageV2.parse(emitted)
            decision = decide(
                message,
                source_block=source_block,
                safe_block=safe,
                finalized_block=finalized,
                fees=self.fees,
            )
            if decision.executed is None or slow:
                entries.append(pending_entry(decision.delay_reason))
                continue
            signed = complete(
                message,
                nonce=nonce,
                executed=decision.executed,
                fee=decision.fee,
                expiration_block=self._expiration_block(message.destination_domain),
            )
            with self.state.lock:
                self._attested_v2[nonce] = AttestedV2(
                    domain, tx_hash.lower(), log_index, emitted, signed
                )
            entries.append(complete_entry(signed, key))
        return entries

    def _reattest_now(self, attested: AttestedV2) -> None:
        """Re-sign as finalized, with a fresh expiration; the fee already charged stays."""
        signed = MessageV2.parse(attested.message)
        attested.message = complete(
            signed,
            nonce=signed.nonce,
            executed=FINALITY_THRESHOLD_FINALIZED,
            fee=None,
            expiration_block=self._expiration_block(signed.destination_domain),
        )
        attested.reattest_requested = False

    def message_by_nonce(self, domain: int, nonce: str, faults: Faults) -> tuple[int, Any]:
        """``GET /v2/messages/{domain}?nonce=0x...``: a V2 message this service has signed."""
        with self.state.lock:
            attested = self._attested_v2.get(_nonce_bytes(nonce))
        if attested is None or attested.source_domain != domain:
            return 404, {"error": "Message not found"}
        if attested.reattest_requested:
            return self.messages(domain, attested.tx_hash, faults)
        key = IMPOSTOR_KEY if faults.tamper else self.attester_key
        return 200, {"messages": [complete_entry(attested.message, key)]}

    def reattest(self, nonce: str) -> tuple[int, dict[str, Any]]:
        """``POST /v2/reattest/{nonce}``: the message is re-signed once its source is final
        (at once if it already is; a later GET returns the new signature)."""
        with self.state.lock:
            attested = self._attested_v2.get(_nonce_bytes(nonce))
        if attested is None:
            return 404, {"error": "Message not found"}
        attested.reattest_requested = True
        chain = self.chains[attested.source_domain]
        receipt = chain.rpc("eth_getTransactionReceipt", attested.tx_hash)
        if receipt and int(receipt["blockNumber"], 16) <= _tag_number(chain, "finalized"):
            self._reattest_now(attested)
        return 200, {"message": REATTEST_ACCEPTED, "nonce": nonce}

    def fees_between(self, source: int, destination: int) -> tuple[int, Any]:
        if source not in self.chains or source == destination:
            return 400, {"error": f"Invalid route: {source} -> {destination}"}
        return 200, self.fees.minimum_fees()


def _nonce_bytes(nonce: str) -> bytes:
    try:
        value = bytes.fromhex(nonce[2:] if nonce.startswith("0x") else nonce)
    except ValueError:
        return b""
    return value if len(value) == 32 else b""


def _tag_number(chain: _Chain, tag: str) -> int:
    block = chain.rpc("eth_getBlockByNumber", tag, False)
    return int(block["number"], 16) if block else -1


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
        # headers and body go out in two writes: without this a keep-alive client waits out
        # Nagle + delayed ACK (~40 ms) per request, far below Circle's 35 requests/s
        disable_nagle_algorithm = True

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
            fees = _FEES_PATH.match(url.path)
            if match is None and fees is None:
                return self._send(404, {"error": "Not found"})
            if self._rate_limited():
                return None
            if fees is not None:
                status, body = service.fees_between(int(fees.group(1)), int(fees.group(2)))
                service._record(self.path, status)
                return self._send(status, body)
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
                query = parse_qs(url.query)
                tx_hash = (query.get("transactionHash") or [""])[0]
                nonce = (query.get("nonce") or [""])[0]
                domain = int(match.group(1))
                try:
                    if tx_hash:
                        status, body = service.messages(domain, tx_hash, faults)
                    elif nonce:
                        status, body = service.message_by_nonce(domain, nonce, faults)
                    else:
                        status, body = 400, {"error": "transactionHash or nonce is required"}
                except (httpx.HTTPError, RuntimeError) as exc:
                    status, body = 503, {"error": f"source chain unavailable: {exc}"}
            service._record(self.path, status)
            self._send(status, body, headers)

        def _rate_limited(self) -> bool:
            """Answer 429 (and count the caller as blocked) when over the API limit."""
            if service.rate_limiter is None:
                return False
            wait = service.rate_limiter.check(self.client_address[0])
            if wait is None:
                return False
            service._record(self.path, 429)
            self._send(429, {"error": "Too Many Requests"}, {"Retry-After": str(math.ceil(wait))})
            return True

        def do_POST(self) -> None:
            reattest = _REATTEST_PATH.match(urlsplit(self.path).path)
            if reattest is not None:
                if self._rate_limited():
                    return None
                try:
                    status, body = service.reattest(reattest.group(1))
                except (httpx.HTTPError, RuntimeError) as exc:
                    status, body = 503, {"error": f"source chain unavailable: {exc}"}
                service._record(self.path, status)
                return self._send(status, body)
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
    fees: FeeSchedule | None = None,
    rate_limit: RateLimit | None = None,
) -> None:
    """The file ``python -m standins.iris --config`` reads."""
    path.write_text(
        json.dumps(
            {
                "port": port,
                "confirmations": confirmations,
                "attester_key_file": str(attester_key_file),
                "domains": {str(d): asdict(s) for d, s in domains.items()},
                "fees": None
                if fees is None
                else {"fast_bps": str(fees.fast_bps), "standard_bps": str(fees.standard_bps)},
                "rate_limit": None if rate_limit is None else asdict(rate_limit),
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
        fees=FeeSchedule(**{k: Decimal(v) for k, v in config["fees"].items()})
        if config.get("fees")
        else None,
        rate_limit=RateLimit(**config["rate_limit"]) if config.get("rate_limit") else None,
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
