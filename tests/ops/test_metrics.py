"""/metrics: the names outside checks scrape, the numbers behind them, the bearer token."""

import re

import pytest

NAMES = (
    "qtg_movements",
    "qtg_amount_in_flight",
    "qtg_nodes_unknown",
    "qtg_movements_needing_attention",
    "qtg_oldest_due_node_seconds",
    "qtg_webhook_deliveries_dead",
    "qtg_transitions_total",
    "qtg_transition_seconds",
    "qtg_venue_call_seconds",
)


def scrape(client, **headers) -> str:
    response = client.get("/metrics", **headers)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    return response.content.decode()


def sample(text: str, name: str, **labels) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        match = re.match(r"^(\w+)(?:\{(.*)\})? (\S+)$", line)
        if match and match[1] == name and ",".join(sorted((match[2] or "").split(","))) == (wanted):
            return float(match[3])
    raise AssertionError(f"no sample {name}{{{wanted}}}")


@pytest.mark.django_db
def test_metrics_carries_every_name_outside_checks_use(
    client, make_movement, settings, django_capture_on_commit_callbacks
):
    from movements.services import execution

    settings.QTG_METRICS_TOKEN = ""
    # Something to count, a committed transition and its histogram, a venue call and its
    # histogram (a fresh metrics directory has none of them yet).
    with django_capture_on_commit_callbacks(execute=True):
        make_movement(approve=True)
        execution.dispatch_ready_nodes(owner="tests-metrics", limit=1)

    text = scrape(client)

    for name in NAMES:
        assert re.search(rf"^# TYPE {name}\b", text, re.M) or re.search(
            rf"^{name}(_bucket|_count|_total)?[{{ ]", text, re.M
        ), name


def test_movements_by_state_and_the_held_amount_by_asset_are_those_the_scheduler_computed(
    client, make_movement, settings
):
    from ops.tasks import refresh_gauges

    settings.QTG_METRICS_TOKEN = ""
    assert "qtg_movements" in scrape(client)  # computed once, before any movement
    # given two approved movements holding 100.00 and 250.50 USDC, and one waiting approval
    make_movement(approve=True, amount="100.00")
    make_movement(approve=True, amount="250.50")
    make_movement(amount="7.00")
    # a scrape serves what was computed, saying how old it is ...
    assert sample(scrape(client), "qtg_movements", state="APPROVED") == 0
    refresh_gauges.apply()  # ... until the scheduler computes them again

    text = scrape(client)

    assert sample(text, "qtg_movements", state="APPROVED") == 2
    assert sample(text, "qtg_movements", state="PENDING_APPROVAL") == 1
    assert sample(text, "qtg_movements", state="COMPLETED") == 0
    assert sample(text, "qtg_amount_in_flight", asset="USDC") == pytest.approx(357.5)
    # both withdrawals are READY and due now
    assert sample(text, "qtg_oldest_due_node_seconds") >= 0
    assert sample(text, "qtg_nodes_unknown") == 0


@pytest.mark.django_db
def test_with_a_token_set_metrics_refuses_a_missing_or_wrong_token(client, settings):
    settings.QTG_METRICS_TOKEN = "s3cret"

    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Basic s3cret").status_code == 401
    assert "qtg_movements" in scrape(client, HTTP_AUTHORIZATION="Bearer s3cret")
