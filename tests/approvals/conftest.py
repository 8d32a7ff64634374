"""Fixtures for approval policies, the address book and two-person overrides."""

from decimal import Decimal

import pytest
from django.contrib.auth.models import Group, User

from movements.services.approvals import approval_policy_activate, approval_policy_propose
from qtg.core.actors import Actor
from tests.conftest import ALL_MOVEMENT_PERMS, make_user

CONTROL_PERMS = [
    *ALL_MOVEMENT_PERMS,
    "propose_override",
    "confirm_override",
    "propose_approvalpolicy",
    "decide_approvalpolicy",
    "propose_addressbookentry",
    "decide_addressbookentry",
]


def staff(username: str, *groups: str) -> User:
    """A user holding every movement permission, in ``groups``."""
    user = make_user(username, *CONTROL_PERMS)
    for name in groups:
        user.groups.add(Group.objects.get_or_create(name=name)[0])
    return User.objects.get(pk=user.pk)


def act(user: User) -> Actor:
    return Actor.for_user(user)


@pytest.fixture
def alice(db):
    return staff("alice", "operators")


@pytest.fixture
def bob(db):
    return staff("bob", "operators")


@pytest.fixture
def carol(db):
    return staff("carol", "supervisors")


@pytest.fixture
def dave(db):
    return staff("dave", "supervisors")


@pytest.fixture
def policy(alice, carol):
    """Make an approval policy active the only way there is: proposed, then activated by a
    second person."""

    def _policy(approvals_required=2, required_groups=(), amount_above="10000", **fields):
        proposed = approval_policy_propose(
            actor=act(alice),
            key=fields.pop("key", "large"),
            approvals_required=approvals_required,
            required_groups=list(required_groups),
            amount_above=Decimal(amount_above) if amount_above is not None else None,
            **fields,
        )
        return approval_policy_activate(policy=proposed, actor=act(carol))

    return _policy
