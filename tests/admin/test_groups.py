"""The operators and supervisors groups, created by setup_groups (idempotent)."""

from io import StringIO

from django.contrib.auth.models import Group, Permission
from django.core.management import call_command

from movements.permissions import NEIGHBOUR_PERMISSIONS, OPERATORS, SUPERVISORS


def perms_of(name: str, app_label: str = "movements") -> set[str]:
    return set(
        Group.objects.get(name=name)
        .permissions.filter(content_type__app_label=app_label)
        .values_list("codename", flat=True)
    )


def test_setup_groups_creates_operators_and_supervisors_with_their_permissions(db):
    call_command("setup_groups", stdout=StringIO())

    assert perms_of(OPERATORS) == {
        "view_movementrequest",
        "view_movementrequestnode",
        "view_movementevent",
        "view_routetemplate",
        "approve_movement",
        "reject_movement",
        "resume_manual_gate",
        "cancel_movement",
    }
    assert perms_of(SUPERVISORS) == perms_of(OPERATORS) | {
        "resolve_unknown_node",
        "resume_intervention",
        "retry_node",
        "force_complete_movement",
        "force_fail_movement",
    }


def test_setup_groups_run_twice_changes_nothing_and_repairs_drift(db):
    call_command("setup_groups", stdout=StringIO())
    first = {name: perms_of(name) for name in (OPERATORS, SUPERVISORS)}
    Group.objects.get(name=OPERATORS).permissions.clear()

    call_command("setup_groups", stdout=StringIO())

    assert Group.objects.filter(name__in=[OPERATORS, SUPERVISORS]).count() == 2
    assert {name: perms_of(name) for name in (OPERATORS, SUPERVISORS)} == first


def test_the_groups_may_also_see_reservations_and_deliveries_where_those_apps_define_them(db):
    call_command("setup_groups", stdout=StringIO())

    for name in (OPERATORS, SUPERVISORS):
        granted = {
            f"{p.content_type.app_label}.{p.codename}"
            for p in Group.objects.get(name=name)
            .permissions.exclude(content_type__app_label="movements")
            .select_related("content_type")
        }
        defined = {
            label
            for label in NEIGHBOUR_PERMISSIONS[name]
            if Permission.objects.filter(
                content_type__app_label=label.split(".")[0], codename=label.split(".")[1]
            ).exists()
        }
        assert granted == defined
