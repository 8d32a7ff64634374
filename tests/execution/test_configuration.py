"""The reviewed finality policy, the sandbox fault names, the pinned task names and the demo
seed."""

import pytest
from django.core.management import call_command

from qtg.celery import app
from sandbox.faults import Fault, UnknownFault, parse_fault
from sandbox.finality import FinalityConfigError, finality_policy, parse_finality


def test_the_shipped_finality_file_gives_every_template_network_a_policy():
    policy = finality_policy()

    assert {"ethereum", "arbitrum"} <= set(policy)
    assert all(p.confirmations >= 1 and p.block_seconds > 0 for p in policy.values())


@pytest.mark.parametrize(
    "raw",
    [
        {"version": 1, "chains": {}},
        {"version": 2, "chains": {"ethereum": {"confirmations": 12, "block_seconds": 1}}},
        {"version": 1, "chains": {"ethereum": {"confirmations": 0, "block_seconds": 1}}},
        {"version": 1, "chains": {"ethereum": {"confirmations": "12", "block_seconds": 1}}},
        {"version": 1, "chains": {"ethereum": {"confirmations": 12}}},
        {"version": 1, "chains": {"Ethereum": {"confirmations": 12, "block_seconds": 1}}},
        {"version": 1, "chains": {"ethereum": {"confirmations": 12, "block_seconds": -1}}},
        {"chains": {}},
    ],
)
def test_a_malformed_finality_policy_is_refused(raw):
    with pytest.raises(FinalityConfigError):
        parse_finality(raw)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", Fault()),
        ("fail", Fault("fail")),
        ("submit_timeout_landed", Fault("submit_timeout_landed")),
        ("submit_timeout_lost", Fault("submit_timeout_lost")),
        ("observe_fail", Fault("observe_fail")),
        ("reorg", Fault("reorg")),
        ("delay:2.5", Fault("delay", 2.5)),
    ],
)
def test_the_sandbox_fault_names_parse(raw, expected):
    assert parse_fault(raw) == expected


@pytest.mark.parametrize("raw", ["explode", "delay", "delay:soon", "delay:-1", "fail:now"])
def test_an_unknown_or_malformed_fault_is_refused(raw):
    with pytest.raises(UnknownFault):
        parse_fault(raw)


def test_the_periodic_task_names_are_pinned():
    app.loader.import_default_modules()
    for name in (
        "movements.dispatch_ready",
        "movements.observe_submitted",
        "movements.recover_unknown",
        "movements.reap_leases",
        "movements.expire_approvals",
        "movements.detect_stuck",
    ):
        assert name in app.tasks, name


def test_every_beat_entry_names_a_movements_task_that_exists(settings):
    app.loader.import_default_modules()
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        if entry["task"].startswith("movements."):
            assert entry["task"] in app.tasks


@pytest.mark.django_db
def test_seeding_the_demo_twice_creates_users_and_movements_once(capsys):
    from django.contrib.auth.models import User

    from movements.models import MovementRequest

    call_command("seed_demo")
    first = capsys.readouterr().out
    call_command("seed_demo")
    second = capsys.readouterr().out

    assert set(User.objects.values_list("username", flat=True)) >= {
        "admin",
        "operator",
        "supervisor",
    }
    assert MovementRequest.objects.count() == 10
    assert MovementRequest.objects.filter(request_state="APPROVED").count() == 9
    assert "password" in first and "(unchanged" in second
    operator = User.objects.get(username="operator")
    assert operator.has_perm("movements.approve_movement")


@pytest.mark.django_db
def test_the_sandbox_ledger_is_visible_but_read_only_in_the_admin(client, make_movement):
    from django.contrib.auth.models import User

    from tests.execution.conftest import settle

    settle(make_movement(approve=True))
    admin = User.objects.create_superuser("root", "root@qtg.invalid", "pw")
    client.force_login(admin)

    listing = client.get("/admin/sandbox/ledgerentry/")
    adding = client.get("/admin/sandbox/ledgerentry/add/")

    assert listing.status_code == 200
    assert b"withdraw" in listing.content
    assert adding.status_code == 403
