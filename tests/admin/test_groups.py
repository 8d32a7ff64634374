"""The console's roles as groups, created by setup_groups (idempotent) and at every start."""

from io import StringIO

from django.contrib.auth.models import Group
from django.core.management import call_command

from movements.permissions import (
    APPROVERS,
    OPERATORS,
    ROLES,
    SECURITY_ADMINS,
    SUPERVISORS,
    VIEWERS,
)


def perms_of(name: str) -> set[str]:
    return {
        f"{app}.{codename}"
        for app, codename in Group.objects.get(name=name).permissions.values_list(
            "content_type__app_label", "codename"
        )
    }


VIEWER_EXPECTED = {
    "movements.view_movementrequest",
    "movements.view_movementrequestnode",
    "movements.view_movementevent",
    "movements.view_routetemplate",
    "reservations.view_reservation",
    "reservations.view_hardcap",
    "callbacks.view_delivery",
    "callbacks.view_subscription",
    "movements.view_movementapproval",
    "movements.view_approvalpolicy",
    "movements.view_addressbookentry",
    "movements.view_overrideproposal",
    "venues.view_chaintransaction",
    "venues.view_chainledgerentry",
    "venues.view_cexwithdrawal",
}
APPROVER_EXPECTED = VIEWER_EXPECTED | {"movements.approve_movement", "movements.reject_movement"}
OPERATOR_EXPECTED = APPROVER_EXPECTED | {
    "movements.resume_manual_gate",
    "movements.cancel_movement",
}


def test_setup_groups_creates_every_role_with_its_permissions(db):
    call_command("setup_groups", stdout=StringIO())

    assert ROLES == (VIEWERS, APPROVERS, OPERATORS, SUPERVISORS, SECURITY_ADMINS)
    assert perms_of(VIEWERS) == VIEWER_EXPECTED
    assert perms_of(APPROVERS) == APPROVER_EXPECTED
    assert perms_of(OPERATORS) == OPERATOR_EXPECTED
    assert perms_of(SUPERVISORS) == OPERATOR_EXPECTED | {
        "movements.resolve_unknown_node",
        "movements.resume_intervention",
        "movements.retry_node",
        "movements.force_complete_movement",
        "movements.force_fail_movement",
        "movements.handle_attention",
        "movements.cancel_in_transit",
        "movements.propose_override",
        "movements.confirm_override",
        "movements.propose_approvalpolicy",
        "movements.decide_approvalpolicy",
        "movements.propose_addressbookentry",
        "movements.decide_addressbookentry",
        "callbacks.redeliver_delivery",
        "reservations.settle_reservation",
        "movements.withdraw_movement",  # take back someone else's movement awaiting approval
        "venues.view_noncecursor",
        "venues.view_cexclock",
    }
    # people, not money: nothing of a movement
    assert {
        p for p in perms_of(SECURITY_ADMINS) if p.split(".")[0] in ("movements", "venues")
    } == set()
    assert {"auth.change_user", "otp_totp.add_totpdevice", "axes.delete_accessattempt"} <= (
        perms_of(SECURITY_ADMINS)
    )


def test_setup_groups_run_twice_changes_nothing_and_repairs_drift(db):
    call_command("setup_groups", stdout=StringIO())
    first = {name: perms_of(name) for name in ROLES}
    Group.objects.get(name=OPERATORS).permissions.clear()

    call_command("setup_groups", stdout=StringIO())

    assert Group.objects.filter(name__in=ROLES).count() == len(ROLES)
    assert {name: perms_of(name) for name in ROLES} == first


def test_the_start_brings_the_roles_up_to_date(db, settings, tmp_path, monkeypatch):
    # given a deployment whose viewers group lost a permission by hand
    call_command("setup_groups", stdout=StringIO())
    Group.objects.get(name=VIEWERS).permissions.clear()
    settings.QTG_AUDIT_CHECKPOINT_FILE = str(tmp_path / "cp.jsonl")
    settings.STATIC_ROOT = str(tmp_path / "static")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path / "metrics"))

    # when it starts (the same step for make run and production)
    call_command("qtg_prestart", stdout=StringIO(), stderr=StringIO())

    # then every role holds its permissions again
    assert perms_of(VIEWERS) == VIEWER_EXPECTED
