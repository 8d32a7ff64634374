"""Structured logs: JSON in production with what is bound; routine task lines at DEBUG."""

import io
import json
import logging

import pytest
import structlog

from movements.instruments import transition_committed
from ops.logs import DemoteRoutine, logging_config
from qtg.core.actors import Actor
from tests.api.conftest import client_for, movement_url, post_create


def json_handler() -> logging.Handler:
    spec = logging_config(fmt="json", level="INFO")["formatters"]["qtg"]
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=spec["processors"], foreign_pre_chain=spec["foreign_pre_chain"]
        )
    )
    return handler


def test_in_production_a_transition_is_one_json_line_with_movement_node_attempt_actor_and_request():
    handler = json_handler()
    logger = logging.getLogger("movements.transitions")
    logger.addHandler(handler)
    try:
        with structlog.contextvars.bound_contextvars(request_id="req-42"):
            transition_committed(
                subject="node",
                movement_id="mv-1",
                node_key="withdraw",
                attempt=2,
                old_state="READY",
                new_state="PREPARING",
                actor=Actor.system("worker:w1"),
                seconds=0.001,
            )
    finally:
        logger.removeHandler(handler)

    (line,) = handler.stream.getvalue().splitlines()
    record = json.loads(line)
    assert record["movement_id"] == "mv-1"
    assert record["node_key"] == "withdraw"
    assert record["attempt"] == 2
    assert record["actor"] == "system:worker:w1"
    assert record["request_id"] == "req-42"
    assert record["level"] == "info"
    assert record["event"] == "movement mv-1 node withdraw: READY → PREPARING by system:worker:w1"


def test_a_foreign_library_line_is_json_too():
    handler = json_handler()
    logger = logging.getLogger("some.library")
    logger.addHandler(handler)
    try:
        logger.warning("disk %s", "full")
    finally:
        logger.removeHandler(handler)

    record = json.loads(handler.stream.getvalue())
    assert record["event"] == "disk full" and record["level"] == "warning"


def record(name: str, level: int) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, "Task %s succeeded", ("x",), None)


@pytest.mark.parametrize("name", ["celery.app.trace", "celery.worker.strategy", "celery.beat"])
def test_routine_task_traffic_is_demoted_to_debug(name):
    routine = record(name, logging.INFO)

    assert DemoteRoutine("INFO").filter(routine) is False
    assert routine.levelname == "DEBUG"
    assert DemoteRoutine("DEBUG").filter(record(name, logging.INFO)) is True


def test_other_info_lines_and_task_failures_are_kept():
    assert DemoteRoutine("INFO").filter(record("movements.transitions", logging.INFO))
    assert DemoteRoutine("INFO").filter(record("celery.app.trace", logging.ERROR))


@pytest.mark.django_db(transaction=True)
def test_an_api_request_binds_its_request_id_to_the_transitions_it_causes(caplog):
    from tests.conftest import ALL_MOVEMENT_PERMS, make_user

    integration = client_for(make_user("integration"))
    approver = client_for(make_user("approver", *ALL_MOVEMENT_PERMS))
    movement_id = post_create(integration).json()["id"]
    caplog.set_level(logging.INFO)
    caplog.clear()

    response = approver.post(movement_url(movement_id, "approve"))

    assert response.status_code == 200, response.content
    lines = [
        r.msg
        for r in caplog.records
        if r.name == "movements.transitions" and isinstance(r.msg, dict)
    ]
    # the request's and the root node's transitions, both carrying the one request id
    assert len(lines) == 2
    assert {line["movement_id"] for line in lines} == {movement_id}
    (request_id,) = {line["request_id"] for line in lines}
    assert request_id


def test_a_worker_starting_is_shown_even_when_only_warnings_are():
    assert DemoteRoutine("WARNING").filter(record("celery.apps.worker", logging.INFO))
    assert not DemoteRoutine("WARNING").filter(record("movements.transitions", logging.INFO))


@pytest.mark.django_db
def test_a_host_header_the_deployment_refuses_is_a_warning_line_not_an_error(client):
    handler = json_handler()
    handler.addFilter(DemoteRoutine("INFO"))
    logger = logging.getLogger("django.security.DisallowedHost")
    logger.addHandler(handler)
    try:
        response = client.get("/api/v1/venues/", HTTP_HOST="scanner.invalid")
    finally:
        logger.removeHandler(handler)

    assert response.status_code == 400
    (line,) = handler.stream.getvalue().splitlines()
    record = json.loads(line)
    assert record["level"] == "warning"
    assert "scanner.invalid" in record["event"]
