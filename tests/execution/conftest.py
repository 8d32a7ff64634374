"""Fixtures for the execution tests: fast sandbox chains, and helpers that drive the workers'
services in-process until a movement settles."""

import time

import pytest

from movements.models import MovementEvent, MovementRequest
from movements.services import execution
from movements.states import TERMINAL_REQUEST_STATES


@pytest.fixture(autouse=True)
def fast_sandbox(settings):
    """Chains mine quickly, polls and retries are immediate: tests run in well under a second
    of simulated time per movement."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.QTG_SANDBOX_ENABLED = True
    settings.QTG_SANDBOX_TIME_SCALE = 0.002
    settings.QTG_OBSERVE_POLL_SECONDS = 0
    settings.QTG_RETRY_BASE_SECONDS = 0
    settings.QTG_RETRY_MAX_SECONDS = 0


def run_workers_once(owner: str = "test-worker") -> int:
    """One pass of every sweep, as beat would trigger them; returns how much was done."""
    done = execution.reap_expired_leases()
    done += execution.dispatch_ready_nodes(owner=owner)
    done += execution.observe_submitted_nodes(owner=owner)
    done += execution.recover_unknown_nodes(owner=owner)
    return done


def settle(request: MovementRequest, *, until=None, timeout: float = 10.0) -> MovementRequest:
    """Run the sweeps until the request reaches a state in ``until`` (default: terminal or
    waiting for a human), or fail after ``timeout`` seconds."""
    targets = set(until or (*TERMINAL_REQUEST_STATES, "MANUAL_INTERVENTION",
                            "WAITING_MANUAL_ACTION"))
    deadline = time.monotonic() + timeout
    while True:
        request.refresh_from_db()
        if request.request_state in targets:
            return request
        if time.monotonic() > deadline:
            states = dict(request.nodes.values_list("node_key", "node_state"))
            raise AssertionError(f"request stuck in {request.request_state}: {states}")
        if not run_workers_once():
            time.sleep(0.01)


def node_path(request: MovementRequest, node_key: str) -> list[str]:
    """The states a node went through, from its audit events."""
    events = MovementEvent.objects.filter(
        request=request, node_key=node_key, kind=MovementEvent.Kind.TRANSITION
    ).order_by("created_at", "id")
    path = []
    for event in events:
        if not path:
            path.append(event.old_state)
        path.append(event.new_state)
    return path


def assert_history_replays(request: MovementRequest) -> None:
    """Every node's transition events chain from BLOCKED to its current state along legal
    edges, and so do the request's (from RECEIVED)."""
    from movements.states import can_transition_node_state, can_transition_request_state

    for node in request.nodes.all():
        state = "BLOCKED"
        for event in node.events.filter(kind=MovementEvent.Kind.TRANSITION).order_by("id"):
            assert event.old_state == state, (node.node_key, event.old_state, state)
            assert can_transition_node_state(event.old_state, event.new_state)
            state = event.new_state
        assert state == node.node_state, (node.node_key, state, node.node_state)
    state = "RECEIVED"
    for event in request.events.filter(node__isnull=True,
                                       kind=MovementEvent.Kind.TRANSITION).order_by("id"):
        assert event.old_state == state
        assert can_transition_request_state(event.old_state, event.new_state)
        state = event.new_state
    assert state == request.request_state


def ledger(operation: str, **filters) -> list:
    from sandbox.models import LedgerEntry

    return list(LedgerEntry.objects.filter(operation=operation, **filters))
