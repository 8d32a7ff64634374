"""Events the workers cause are recorded after their write batch reached the database: each
carries the movement as written, and a movement's sequence counts its events in order."""

import json

import pytest

from callbacks.models import Event
from tests.execution.conftest import settle

pytestmark = pytest.mark.django_db


def test_events_written_by_a_worker_batch_show_the_movement_as_it_was_written(make_movement):
    request = make_movement(approve=True)

    request = settle(request)

    assert request.request_state == "COMPLETED"
    events = list(Event.objects.filter(request=request).order_by("sequence"))
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    completed = json.loads(events[-1].body)
    assert completed["type"] == "request_completed"
    assert completed["data"]["request_state"] == "COMPLETED"
    assert {n["node_state"] for n in completed["data"]["nodes"]} <= {"COMPLETED", "SKIPPED"}
    assert completed["data"]["sequence"] == events[-1].sequence
    # Each frontier event shows the node that just woke as READY, not as it was before.
    for event in events:
        body = json.loads(event.body)
        if body["type"] == "frontier_advanced":
            states = {n["node_key"]: n["node_state"] for n in body["data"]["nodes"]}
            for key in body["context"]["woken"]:
                assert states[key] in ("READY", "SKIPPED"), (key, states)
