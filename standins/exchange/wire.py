"""What a venue sees of an HTTP request and what it answers, and the routing they share."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from email.message import Message

from .ledger import Account, Books, Refusal, Throttle, Withdrawal


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # below the venue's prefix, e.g. /sapi/v1/capital/withdraw/apply
    raw_query: str  # exactly as sent, undecoded
    body: bytes
    headers: Message
    client: str  # peer address


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json;charset=UTF-8"
    headers: dict[str, str] = field(default_factory=dict)
    # Misbehaviour after the work is done: hold the socket this long without answering, then
    # close it; or close it at once.
    hang_seconds: float | None = None
    drop: bool = False


def json_response(status: int, payload, headers: dict[str, str] | None = None) -> Response:
    body = json.dumps(payload, separators=(",", ":")).encode()
    return Response(status=status, body=body, headers=dict(headers or {}))


def text_response(status: int, text: str, headers: dict[str, str] | None = None) -> Response:
    return Response(
        status=status,
        body=text.encode(),
        content_type="text/plain;charset=UTF-8",
        headers=dict(headers or {}),
    )


@dataclass(frozen=True)
class Route:
    endpoint: str  # name used by faults: withdraw, withdrawals, deposits, balance, markets...
    handler: Callable
    signed: bool


class Venue(ABC):
    """One exchange's REST surface over its books. Subclasses fill in the wire format."""

    name: str
    routes: dict[tuple[str, str], Route]

    def __init__(self, books: Books) -> None:
        self.books = books

    def handle(self, request: Request) -> Response:
        route = self.routes.get((request.method, request.path))
        if route is None:
            return text_response(404, "Not Found")
        throttle = self.books.throttle(self.client_key(request))
        if throttle is not None:
            return self.throttled(throttle)
        if route.endpoint != "status" and self.books.take_fault(route.endpoint, ("maintenance",)):
            return self.maintenance()
        try:
            account = self.authenticate(request) if route.signed else None
            params = self.params(request)
            if account is not None:
                if self.books.take_fault(route.endpoint, ("maintenance",), account.name):
                    return self.maintenance()
                if route.endpoint == "withdraw" and (
                    slow := self.books.take_fault("withdraw", ("slow_before_accept",), account.name)
                ):
                    self.books.hold(slow.hold_seconds)
                    self.still_valid(params)
            return route.handler(self, params, account)
        except Refusal as refusal:
            return self.refuse(refusal)

    def still_valid(self, params: dict) -> None:
        """Whether a request held in the queue may still be executed (Refusal if not): by
        default it may."""
        return None

    def accepted(self, withdrawal: Withdrawal, status: int, row: Callable) -> Response:
        """The answer to an accepted withdrawal, ``row(withdrawal)``, as the armed faults
        make it: another withdrawal's row, an empty object, a timeout, a dropped socket."""
        account = withdrawal.account
        odd = self.books.take_fault("withdraw", ("answer_other_id", "empty_accept"), account)
        body = row(withdrawal)
        if odd is not None and odd.kind == "empty_accept":
            body = {}
        elif odd is not None:
            other = self.books.other_withdrawal(withdrawal)
            body = row(other if other is not None else _stranger(withdrawal))
        return self.after_accept(json_response(status, body), account)

    def after_accept(self, response: Response, account: str | None = None) -> Response:
        """Apply an armed timeout/drop fault to the answer of an accepted withdrawal."""
        fault = self.books.take_fault(
            "withdraw", ("timeout_after_accept", "drop_after_accept"), account
        )
        if fault is None:
            return response
        if fault.kind == "drop_after_accept":
            response.drop = True
        else:
            response.hang_seconds = fault.hold_seconds
        return response

    @abstractmethod
    def client_key(self, request: Request) -> str:
        """Who the rate limit counts this request against."""

    @abstractmethod
    def authenticate(self, request: Request) -> Account:
        """The account whose credentials signed the request; Refusal when they did not."""

    @abstractmethod
    def params(self, request: Request) -> dict:
        """The request's parameters, decoded the way the venue decodes them."""

    @abstractmethod
    def refuse(self, refusal: Refusal) -> Response:
        """The venue's own error answer for a refusal."""

    @abstractmethod
    def throttled(self, throttle: Throttle) -> Response:
        """The venue's 429/418 answer."""

    @abstractmethod
    def maintenance(self) -> Response:
        """The venue's answer while it is down for maintenance."""


def _stranger(withdrawal: Withdrawal) -> Withdrawal:
    """A withdrawal nobody made, with an id of its own (for answer_other_id with no other)."""
    return replace(withdrawal, id=withdrawal.id[::-1])
