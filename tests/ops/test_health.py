"""/health/live, /health/ready (= /health/) and qtg_status: database, broker, scheduler lease and
sweeps, workers per queue, configured venues; JSON; 503 on failure; bounded in time."""

import re
import socket
import threading
import time
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from movements import tasks
from ops.heartbeats import record_sweep, record_worker
from ops.models import SweepHeartbeat, WorkerHeartbeat
from qtg import leader


@pytest.fixture(autouse=True)
def every_stamp(settings):
    settings.QTG_HEARTBEAT_WRITE_SECONDS = 0


def health(client, path="/health/") -> tuple[int, dict]:
    response = client.get(path, HTTP_ACCEPT="text/html")
    assert response["Content-Type"] == "application/json"
    return response.status_code, response.json()


def everything_up(settings):
    record_sweep(task="movements.dispatch_ready")
    record_worker(hostname="w1@test", queues=settings.QTG_CELERY_QUEUES)
    assert leader.hold("beat", "beat-a", ttl=60)


@pytest.fixture
def silent_server():
    """A TCP port that accepts connections and never answers (a hung dependency)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    server.close()


@pytest.mark.django_db(transaction=True)
def test_health_is_json_and_503_naming_each_failing_check(client):
    # given no worker runs and no sweep ever finished
    status, body = health(client)

    assert status == 503
    assert body["status"] == "fail"
    assert set(body["checks"]) == {"database", "broker", "beat", "worker", "venues"}
    assert body["checks"]["database"]["status"] == "ok"
    assert body["checks"]["broker"]["status"] == "ok"
    assert body["checks"]["beat"]["status"] == "fail"
    assert "no periodic sweep" in body["checks"]["beat"]["detail"]
    assert body["checks"]["worker"]["status"] == "fail"


@pytest.mark.django_db(transaction=True)
def test_ready_is_200_when_everything_is_up(client, settings):
    everything_up(settings)

    status, body = health(client, "/health/ready")

    assert (status, body["status"]) == (200, "ok"), body
    assert "led by beat-a" in body["checks"]["beat"]["detail"]
    assert body["checks"]["worker"]["detail"].endswith("1 worker(s)")


@pytest.mark.django_db(transaction=True)
def test_live_answers_at_once_whatever_the_dependencies(client, settings, silent_server):
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{silent_server}/0"
    started = time.monotonic()

    status, body = health(client, "/health/live")

    assert (status, body) == (200, {"status": "ok"})
    assert time.monotonic() - started < 0.5


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("down", ["hanging", "refusing"])
def test_ready_answers_503_within_its_budget_with_the_broker_down(
    client, settings, silent_server, down
):
    everything_up(settings)
    port = silent_server if down == "hanging" else 1
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{port}/0"
    started = time.monotonic()

    status, body = health(client, "/health/ready")

    elapsed = time.monotonic() - started
    assert status == 503
    assert body["checks"]["broker"]["status"] == "fail"
    assert body["checks"]["database"]["status"] == "ok"
    assert elapsed < settings.QTG_HEALTH_BUDGET_SECONDS + 0.5, elapsed


@pytest.mark.django_db(transaction=True)
def test_the_worker_check_counts_live_workers_of_the_queue(client, settings):
    everything_up(settings)
    WorkerHeartbeat.objects.update(
        last_seen_at=timezone.now()
        - timedelta(seconds=settings.QTG_HEALTH_MAX_WORKER_AGE_SECONDS + 1)
    )
    worker = health(client)[1]["checks"]["worker"]
    assert worker["status"] == "fail"
    assert settings.CELERY_TASK_DEFAULT_QUEUE in worker["detail"]

    record_worker(hostname="w2@test", queues=["another-queue"])
    assert health(client)[1]["checks"]["worker"]["status"] == "fail"
    record_worker(hostname="w3@test", queues=[*settings.QTG_CELERY_QUEUES, "x"])
    assert health(client)[1]["checks"]["worker"]["status"] == "ok"


@pytest.mark.django_db(transaction=True)
def test_the_worker_check_fails_naming_a_queue_of_one_concern_nobody_serves(client, settings):
    # given workers for the sweeps and the webhooks but none for the venue calls
    everything_up(settings)
    WorkerHeartbeat.objects.all().delete()
    venues = f"{settings.CELERY_TASK_DEFAULT_QUEUE}.venues"
    record_worker(hostname="w1@test", queues=[q for q in settings.QTG_CELERY_QUEUES if q != venues])

    worker = health(client)[1]["checks"]["worker"]

    assert worker["status"] == "fail"
    assert venues in worker["detail"]


@pytest.mark.django_db(transaction=True)
def test_the_beat_check_fails_when_no_beat_holds_the_scheduler_lease(client, settings):
    everything_up(settings)
    leader.release("beat", "beat-a")

    beat = health(client)[1]["checks"]["beat"]

    assert beat["status"] == "fail" and "scheduler lease" in beat["detail"]


@pytest.mark.django_db(transaction=True)
def test_ready_fails_when_a_configured_venue_has_no_endpoint_or_credentials(
    client, settings, tmp_path, monkeypatch
):
    everything_up(settings)
    chains = tmp_path / "chains.yaml"
    chains.write_text(
        "version: 1\nchains:\n  ethereum:\n    kind: evm\n    chain_id: 1\n"
        "    rpc_url_env: QTG_TEST_ETH_RPC_URL\n    accounts:\n      treasury:\n"
        "        address: '0x0000000000000000000000000000000000000001'\n"
        "        key: {env: QTG_TEST_TREASURY_KEY}\n"
    )
    exchanges = tmp_path / "exchanges.yaml"
    exchanges.write_text(
        "version: 1\nexchanges:\n  binance-main:\n    kind: binance\n    accounts:\n"
        "      treasury-binance:\n        api_key: {env: QTG_TEST_BINANCE_KEY}\n"
        "        secret: {file: /nonexistent/binance-secret}\n"
    )
    settings.QTG_VENUES = "live"
    settings.QTG_CHAINS_CONFIG = str(chains)
    settings.QTG_EXCHANGES_CONFIG = str(exchanges)
    for name in ("QTG_TEST_ETH_RPC_URL", "QTG_TEST_TREASURY_KEY", "QTG_TEST_BINANCE_KEY"):
        monkeypatch.delenv(name, raising=False)

    status, body = health(client, "/health/ready")

    assert status == 503
    detail = body["checks"]["venues"]["detail"]
    assert "chain ethereum: QTG_TEST_ETH_RPC_URL is empty" in detail
    assert "account treasury: environment variable QTG_TEST_TREASURY_KEY is empty" in detail
    assert "api_key: environment variable QTG_TEST_BINANCE_KEY is empty" in detail
    assert "secret: cannot read /nonexistent/binance-secret" in detail

    # with everything provided, the chain's head is asked (here: nothing listens there)
    monkeypatch.setenv("QTG_TEST_ETH_RPC_URL", "http://127.0.0.1:1/")
    monkeypatch.setenv("QTG_TEST_TREASURY_KEY", "0x" + "11" * 32)
    monkeypatch.setenv("QTG_TEST_BINANCE_KEY", "k")
    secret = tmp_path / "secret"
    secret.write_text("s")
    exchanges.write_text(exchanges.read_text().replace("/nonexistent/binance-secret", str(secret)))
    venues = health(client, "/health/ready")[1]["checks"]["venues"]
    assert venues["status"] == "fail"
    assert venues["detail"].startswith("chain ethereum: RPC unreachable")


@pytest.mark.django_db(transaction=True)
def test_the_beat_check_passes_after_a_recent_sweep_and_fails_when_it_is_old(client, settings):
    everything_up(settings)
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
    make_movement(amount="10.00")  # awaiting approval: reserved, nothing has left

    with pytest.raises(CommandError, match="unhealthy"):
        call_command("qtg_status")

    out = capsys.readouterr().out
    assert "health: FAIL" in out
    assert "database" in out and "worker" in out and "no live worker consumes" in out
    assert "USDC      1,244.5" in out
    # and where it is: the approved one has not left yet, the other awaits approval
    assert re.search(r"USDC\s+1,234.5  Reserved, running, nothing left yet", out)
    assert re.search(r"USDC\s+10  Reserved, awaiting approval", out)
    assert "APPROVED 1" in out
