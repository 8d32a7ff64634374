"""Who may do what in the operator console: the operator and supervisor groups.

The custom permissions themselves are declared on ``MovementRequest.Meta.permissions`` and
which action needs which is said in ``movements.policies`` (the services enforce it). This
module only says which group holds which permission, so ``setup_groups`` and the demo seed
create the same groups.
"""

from django.contrib.auth.models import Group, Permission
from django.db import transaction

from movements.policies import (
    CANCEL_IN_TRANSIT_PERMISSION,
    CONFIRM_OVERRIDE_PERMISSION,
    DECIDE_ADDRESS_PERMISSION,
    DECIDE_POLICY_PERMISSION,
    PERMISSIONS,
    PROPOSE_ADDRESS_PERMISSION,
    PROPOSE_OVERRIDE_PERMISSION,
    PROPOSE_POLICY_PERMISSION,
    Action,
)

OPERATORS = "operators"
SUPERVISORS = "supervisors"

# Read access to everything the movement page shows or links to.
VIEW_PERMISSIONS = (
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
)

OPERATOR_ACTIONS = (Action.APPROVE, Action.REJECT, Action.RESUME_GATE, Action.CANCEL)

OPERATOR_PERMISSIONS = (*VIEW_PERMISSIONS, *(PERMISSIONS[a] for a in OPERATOR_ACTIONS))

SUPERVISOR_PERMISSIONS = (
    *OPERATOR_PERMISSIONS,
    # The ways out of trouble: UNKNOWN nodes and MANUAL_INTERVENTION.
    *(PERMISSIONS[a] for a in Action if a not in OPERATOR_ACTIONS),
    # Cancelling once funds are in transit stops watching them.
    CANCEL_IN_TRANSIT_PERMISSION,
    # Two-person overrides, and the rules of approval and of the address book: one
    # supervisor proposes, another confirms or decides.
    PROPOSE_OVERRIDE_PERMISSION,
    CONFIRM_OVERRIDE_PERMISSION,
    PROPOSE_POLICY_PERMISSION,
    DECIDE_POLICY_PERMISSION,
    PROPOSE_ADDRESS_PERMISSION,
    DECIDE_ADDRESS_PERMISSION,
    "callbacks.redeliver_delivery",
    "reservations.settle_reservation",
)

GROUP_PERMISSIONS: dict[str, tuple[str, ...]] = {
    OPERATORS: OPERATOR_PERMISSIONS,
    SUPERVISORS: SUPERVISOR_PERMISSIONS,
}


def _permissions(names: tuple[str, ...]) -> list[Permission]:
    wanted = {tuple(name.split(".", 1)) for name in names}
    found = {
        (p.content_type.app_label, p.codename): p
        for p in Permission.objects.select_related("content_type").filter(
            codename__in=[codename for _, codename in wanted]
        )
    }
    missing = sorted(f"{app}.{codename}" for app, codename in wanted - found.keys())
    if missing:
        raise LookupError(f"permissions missing (run migrate first): {', '.join(missing)}")
    return [found[key] for key in sorted(wanted)]


@transaction.atomic
def ensure_operator_groups() -> dict[str, Group]:
    """Create or update the operators and supervisors groups so each holds exactly its
    permissions (idempotent: running it again changes nothing)."""
    groups = {}
    for name, perms in GROUP_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.set(_permissions(perms))
        groups[name] = group
    return groups
