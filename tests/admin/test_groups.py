"""The operators and supervisors groups, created by setup_groups (idempotent)."""

from io import StringIO

from django.contrib.auth.models import Group
from django.core.management import call_command

from movements.permissions import OPERATORS, SUPERVISORS


def perms_of(name: str) -> set[str]:
    return {
        f"{app}.{codename}"
        for app, codename in Group.objects.get(name=name).permissions.values_list(
            "content_type__app_label", "codename"
        )
    }


OPERATOR_EXPECTED = {
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
    "movements.approve_movement",
    "movements.reject_movement",
    "movements.resume_manual_gate",
    "movements.cancel_movement",
}


def test_setup_groups_creates_operators_and_supervisors_with_their_permissions(db):
    call_command("setup_groups", stdout=StringIO())

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
    }


def test_setup_groups_run_twice_changes_nothing_and_repairs_drift(db):
    call_command("setup_groups", stdout=StringIO())
    first = {name: perms_of(name) for name in (OPERATORS, SUPERVISORS)}
    Group.objects.get(name=OPERATORS).permissions.clear()

    call_command("setup_groups", stdout=StringIO())

    assert Group.objects.filter(name__in=[OPERATORS, SUPERVISORS]).count() == 2
    assert {name: perms_of(name) for name in (OPERATORS, SUPERVISORS)} == first
