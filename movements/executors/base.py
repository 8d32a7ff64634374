"""The executor interface. Executors talk to venues and return results; they never write state.

The worker (``movements.services.execution``) calls them outside any database transaction and
maps what they return or raise onto node transitions:

- ``prepare`` (preflight) -> ``Prepared``; ``sign`` -> ``Signed`` (only when the node has
  ``signing_required``); ``submit`` -> ``Submitted``; ``observe`` -> ``Observation``;
  ``recover`` -> ``Recovery``.
- ``DeterministicError``: the venue said no and will keep saying no -> FAILED.
- ``TransientError``: nothing happened and trying again later may work -> back to READY with
  backoff when raised before submit; the observation is simply retried later when raised by
  ``observe``/``recover``.
- ``AmbiguousError`` (and any unexpected exception during or after submit): we cannot tell
  whether money moved -> UNKNOWN, reconciled by ``recover`` and never re-submitted blindly.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Any

from django.utils import timezone


class ExecutorError(Exception):
    """Base of the error taxonomy; ``evidence`` is recorded on the node's audit event."""

    def __init__(self, message: str, *, evidence: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.evidence = evidence or {}


class DeterministicError(ExecutorError):
    """The venue refused for good (bad address, insufficient funds, rejected): FAILED."""


class AmountRefused(DeterministicError):
    """The venue can never carry out this amount (finer than its precision, below its
    minimum, above a per-request limit). Raised by ``validate`` at create, it is the caller's
    input that is wrong: the create is refused (400, the reason under ``amount``) and nothing
    is written; raised later, it fails the node like any refusal."""


class ParamRefused(DeterministicError):
    """A request param the venue can never accept (malformed, too long). Raised by
    ``validate`` at create, it is the caller's input that is wrong: the create is refused (400,
    the reason under ``params`` and the param's name) and nothing is written."""

    def __init__(self, message: str, *, param: str, evidence: dict[str, Any] | None = None) -> None:
        super().__init__(message, evidence=evidence)
        self.param = param


class TransientError(ExecutorError):
    """Nothing happened and a later attempt may succeed (rate limit, venue down).

    ``retry_after`` (seconds) is the venue's own word on when to ask again (an HTTP
    Retry-After, a ban's end): the next attempt or poll is never earlier. Raised by ``submit``
    it still means UNKNOWN (the request may have left); an executor that knows its venue
    refused before acting should find that out in ``prepare`` instead.
    """

    def __init__(
        self,
        message: str,
        *,
        evidence: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, evidence=evidence)
        self.retry_after = retry_after


class VenueWait(TransientError):
    """The venue asks us to wait before trying (a rate limit, a ban's end, maintenance):
    nothing was attempted and nothing is wrong with the node, so the wait does not count
    against ``QTG_MAX_DISPATCHES``; a wait longer than ``QTG_WAIT_ATTENTION_SECONDS`` asks a
    person to look instead of failing. (A ``TransientError`` with ``retry_after`` counts as
    one too: the venue said when to come back.)"""


class AmbiguousError(ExecutorError):
    """The side effect may or may not have happened (timeout, lost response): UNKNOWN."""


class LeaseLost(Exception):
    """Raised by ``ExecutionContext.fence``: this worker no longer holds the node's lease (it
    was reaped, or another worker holds it under a newer epoch). Nothing may be sent; the
    node belongs to whoever holds it now."""


def _no_fence(timeout: float, then: Callable[[], None] | None = None) -> datetime:
    """The fence of a context built outside a worker (a unit test): nothing to prove."""
    if then is not None:
        then()
    return timezone.now() + timedelta(seconds=timeout)


@dataclass(frozen=True)
class Upstream:
    """What an executor may know about another node of the same request."""

    executor: str
    state: str
    external_ref: str
    result: dict[str, Any]
    config: dict[str, Any]


@dataclass(frozen=True)
class ExecutionContext:
    """Everything an executor needs about one node attempt, as plain values (no ORM rows)."""

    request_id: str
    node_id: int
    node_key: str
    attempt: int
    asset: str
    amount: Decimal
    source: str
    destination: str
    config: dict[str, Any]
    params: dict[str, Any]
    idempotency_key: str = ""
    signed_payload: str = ""
    external_ref: str = ""
    result: dict[str, Any] = field(default_factory=dict)
    upstream: dict[str, Upstream] = field(default_factory=dict)
    # ``fence(timeout, then=None) -> deadline``: call it right before a side-effecting request
    # leaves the process. In one transaction it proves this worker still holds the node's
    # lease (owner and epoch) and that the lease outlasts ``timeout`` (extending it), records
    # the fenced call, and runs ``then()`` (e.g. a journal's SENDING -> SENT compare-and-set);
    # it returns the deadline after which the request must not take effect (give it to the
    # venue as the request's own validity where the protocol has one). Raises ``LeaseLost``:
    # then nothing may be sent.
    fence: Callable[..., datetime] = field(default=_no_fence, compare=False, repr=False)

    @property
    def fault(self) -> str:
        """The sandbox fault injected for this node (``params["sandbox"][node_key]``), if any."""
        faults = self.params.get("sandbox") or {}
        value = faults.get(self.node_key, "") if isinstance(faults, dict) else ""
        return value if isinstance(value, str) else ""


@dataclass(frozen=True)
class NodeSpec:
    """A node as a movement being created would run it (``Executor.validate``): the
    movement's fields and the node's resolved template config, before anything is written."""

    node_key: str
    asset: str
    amount: Decimal
    source: str
    destination: str
    config: dict[str, Any]
    params: dict[str, Any]


# Why an executor asks a person to look (``"attention"`` in a result's detail or an error's
# evidence: ``{"reason": ..., "message": ...}``); ``movements.models.AttentionReason`` lists them.
EXECUTOR_ATTENTION_REASONS = (
    "reorg",
    "fee_cap",
    "dropped",
    "replaced_mined",
    "broadcast_refused",
    "expired",
    "venue",
    "final_reorg",
)


@dataclass(frozen=True)
class Prepared:
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Signed:
    payload: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Submitted:
    """The venue accepted the side effect. ``done`` means a sync-terminal submit (COMPLETED);
    otherwise the node is SUBMITTED and observed."""

    external_ref: str
    done: bool = False
    detail: dict[str, Any] = field(default_factory=dict)


class ObservedStatus(StrEnum):
    PENDING = "PENDING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"
    # The observed transaction left the canonical chain: recorded with evidence, then UNKNOWN.
    REORG = "REORG"


@dataclass(frozen=True)
class Observation:
    """What the venue shows of a submitted side effect. ``external_ref`` names it where the
    node has no reference yet; with ``replaced`` set on a COMPLETED observation it replaces
    the node's (what settled is a replacement of what was submitted: a fee bump that won)."""

    status: ObservedStatus
    external_ref: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    replaced: bool = False


class RecoveredOutcome(StrEnum):
    SUBMITTED = "SUBMITTED"
    COMPLETED = "COMPLETED"
    # The venue positively says the attempt failed (refused it, a mined transaction reverted).
    FAILED = "FAILED"
    # The venue has no trace of the attempt. It proves that the side effect never happened
    # only under the worker's rules (``execution.outcomes.absence_unproven``): the lease gone,
    # the request's lifetime past, the visibility window past, said more than once; until
    # then the node stays UNKNOWN. Concluded, it is FAILED.
    NOT_FOUND = "NOT_FOUND"
    # The venue cannot answer yet: stay UNKNOWN and ask again later.
    UNRESOLVED = "UNRESOLVED"


@dataclass(frozen=True)
class Recovery:
    outcome: RecoveredOutcome
    external_ref: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


class Executor:
    """Base class for executors; the worker maps their results and errors to node transitions.

    Subclasses override what their node kind needs: an ACTION node runs ``prepare``,
    ``sign`` (when signing is required), ``submit`` and then ``observe`` if the submit was not
    terminal; an OBSERVE node runs ``observe`` only; an UNKNOWN node runs ``recover``.
    """

    name: str = ""
    # How long to wait between two observations of a pending node, in seconds.
    poll_seconds: float | None = None
    # Whether the context must carry the other nodes of the request (one query less if not).
    needs_upstream: bool = True
    # How long a node may wait on the venue (SUBMITTED, OBSERVING, UNKNOWN) before an operator
    # is asked to look; None: ``settings.QTG_STUCK_AFTER_SECONDS``.
    stuck_after_seconds: float | None = None
    # How long after a submit began the venue may still not show it: "not found" proves that
    # a submit never happened only once this window has passed (and the venue was asked again).
    visibility_seconds: float = 0.0
    # What the venue calls the reference of a submit (withdrawal id, transaction hash), when
    # the nodes after this one need it: whoever settles an UNKNOWN node as SUBMITTED or
    # COMPLETED by hand must give it.
    external_ref_name: str = ""
    # The most one submit call may take while its worker runs (its client timeout): the lease
    # is made to outlast it before the call leaves (the fence).
    call_timeout_seconds: float = 30.0

    def call_timeout(self, ctx: ExecutionContext) -> float:
        """``call_timeout_seconds`` for this node's venue."""
        return self.call_timeout_seconds

    def request_lifetime(self, ctx: ExecutionContext) -> float | None:
        """How long after its fenced deadline a request already sent may still take effect
        (seconds): a signed request's own validity (Binance's recvWindow), a venue's queue.
        None (the default): it cannot be bounded (a signed chain transaction can be mined any
        time), so "not found" never proves that it did not happen: the node stays UNKNOWN
        and a person is asked once the visibility window has passed."""
        return None

    def visibility_window(self, ctx: ExecutionContext) -> float:
        """``visibility_seconds`` for this node's venue or account (a venue whose history lags
        more than another's overrides it)."""
        return self.visibility_seconds

    def validate(self, spec: NodeSpec) -> None:
        """Refuse, at create, a movement this executor could never carry out (an amount finer
        than the token's decimals, an address the chain cannot have, an unconfigured account):
        raise ``DeterministicError`` and the movement fails validation with its message,
        before any reservation is held. The default accepts everything."""

    @classmethod
    def can_observe(cls) -> bool:
        """Whether a submitted node of this executor can be watched until it settles."""
        return cls.observe is not Executor.observe

    def prepare(self, ctx: ExecutionContext) -> Prepared:
        return Prepared()

    def sign(self, ctx: ExecutionContext) -> Signed:
        raise DeterministicError(f"executor {self.name} cannot sign")

    def submit(self, ctx: ExecutionContext) -> Submitted:
        raise DeterministicError(f"executor {self.name} has nothing to submit")

    def observe(self, ctx: ExecutionContext) -> Observation:
        raise DeterministicError(f"executor {self.name} cannot observe")

    def recover(self, ctx: ExecutionContext) -> Recovery:
        """Reconcile an UNKNOWN node by asking the venue about the idempotency key / tx hash.
        The default suits read-only executors: observe again."""
        observation = self.observe(ctx)
        outcome = {
            ObservedStatus.COMPLETED: RecoveredOutcome.COMPLETED,
            ObservedStatus.FAILED: RecoveredOutcome.FAILED,
            ObservedStatus.PENDING: RecoveredOutcome.SUBMITTED,
        }.get(observation.status, RecoveredOutcome.UNRESOLVED)
        return Recovery(outcome, observation.external_ref, observation.detail)
