"""The row writers (``movements.services.writers``) leave the same rows and the same audit trail:
one sequence of writes is run through each writer, at once and in a batch (``state.batch``),
and the resulting requests, nodes, reservations and events are compared. SQLite runs the ORM
writer (at once and batched); PostgreSQL adds its own writer, and the whole worker lane under
each."""

import re
import uuid
from contextlib import contextmanager, nullcontext
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.utils import timezone

from movements.executors.base import (
    Observation,
    ObservedStatus,
    Prepared,
    RecoveredOutcome,
    Recovery,
    TransientError,
)
from movements.models import MovementEvent, MovementRequest, MovementRequestNode
from movements.selectors import current_nodes
from movements.selectors import current_nodes as current_nodes_after
from movements.services import (
    advance_after_completion,
    execution,
    intervention_resume,
    movement_cancel,
    record_event,
    save_fields,
    set_node_state,
    set_request_state,
)
from movements.services.state import batch, save_leases
from movements.services.writers import (
    DeferredWriter,
    OrmRowWriter,
    PostgresRowWriter,
    make_row_writer,
    row_writer,
    use_row_writer,
)
from movements.states import NodeState, RequestState
from qtg.core.actors import Actor
from qtg.core.chain import verify_stream
from qtg.core.errors import StaleState
from reservations.models import Reservation
from tests.conftest import ALL_MOVEMENT_PERMS, make_user

pytestmark = pytest.mark.django_db

NS, RS = NodeState, RequestState
ACTOR = Actor.system("tests")
TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")
# A time inside a sentence (a reason: "the lease of worker w expired at 2026-12-01T..").
TIME_IN_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?([+-]\d{2}:\d{2}|Z)?")


def writer_names() -> list[str]:
    return ["orm", "postgresql"] if connection.vendor == "postgresql" else ["orm"]


@contextmanager
def writing_with(name: str):
    """Make ``name`` the process's writer for the block."""
    previous = use_row_writer(make_row_writer(name))
    try:
        yield
    finally:
        use_row_writer(previous)


def _plain(value: Any, aliases: dict[str, str]) -> Any:
    """Rows as comparable values: times become "<time>" (None stays None), measured lags
    "<lag>", request ids their aliases."""
    if isinstance(value, dict):
        return {
            key: "<lag>" if key.endswith("_lag_seconds") else _plain(item, aliases)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_plain(item, aliases) for item in value]
    if isinstance(value, datetime):
        return "<time>"
    if isinstance(value, uuid.UUID):
        value = str(value)
    if isinstance(value, str):
        if TIME.match(value):
            return "<time>"
        value = TIME_IN_TEXT.sub("<time>", value)
        for real, alias in aliases.items():
            value = value.replace(real, alias)
    return value


def _fields(instance: Any, *skip: str) -> dict[str, Any]:
    return {
        f.attname: getattr(instance, f.attname)
        for f in instance._meta.concrete_fields
        if f.attname not in skip
    }


def snapshot(*requests: MovementRequest) -> list[Any]:
    """Everything the writes left of ``requests``: request rows, node rows (every attempt),
    reservations and the audit trail in order."""
    aliases = {str(request.pk): f"<request {i}>" for i, request in enumerate(requests)}
    rows = []
    for request in requests:
        fresh = MovementRequest.objects.get(pk=request.pk)
        nodes = MovementRequestNode.objects.filter(request=fresh).order_by("node_key", "attempt")
        events = MovementEvent.objects.filter(request=fresh).order_by("id")
        rows.append(
            {
                "request": _fields(fresh, "id"),
                "nodes": [_fields(n, "id", "request_id", "plan_node_id") for n in nodes],
                "reservations": list(
                    Reservation.objects.filter(request_id=fresh.pk).values_list("state", "amount")
                ),
                # The chain hashes cover ids and times, which differ between runs: each run's
                # chain is verified instead.
                "events": [
                    _fields(e, "id", "request_id", "node_id", "chain_hash", "chain_prev")
                    for e in events
                ],
                "chain_breaks": verify_stream(MovementEvent, str(fresh.pk), list(events)),
            }
        )
    return _plain(rows, aliases)


# --- one sequence of state.py writes, at once or in a batch ------------------------------------


def _by_key(request: MovementRequest, writer) -> dict[str, MovementRequestNode]:
    nodes = current_nodes_after(request, lock=True, writer=writer)
    for node in nodes:
        node.request = request
    return {node.node_key: node for node in nodes}


def write_sequence(request: MovementRequest, w) -> None:
    """Approve, claim, submit (a compare-and-set that wins, then one that loses), complete and
    advance through to COMPLETED, with bookkeeping saves and evidence on the way; every write
    through ``w`` (None: the process's writer, at once)."""
    request = MovementRequest.objects.select_for_update(no_key=True).get(pk=request.pk)
    nodes = _by_key(request, w)
    withdraw = nodes["withdraw"]
    request.approved_at = timezone.now()
    set_request_state(
        request,
        RS.APPROVED,
        actor=ACTOR,
        nodes=[*nodes.values()],
        update_fields=["approved_at"],
        writer=w,
    )
    set_node_state(withdraw, NS.READY, actor=ACTOR, writer=w)
    request.current_frontier = ["withdraw"]
    save_fields(request, ["current_frontier"], writer=w)
    set_request_state(request, RS.EXECUTING, actor=ACTOR, nodes=[*nodes.values()], writer=w)
    withdraw.lease_owner, withdraw.dispatch_count, withdraw.idempotency_key = "w1", 1, "key-1"
    set_node_state(
        withdraw,
        NS.PREPARING,
        actor=ACTOR,
        detail={"dispatch": 1},
        update_fields=["lease_owner", "dispatch_count", "idempotency_key"],
        writer=w,
    )
    withdraw.signed_payload = "0xsigned"
    set_node_state(
        withdraw,
        NS.SUBMITTING,
        actor=ACTOR,
        update_fields=["signed_payload"],
        only_if={"lease_owner": "w1"},
        writer=w,
    )
    withdraw.lease_owner = "w2"  # the lease passes to someone else...
    save_fields(withdraw, ["lease_owner"], writer=w)
    with pytest.raises(StaleState):  # ...so w1's compare-and-set loses, and writes nothing
        set_node_state(withdraw, NS.COMPLETED, actor=ACTOR, only_if={"lease_owner": "w1"}, writer=w)
    withdraw.refresh_from_db()
    withdraw.request = request
    withdraw.external_ref, withdraw.result, withdraw.lease_owner = "wd-1", {"fee": "0.1"}, ""
    set_node_state(
        withdraw,
        NS.COMPLETED,
        actor=ACTOR,
        detail={"external_ref": "wd-1"},
        update_fields=["external_ref", "result", "lease_owner"],
        writer=w,
    )
    record_event(request=request, node=withdraw, actor=ACTOR, detail={"receipt": 1}, writer=w)
    advance_after_completion(request, withdraw, actor=ACTOR, writer=w)
    for key in ("withdraw_observe", "deposit_observe"):
        observer = _by_key(request, w)[key]
        set_node_state(observer, NS.OBSERVING, actor=ACTOR, writer=w)
        observer.next_attempt_at = timezone.now()
        save_fields(observer, ["next_attempt_at"], writer=w)
        set_node_state(observer, NS.COMPLETED, actor=ACTOR, detail={"seen": key}, writer=w)
        advance_after_completion(request, observer, actor=ACTOR, writer=w)


@pytest.mark.parametrize("name", ["orm", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_a_sequence_of_writes_leaves_the_same_rows_written_at_once_or_in_a_batch(
    make_movement, name
):
    runs = []
    for deferred in (False, True):
        with writing_with(name):
            request = make_movement()
            with transaction.atomic(), batch() if deferred else nullcontext() as writes:
                write_sequence(request, writes)
        runs.append(snapshot(request))

    assert runs[0] == runs[1]
    request_row = runs[0][0]["request"]
    [withdraw] = [n for n in runs[0][0]["nodes"] if n["node_key"] == "withdraw"]
    assert request_row["request_state"] == RS.COMPLETED
    assert request_row["current_frontier"] == []
    assert withdraw["node_state"] == NS.COMPLETED
    assert (withdraw["lease_owner"], withdraw["external_ref"]) == ("", "wd-1")
    withdraw_path = [
        (e["old_state"], e["new_state"])
        for e in runs[0][0]["events"]
        if e["node_key"] == "withdraw"
    ]
    assert withdraw_path == [
        ("BLOCKED", "READY"),
        ("READY", "PREPARING"),
        ("PREPARING", "SUBMITTING"),
        ("SUBMITTING", "COMPLETED"),  # once: the lost compare-and-set left no event
        ("", ""),  # the receipt recorded as evidence
    ]


@pytest.mark.postgres
def test_the_orm_and_the_postgresql_writers_leave_the_same_rows(make_movement):
    runs = []
    for name in ("orm", "postgresql"):
        with writing_with(name):
            request = make_movement()
            with transaction.atomic(), batch() as writes:
                write_sequence(request, writes)
            again = make_movement()
            with transaction.atomic():
                write_sequence(again, None)
        runs.append(snapshot(request, again))

    assert runs[0] == runs[1]


# --- the worker lane and the operator's services under each writer ----------------------------


def _run(claims, runner, **methods):
    for claim in claims:
        for method, behaviour in methods.items():
            setattr(claim.executor, method, behaviour)
    return runner(claims)


def _raise(error):
    def call(ctx):
        raise error

    return call


def lane(make_movement) -> list[Any]:
    """A movement through the workers (an ambiguous submit recovered, a pending look, a reorg
    recovered, a transient error, a lost compare-and-set) and one reaped and cancelled."""
    later = timezone.now() + timedelta(hours=1)
    request = make_movement(approve=True)
    _run(
        execution.claim_ready_nodes(owner="w1", limit=10),
        execution.run_actions,
        prepare=lambda ctx: Prepared({"quote": "1"}),
        submit=_raise(TimeoutError("venue silent")),
    )
    _run(
        execution.claim_unknown_nodes(owner="w1", as_of=later, limit=10),
        execution.run_recovers,
        recover=lambda ctx: Recovery(RecoveredOutcome.COMPLETED, "wd-1", {"found": True}),
    )
    _run(
        execution.claim_ready_nodes(owner="w1", limit=10),
        execution.run_observes,
        observe=lambda ctx: Observation(ObservedStatus.PENDING, detail={"confirmations": 1}),
    )
    _run(
        execution.claim_observable_nodes(owner="w1", as_of=later, limit=10),
        execution.run_observes,
        observe=lambda ctx: Observation(ObservedStatus.REORG, detail={"tx_hash": "0x1"}),
    )
    _run(
        execution.claim_unknown_nodes(owner="w1", as_of=later, limit=10),
        execution.run_recovers,
        recover=lambda ctx: Recovery(RecoveredOutcome.SUBMITTED, detail={"rebroadcast": True}),
    )
    _run(
        execution.claim_observable_nodes(owner="w1", as_of=later, limit=10),
        execution.run_observes,
        observe=lambda ctx: Observation(ObservedStatus.COMPLETED, "tx-1", {"blocks": 12}),
    )
    # Recovery settled the reorged node, but MANUAL_INTERVENTION is left only by an operator.
    operator = User.objects.filter(username="lane-operator").first() or make_user(
        "lane-operator", *ALL_MOVEMENT_PERMS
    )
    intervention_resume(
        request=request, actor=Actor.for_user(operator), reason="the transfer is final"
    )
    deposit = execution.claim_ready_nodes(owner="w1", limit=10)
    with pytest.raises(StaleState):
        set_node_state(deposit[0].node, NS.COMPLETED, actor=ACTOR, only_if={"lease_owner": "w9"})
    _run(deposit, execution.run_observes, observe=_raise(TransientError("busy")))
    _run(
        execution.claim_observable_nodes(owner="w1", as_of=later, limit=10),
        execution.run_observes,
        observe=lambda ctx: Observation(ObservedStatus.COMPLETED, detail={"credited": True}),
    )

    spare = make_movement(approve=True)
    [claim] = execution.claim_ready_nodes(owner="dead-worker", limit=10)
    gone = timezone.now() - timedelta(seconds=1)
    save_leases([claim.node_id], expires_at=gone, heartbeat_at=gone)
    assert execution.reap_expired_leases() == 1
    movement_cancel(request=spare, actor=ACTOR, reason="not needed")
    return snapshot(request, spare)


@pytest.mark.postgres
def test_the_worker_lane_leaves_the_same_rows_through_either_writer(make_movement):
    runs = []
    for name in ("orm", "postgresql"):
        with writing_with(name):
            runs.append(lane(make_movement))

    assert runs[0] == runs[1]
    done, cancelled = runs[0]
    assert done["request"]["request_state"] == RS.COMPLETED
    assert cancelled["request"]["request_state"] == RS.CANCELLED
    requests_path = [e["new_state"] for e in done["events"] if e["node_key"] == ""]
    assert "MANUAL_INTERVENTION" in requests_path
    assert any("reorg" in e["detail"] for e in done["events"])
    reaped = [
        e["detail"] for e in cancelled["events"] if e["detail"].get("reason") == "lease expired"
    ]
    assert reaped and reaped[0]["lease_owner"] == "dead-worker"


def test_a_lane_through_the_orm_writer_ends_where_the_spec_says(make_movement):
    with writing_with("orm"):
        done, cancelled = lane(make_movement)

    assert done["request"]["request_state"] == RS.COMPLETED
    assert [n["node_state"] for n in done["nodes"]] == [NS.COMPLETED] * 3
    assert all(n["lease_owner"] == "" for n in done["nodes"])
    assert cancelled["request"]["request_state"] == RS.CANCELLED


# --- choosing and batching ---------------------------------------------------------------------


def test_auto_picks_the_database_s_own_writer():
    expected = PostgresRowWriter if connection.vendor == "postgresql" else OrmRowWriter

    assert type(make_row_writer("auto")) is expected


def test_the_process_writes_with_the_configured_writer(settings):
    assert type(row_writer()) is type(make_row_writer(settings.QTG_ROW_WRITER))


def test_an_unknown_or_impossible_writer_is_refused_at_start_up():
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="one of auto"):
        make_row_writer("fast")
    if connection.vendor != "postgresql":
        with pytest.raises(ImproperlyConfigured, match="sqlite"):
            make_row_writer("postgresql")


def test_a_batch_writes_nothing_until_it_ends_and_nothing_if_it_raises(make_movement):
    request = make_movement()

    with pytest.raises(RuntimeError), transaction.atomic(), batch() as writes:
        assert isinstance(writes, DeferredWriter)
        request.current_frontier = ["somewhere"]
        save_fields(request, ["current_frontier"], writer=writes)
        assert MovementRequest.objects.get(pk=request.pk).current_frontier == []
        raise RuntimeError("stop")

    assert MovementRequest.objects.get(pk=request.pk).current_frontier == []


def test_reading_the_nodes_back_inside_a_batch_sees_its_writes(make_movement):
    request = make_movement()

    with transaction.atomic(), batch() as writes:
        withdraw = _by_key(request, writes)["withdraw"]
        set_node_state(withdraw, NS.READY, actor=ACTOR, writer=writes)
        assert MovementRequestNode.objects.get(pk=withdraw.pk).node_state == NS.BLOCKED

        states = {n.node_key: n.node_state for n in current_nodes_after(request, writer=writes)}

    assert states["withdraw"] == NS.READY
    assert {n.node_key: n.node_state for n in current_nodes(request)}["withdraw"] == NS.READY


@pytest.mark.django_db(transaction=True)
def test_a_batch_needs_a_transaction():
    from django.db.transaction import TransactionManagementError

    with pytest.raises(TransactionManagementError), batch():
        pass
