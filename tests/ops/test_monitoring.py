"""What an on-call engineer's Prometheus and Grafana read: the gauges the scheduler computes
(a scrape reads one row), task, webhook, HTTP, venue and process metrics, and the shipped alert
rules and dashboard, which may name only metrics QTG exports (promtool checks and unit-tests
the rules)."""

import json
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml
from django.db import OperationalError
from prometheus_client import REGISTRY

from ops import gauges
from ops.metrics import BuildCollector, GaugeCollector
from ops.task_metrics import PUBLISHED_AT
from ops.tasks import refresh_gauges
from tests.ops.test_metrics import sample, scrape

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "qtg-overview.json"
METRIC = re.compile(r"\b((?:qtg|django_http)_[a-z0-9_]+)")
SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


def exported_names() -> set[str]:
    """Every metric family this code defines (whether or not it has samples yet)."""
    import django_prometheus.middleware  # noqa: F401 - defines the HTTP metrics

    names = set()
    for collector in (REGISTRY, GaugeCollector(), BuildCollector()):
        for family in collector.collect():
            names.add(family.name)
    return names


def used_names(text: str) -> set[str]:
    found = set()
    for name in METRIC.findall(text):
        for suffix in SUFFIXES:
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                break
        found.add(name)
    return found


def dashboard_exprs() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    return [t["expr"] for panel in board["panels"] for t in panel["targets"]]


@pytest.mark.django_db
def test_the_alerts_and_the_dashboard_name_only_metrics_qtg_exports(client):
    client.get("/health/live")  # django-prometheus defines its metrics with its middleware
    rules = yaml.safe_load(ALERTS.read_text())
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    exported = exported_names()

    for expr in exprs + dashboard_exprs():
        assert used_names(expr) <= exported, expr


@pytest.mark.django_db
def test_the_alerts_cover_what_the_runtime_issue_names():
    rules = yaml.safe_load(ALERTS.read_text())
    exprs = " ".join(rule["expr"] for group in rules["groups"] for rule in group["rules"])
    for name in (
        "qtg_oldest_manual_intervention_seconds",  # MANUAL_INTERVENTION waiting
        "qtg_oldest_unknown_node_seconds",  # UNKNOWN older than N
        "qtg_sender_oldest_waiting_seconds",  # stuck nonce queue
        "qtg_webhook_deliveries_dead",
        "qtg_gauges_age_seconds",  # scheduler down
        "qtg_reap_lag_seconds_bucket",
    ):
        assert name in exprs, name


def test_the_dashboard_is_grafana_json_with_one_query_per_panel():
    board = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)) and board["uid"]
    assert all(panel["targets"] and panel["title"] for panel in board["panels"])


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool (Debian's prometheus)")
def test_promtool_checks_the_rules_and_their_unit_tests_pass():
    checked = subprocess.run(
        ["promtool", "check", "rules", str(ALERTS)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        ["promtool", "test", "rules", "alerts_test.yml"],
        cwd=ALERTS.parent,
        capture_output=True,
        text=True,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


@pytest.mark.django_db
def test_a_scrape_reads_the_stored_gauges_in_one_query(
    client, settings, make_movement, django_assert_max_num_queries
):
    settings.QTG_METRICS_TOKEN = ""
    for _ in range(3):
        make_movement(approve=True)
    refresh_gauges.apply()

    with django_assert_max_num_queries(1):
        text = scrape(client)

    assert sample(text, "qtg_movements", state="APPROVED") == 3
    assert sample(text, "qtg_gauges_age_seconds") < 60
    assert sample(text, "qtg_build_info", **build_labels(text)) == 1
    assert re.search(r"^process_resident_memory_bytes \S+$", text, re.M)


def build_labels(text: str) -> dict[str, str]:
    line = next(row for row in text.splitlines() if row.startswith("qtg_build_info{"))
    return dict(re.findall(r'(\w+)="([^"]*)"', line))


@pytest.mark.django_db
def test_without_the_database_a_scrape_answers_503(client, settings, monkeypatch):
    settings.QTG_METRICS_TOKEN = ""

    def unavailable():
        raise OperationalError("connection refused")

    monkeypatch.setattr(gauges, "current", unavailable)

    response = client.get("/metrics")
    assert response.status_code == 503
    assert b"database" in response.content


@pytest.mark.django_db
def test_queue_depth_counts_the_messages_waiting_in_a_queue():
    from qtg.celery import app

    queue = f"qtg-depth-{uuid.uuid4().hex[:8]}"
    with app.connection_for_write() as connection:
        simple = connection.SimpleQueue(queue)
        for n in range(3):
            simple.put({"n": n})
        try:
            assert gauges.queue_depths([queue]) == {queue: 3}
        finally:
            simple.clear()
            simple.close()


@pytest.mark.django_db
def test_a_published_task_carries_its_publication_time_and_its_queue_wait_is_measured():
    from qtg.celery import app

    queue = f"qtg-stamp-{uuid.uuid4().hex[:8]}"
    published = time.time()
    refresh_gauges.apply_async(queue=queue)
    with app.connection_for_read() as connection:
        simple = connection.SimpleQueue(queue)
        try:
            message = simple.get(timeout=10)
            stamp = float(message.headers[PUBLISHED_AT])
            message.ack()
        finally:
            simple.close()
    assert published - 1 <= stamp <= time.time()

    def waits():
        labels = {"task": "ops.refresh_gauges"}
        return REGISTRY.get_sample_value("qtg_task_queue_wait_seconds_count", labels) or 0.0

    before = waits()
    refresh_gauges.apply(headers={PUBLISHED_AT: time.time() - 5})
    assert waits() == before + 1


@pytest.mark.django_db
def test_each_senders_nonce_queue_is_a_gauge(client, settings):
    from datetime import timedelta

    from django.utils import timezone

    from venues.models import ChainTransaction, NonceCursor

    settings.QTG_METRICS_TOKEN = ""
    sender = "0x" + "ab" * 20
    NonceCursor.objects.create(chain="ethereum", sender=sender, next_nonce=9)
    old = timezone.now() - timedelta(minutes=20)
    for nonce, state in ((7, "PENDING"), (8, "SIGNED"), (6, "CONFIRMED")):
        ChainTransaction.objects.create(
            chain="ethereum", sender=sender, nonce=nonce, state=state, created_at=old
        )
    refresh_gauges.apply()

    text = scrape(client)
    labels = {"chain": "ethereum", "sender": sender}
    assert sample(text, "qtg_sender_waiting_transactions", **labels) == 2
    assert sample(text, "qtg_sender_lowest_waiting_nonce", **labels) == 7
    assert sample(text, "qtg_sender_next_nonce", **labels) == 9
    assert sample(text, "qtg_sender_oldest_waiting_seconds", **labels) >= 1200


@pytest.mark.django_db
def test_http_requests_are_counted_by_status(client, settings):
    settings.QTG_METRICS_TOKEN = ""
    client.get("/health/live")
    client.get("/api/v1/movements/")  # 401: no credentials

    text = scrape(client)
    assert re.search(
        r'^django_http_responses_total_by_status_total\{status="401"\} [1-9]', text, re.M
    )
