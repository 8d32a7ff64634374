"""/health/ and qtg_status: database, broker, beat heartbeat, a worker; JSON; 503 on failure."""

from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from movements import tasks
from ops.heartbeats import record_sweep
from ops.models import SweepHeartbeat


@pytest.fixture(autouse=True)
def quick_ping(settings):
    settings.QTG_HEALTH_PING_SECONDS = 0.3
    settings.QTG_HEARTBEAT_WRITE_SECONDS = 0


def health(client) -> tuple[int, dict]:
    response = client.get("/health/", HTTP_ACCEPT="text/html")
    assert response["Content-Type"] == "application/json"
    return response.status_code, response.json()


@pytest.mark.django_db(transaction=True)
def test_health_is_json_and_503_naming_each_failing_check(client):
    # given no worker runs and no sweep ever finished
    status, body = health(client)

    assert status == 503
    assert body["status"] == "fail"
    assert set(body["checks"]) == {"database", "broker", "beat", "worker"}
    assert body["checks"]["database"]["status"] == "ok"
    assert body["checks"]["broker"]["status"] == "ok"
    assert body["checks"]["beat"]["status"] == "fail"
    assert "no periodic sweep" in body["checks"]["beat"]["detail"]
    assert body["checks"]["worker"]["status"] == "fail"


@pytest.mark.django_db(transaction=True)
def test_the_beat_check_passes_after_a_recent_sweep_and_fails_when_it_is_old(client, settings):
    record_sweep(task="movements.dispatch_ready")
    assert health(client)[1]["checks"]["beat"]["status"] == "ok"

    old = timezone.now() - timedelta(seconds=settings.QTG_HEALTH_MAX_SWEEP_AGE_SECONDS + 5)
    SweepHeartbeat.objects.update(last_run_at=old)
    beat = health(client)[1]["checks"]["beat"]
    assert beat["status"] == "fail" and "last sweep" in beat["detail"]


@pytest.mark.django_db(transaction=True)
def test_an_unreachable_broker_fails_health(client, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"

    status, body = health(client)

    assert status == 503
    assert body["checks"]["broker"]["status"] == "fail"


@pytest.mark.django_db
def test_a_periodic_task_that_finishes_stamps_its_heartbeat_and_others_do_not():
    tasks.reap_leases.apply()
    tasks.expire_approvals.apply()

    assert set(SweepHeartbeat.objects.values_list("task", flat=True)) == {
        "movements.reap_leases",
        "movements.expire_approvals",
    }


@pytest.mark.django_db(transaction=True)
def test_qtg_status_prints_the_checks_and_money_in_flight_and_fails_when_unhealthy(
    make_movement, capsys
):
    make_movement(approve=True, amount="1234.50")

    with pytest.raises(CommandError, match="unhealthy"):
        call_command("qtg_status")

    out = capsys.readouterr().out
    assert "health: FAIL" in out
    assert "database" in out and "worker" in out
    assert "USDC      1,234.5" in out
    assert "APPROVED 1" in out
