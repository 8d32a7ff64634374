"""Who may do what in the operator console: the roles, as groups.

- ``viewers`` read every page a movement shows or links to, and act on nothing;
- ``approvers`` also approve and reject (the sign-off, nothing that steers execution);
- ``operators`` also release manual gates and cancel (the day-to-day run);
- ``supervisors`` also take every way out of trouble (UNKNOWN nodes, MANUAL_INTERVENTION,
  attention, held reservations, dead webhooks), propose and confirm two-person overrides and
  decide the rules (approval policies, the address book), and read the venues' internals;
- ``security admins`` manage people: users, groups, second-factor devices, DRF's legacy
  tokens, sign-in lockouts and the API token record; they see no movement.

The custom permissions themselves are declared on ``MovementRequest.Meta.permissions`` and
which action needs which is said in ``movements.policies`` (the services enforce it). This
module only says which group holds which permission (by name: the other apps' permissions are
data here, never imports), so ``setup_groups``, ``qtg_prestart`` and the demo seed create the
same groups. Everything else a person is shown follows from these: Django lists a page only to
whoever holds one of its permissions.
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

VIEWERS = "viewers"
APPROVERS = "approvers"
OPERATORS = "operators"
SUPERVISORS = "supervisors"
SECURITY_ADMINS = "security admins"

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
    # Where the money went: the chain transactions and exchange withdrawals of the nodes.
    "venues.view_chaintransaction",
    "venues.view_chainledgerentry",
    "venues.view_cexwithdrawal",
)

APPROVER_ACTIONS = (Action.APPROVE, Action.REJECT)
OPERATOR_ACTIONS = (*APPROVER_ACTIONS, Action.RESUME_GATE, Action.CANCEL)

APPROVER_PERMISSIONS = (*VIEW_PERMISSIONS, *(PERMISSIONS[a] for a in APPROVER_ACTIONS))
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
    # The venues' internals a stuck movement is diagnosed by: each sender's nonce queue, each
    # exchange account's clock skew.
    "venues.view_noncecursor",
    "venues.view_cexclock",
)

# People, not money: no movement page, and none of the permissions that decide money (those
# a security admin could only grant, which is what administering users means; the second
# factor is required of them in production as of anyone holding auth.change_user).
SECURITY_ADMIN_PERMISSIONS = (
    "auth.view_user",
    "auth.add_user",
    "auth.change_user",
    "auth.view_group",
    "otp_totp.view_totpdevice",
    "otp_totp.add_totpdevice",
    "otp_totp.change_totpdevice",
    "otp_totp.delete_totpdevice",
    "access.view_apitokenevent",
    "authtoken.view_tokenproxy",
    "authtoken.delete_tokenproxy",
    "axes.view_accessattempt",
    "axes.delete_accessattempt",
    "axes.view_accessfailurelog",
    "axes.view_accesslog",
)

GROUP_PERMISSIONS: dict[str, tuple[str, ...]] = {
    VIEWERS: VIEW_PERMISSIONS,
    APPROVERS: APPROVER_PERMISSIONS,
    OPERATORS: OPERATOR_PERMISSIONS,
    SUPERVISORS: SUPERVISOR_PERMISSIONS,
    SECURITY_ADMINS: SECURITY_ADMIN_PERMISSIONS,
}
# The roles, in order of what they may do with money (the README's role table).
ROLES = tuple(GROUP_PERMISSIONS)


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
    """Create or update the role groups so each holds exactly its permissions (idempotent:
    running it again changes nothing; a permission added by hand to a role is taken away
    again, so make a group of your own for anything else)."""
    groups = {}
    for name, perms in GROUP_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.set(_permissions(perms))
        groups[name] = group
    return groups
