"""The HTTP server: each venue under its own prefix (/binance, /upbit), and the unauthenticated
control API under /_control that tests use to move money and arm faults."""

from __future__ import annotations

import json
import logging
import threading
import time
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from .courier import deliver_due
from .ledger import COMPLETED, Fault, RateLimitPolicy, Refusal, to_decimal
from .wire import Request, Response, Venue, json_response

log = logging.getLogger("standins.exchange")


class ExchangeServer(ThreadingHTTPServer):
    daemon_threads = True
    # Tests open and close many connections quickly.
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], venues: dict[str, Venue]):
        super().__init__(address, _Handler)
        self.venues = venues
        self.stopping = threading.Event()

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def shutdown(self) -> None:
        # Release handlers holding a socket for a timeout fault.
        self.stopping.set()
        super().shutdown()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ExchangeServer

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    # The Date header is the venue's own clock (its clock_offset_ms): Upbit's and Bithumb's
    # clocks are read from it.
    clock_offset_ms = 0

    def date_time_string(self, timestamp=None) -> str:
        moment = time.time() if timestamp is None else timestamp
        return super().date_time_string(moment + self.clock_offset_ms / 1000)

    def log_message(self, format: str, *args) -> None:
        log.debug("%s - %s", self.address_string(), format % args)

    def _dispatch(self) -> None:
        split = urlsplit(self.path)
        _, prefix, rest = (split.path + "/").split("/", 2)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        request = Request(
            method=self.command,
            path="/" + rest.rstrip("/"),
            raw_query=split.query,
            body=body,
            headers=self.headers,
            client=self.client_address[0],
        )
        if prefix == "_control":
            response = control(self.server, request)
        elif prefix in self.server.venues:
            venue = self.server.venues[prefix]
            self.clock_offset_ms = venue.books.clock_offset_ms
            response = venue.handle(request)
        else:
            response = json_response(404, {"error": f"no venue {prefix!r}"})
        self._send(response)

    def _send(self, response: Response) -> None:
        if response.drop or response.hang_seconds is not None:
            if response.hang_seconds:
                self.server.stopping.wait(response.hang_seconds)
            # Close without a byte of answer: the client cannot tell whether it was accepted.
            self.close_connection = True
            return
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(response.body)


# --- control API ---------------------------------------------------------------------------


def control(server: ExchangeServer, request: Request) -> Response:
    """/_control/state, /_control/reset, /_control/deliver and /_control/<venue>/<action>."""
    try:
        payload = json.loads(request.body) if request.body else {}
    except ValueError:
        return json_response(400, {"error": "body is not JSON"})
    parts = [p for p in request.path.split("/") if p]
    try:
        if parts == ["state"] and request.method == "GET":
            return json_response(200, {n: v.books.snapshot() for n, v in server.venues.items()})
        if parts == ["deliver"] and request.method == "POST":
            older_than = float(payload.get("older_than", 0))
            return json_response(
                200, {"delivered": deliver_due(server.venues, older_than=older_than)}
            )
        if parts == ["reset"] and request.method == "POST":
            for venue in server.venues.values():
                venue.books.reset()
            return json_response(200, {"reset": sorted(server.venues)})
        if len(parts) >= 2 and parts[0] in server.venues:
            action = _ACTIONS.get((request.method, "/".join(parts[1:])))
            if action is not None:
                return json_response(200, action(server.venues[parts[0]], payload))
    except Refusal as refusal:
        return json_response(400, {"error": refusal.reason, **_jsonable(refusal.details)})
    except (KeyError, TypeError, ValueError) as exc:
        return json_response(400, {"error": f"bad control request: {exc!r}"})
    return json_response(404, {"error": f"no control action {request.method} {request.path}"})


def _jsonable(details: dict) -> dict:
    return {k: str(v) if isinstance(v, Decimal) else v for k, v in details.items()}


def _credit_deposit(venue: Venue, p: dict) -> dict:
    deposit = venue.books.credit_deposit(
        account=p.get("account", "main"),
        coin=p["coin"],
        network=p.get("network"),
        amount=to_decimal(p["amount"]),
        address=p["address"],
        txid=p["txid"],
        tag=p.get("tag"),
        status=p.get("status", COMPLETED),
    )
    return deposit.as_dict()


def _complete_deposit(venue: Venue, p: dict) -> dict:
    return venue.books.complete_deposit(txid=p["txid"]).as_dict()


def _settle_withdrawal(venue: Venue, p: dict) -> dict:
    withdrawal = venue.books.settle_withdrawal(
        id=p.get("id"),
        client_id=p.get("client_id"),
        status=p.get("status", COMPLETED),
        txid=p.get("txid"),
        reverse=bool(p.get("reverse", False)),
    )
    return withdrawal.as_dict()


def _set_balance(venue: Venue, p: dict) -> dict:
    account = venue.books.account(p.get("account", "main"))
    with venue.books.lock:
        account.balances[p["coin"]] = to_decimal(p["amount"])
    return venue.books.snapshot()["accounts"][account.name]


def _set_whitelist(venue: Venue, p: dict) -> dict:
    account = venue.books.account(p.get("account", "main"))
    addresses = p.get("addresses")
    with venue.books.lock:
        account.whitelist = set(addresses) if addresses is not None else None
    return venue.books.snapshot()["accounts"][account.name]


def _add_fault(venue: Venue, p: dict) -> dict:
    fault = Fault(
        kind=p["kind"],
        endpoint=p.get("endpoint"),
        remaining=p.get("times"),
        hold_seconds=float(p.get("hold_seconds", 0)),
        account=p.get("account"),
    )
    venue.books.add_fault(fault)
    return fault.as_dict()


def _clear_faults(venue: Venue, p: dict) -> dict:
    venue.books.clear_faults()
    return {"faults": []}


def _release_holds(venue: Venue, p: dict) -> dict:
    return {"released": venue.books.release_holds()}


def _configure(venue: Venue, p: dict) -> dict:
    books = venue.books
    with books.lock:
        if "withdrawal_visibility_seconds" in p:
            books.visibility_seconds = float(p["withdrawal_visibility_seconds"])
        if "clock_offset_ms" in p:
            books.clock_offset_ms = int(p["clock_offset_ms"])
        if "rate_limit" in p:
            limit = p["rate_limit"]
            books.limiter.configure(
                None
                if limit is None
                else RateLimitPolicy(
                    limit=int(limit["limit"]),
                    window_seconds=float(limit.get("window_seconds", 60)),
                    ban_after=int(limit.get("ban_after", 2)),
                    ban_seconds=float(limit.get("ban_seconds", 120)),
                )
            )
    snapshot = books.snapshot()
    return {k: snapshot[k] for k in ("visibility_seconds", "clock_offset_ms", "rate_limit")}


_ACTIONS = {
    ("POST", "deposits"): _credit_deposit,
    ("POST", "deposits/complete"): _complete_deposit,
    ("POST", "withdrawals/settle"): _settle_withdrawal,
    ("POST", "balances"): _set_balance,
    ("POST", "whitelist"): _set_whitelist,
    ("POST", "faults"): _add_fault,
    ("DELETE", "faults"): _clear_faults,
    ("POST", "faults/release"): _release_holds,
    ("POST", "settings"): _configure,
}
