"""Each committed transition logs one INFO line and is counted; venue calls are timed."""

import logging

from prometheus_client import REGISTRY

from movements.services import movement_approve
from qtg.core.actors import Actor
from tests.execution.conftest import fast_sandbox, settle  # noqa: F401  (fixture)


def transitions(old: str, new: str, subject: str = "request") -> float:
    labels = {"subject": subject, "from_state": old, "to_state": new}
    return REGISTRY.get_sample_value("qtg_transitions_total", labels) or 0.0


def transition_lines(caplog) -> list[dict]:
    return [
        record.msg
        for record in caplog.records
        if record.name == "movements.transitions" and isinstance(record.msg, dict)
    ]


def test_an_approval_logs_one_info_line_per_transition_with_id_node_states_and_actor(
    make_movement, caplog, django_capture_on_commit_callbacks
):
    # given a movement waiting for approval
    movement = make_movement()
    caplog.set_level(logging.INFO)
    caplog.clear()

    # when a supervisor approves it
    with django_capture_on_commit_callbacks(execute=True):
        movement_approve(request=movement, actor=Actor.system("approver"))

    # then the request's and the root node's transitions are each one INFO line
    lines = transition_lines(caplog)
    assert [(line["node_key"], line["old_state"], line["new_state"]) for line in lines] == [
        ("", "PENDING_APPROVAL", "APPROVED"),
        ("withdraw", "BLOCKED", "READY"),
    ]
    assert {r.levelname for r in caplog.records if r.name == "movements.transitions"} == {"INFO"}
    node_line = lines[1]
    assert node_line["movement_id"] == str(movement.pk)
    assert node_line["actor"] == "system:approver"
    assert node_line["attempt"] == 1
    assert node_line["event"] == (
        f"movement {movement.pk} node withdraw: BLOCKED → READY by system:approver"
    )


def test_a_transition_is_counted_by_its_edge_once_committed(
    make_movement, django_capture_on_commit_callbacks
):
    movement = make_movement()
    before = transitions("PENDING_APPROVAL", "APPROVED")

    with django_capture_on_commit_callbacks(execute=True):
        movement_approve(request=movement, actor=Actor.system("approver"))

    assert transitions("PENDING_APPROVAL", "APPROVED") == before + 1


def test_a_rolled_back_transition_is_neither_logged_nor_counted(make_movement, caplog):
    # given approval inside a transaction that is rolled back (the test's own), no commit runs
    movement = make_movement()
    before = transitions("PENDING_APPROVAL", "APPROVED")
    caplog.set_level(logging.INFO)
    caplog.clear()

    movement_approve(request=movement, actor=Actor.system("approver"))

    assert transitions("PENDING_APPROVAL", "APPROVED") == before
    assert transition_lines(caplog) == []


def venue_calls(executor: str, method: str) -> float:
    labels = {"executor": executor, "method": method, "outcome": "ok"}
    return REGISTRY.get_sample_value("qtg_venue_call_seconds_count", labels) or 0.0


def test_the_workers_time_every_venue_call_by_executor_and_method(
    make_movement, django_capture_on_commit_callbacks
):
    # given an approved exchange-to-exchange movement
    movement = make_movement(approve=True)
    before = venue_calls("cex_withdraw", "submit")

    # when the workers run it to its end
    with django_capture_on_commit_callbacks(execute=True):
        settle(movement)

    # then its withdrawal submit was timed
    assert venue_calls("cex_withdraw", "submit") == before + 1
