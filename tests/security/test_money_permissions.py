"""One table of the permissions that move money or change its rules (access/second_factor.py):
with the second factor required, each makes its holder give a one-time code for the console
and for an API token, and every admin action, admin page and API endpoint that changes
something is enabled only by permissions the table (or its reviewed complement) names."""

from dataclasses import dataclass

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.test import RequestFactory
from django.urls import get_resolver, reverse

from access.second_factor import MONEY_PERMISSIONS, NOT_MONEY_PERMISSIONS, needs_second_factor
from access.services import TokenRefused, api_token_mint
from movements.policies import (
    CANCEL_IN_TRANSIT_PERMISSION,
    CONFIRM_OVERRIDE_PERMISSION,
    DECIDE_ADDRESS_PERMISSION,
    DECIDE_POLICY_PERMISSION,
    PROPOSE_ADDRESS_PERMISSION,
    PROPOSE_OVERRIDE_PERMISSION,
    PROPOSE_POLICY_PERMISSION,
)
from movements.policies import PERMISSIONS as ACTION_PERMISSIONS

pytestmark = pytest.mark.django_db

CLASSIFIED = set(MONEY_PERMISSIONS) | set(NOT_MONEY_PERMISSIONS)


@dataclass
class OnePermission:
    """A staff user holding exactly one permission (what ModelAdmin asks of request.user)."""

    perm: str
    pk: int = -1
    is_active: bool = True
    is_staff: bool = True
    is_superuser: bool = False
    is_authenticated: bool = True

    def get_username(self) -> str:
        return f"holder of {self.perm}"

    def has_perm(self, perm, obj=None) -> bool:
        return perm == self.perm

    def has_perms(self, perms, obj=None) -> bool:
        return all(self.has_perm(p) for p in perms)

    def has_module_perms(self, app_label) -> bool:
        return self.perm.startswith(app_label + ".")


def every_permission() -> list[str]:
    return sorted(
        f"{p.content_type.app_label}.{p.codename}"
        for p in Permission.objects.select_related("content_type")
        if not p.codename.startswith("view_")
    )


def admin_grants() -> dict[str, set[str]]:
    """For every registered admin: which single permissions enable adding, changing,
    deleting, and each of its actions."""
    grants: dict[str, set[str]] = {}
    factory = RequestFactory()
    # "-" holds no permission: what every staff user may do (mint their own token) is not
    # granted by any permission.
    for perm in ["-", *every_permission()]:
        request = factory.post("/admin/")
        request.user = OnePermission(perm)
        for model, model_admin in admin.site._registry.items():
            label = f"{model._meta.app_label}.{model._meta.model_name}"
            enabled = [
                name
                for name, allowed in (
                    ("add", model_admin.has_add_permission(request)),
                    ("change", model_admin.has_change_permission(request)),
                    ("delete", model_admin.has_delete_permission(request)),
                )
                if allowed
            ]
            enabled += list(model_admin.get_actions(request))
            for what in enabled:
                grants.setdefault(f"{label}:{what}", set()).add(perm)
    return grants


def test_every_permission_that_enables_an_admin_action_or_edit_is_classified():
    unclassified = {
        grant: sorted(perms - CLASSIFIED)
        for grant, perms in admin_grants().items()
        if "-" not in perms and perms - CLASSIFIED
    }

    assert unclassified == {}


def test_every_operator_action_on_a_movement_is_classified():
    used = {
        *ACTION_PERMISSIONS.values(),
        CANCEL_IN_TRANSIT_PERMISSION,
        PROPOSE_OVERRIDE_PERMISSION,
        CONFIRM_OVERRIDE_PERMISSION,
        PROPOSE_POLICY_PERMISSION,
        DECIDE_POLICY_PERMISSION,
        PROPOSE_ADDRESS_PERMISSION,
        DECIDE_ADDRESS_PERMISSION,
    }

    assert used - CLASSIFIED == set()


def test_the_two_tables_name_real_permissions_and_never_the_same_one():
    existing = set(every_permission())

    assert set(MONEY_PERMISSIONS) & set(NOT_MONEY_PERMISSIONS) == set()
    assert CLASSIFIED - existing == set()


def api_routes() -> list[str]:
    names = []
    for pattern in get_resolver().url_patterns:
        if str(pattern.pattern).startswith("api/v1/"):
            names += [p.name for p in pattern.url_patterns if p.name]
    return names


def test_every_api_endpoint_that_writes_needs_a_token_scope_that_a_money_holder_proves():
    # every write of the API is create or decide (access/permissions.py); for a user holding a
    # money permission both need a token minted with a fresh one-time code (next tests)
    from callbacks.api import WebhookViewSet
    from movements.api.views import MovementViewSet

    assert set(MovementViewSet.token_scopes.values()) == {"decide"}
    assert {"approve", "reject", "cancel", "resume"} == set(MovementViewSet.token_scopes)
    assert not hasattr(WebhookViewSet, "token_scopes")  # its writes all need "create"
    assert {"movement-list", "movement-approve", "webhook-list"} <= set(api_routes())


@pytest.fixture
def second_factor_required(settings):
    settings.QTG_OTP_REQUIRED = True


def user_holding(perm: str):
    from django.contrib.auth.models import User

    app_label, codename = perm.split(".")
    user = User.objects.create_user(
        f"holder-{codename}", password="pw-holder-long-1", is_staff=True
    )
    user.user_permissions.add(
        Permission.objects.get(content_type__app_label=app_label, codename=codename)
    )
    return User.objects.get(pk=user.pk)


@pytest.mark.parametrize("perm", sorted(MONEY_PERMISSIONS))
def test_each_money_permission_needs_the_second_factor_in_the_console(
    second_factor_required, client, perm
):
    holder = user_holding(perm)
    client.force_login(holder)

    assert needs_second_factor(holder)
    response = client.get(reverse("admin:index"))
    assert response.status_code == 302
    assert reverse("admin:login") in response["Location"]


@pytest.mark.parametrize("perm", sorted(MONEY_PERMISSIONS))
def test_each_money_permission_needs_the_second_factor_to_mint_an_api_token(
    second_factor_required, perm
):
    holder = user_holding(perm)

    with pytest.raises(TokenRefused, match="one-time code"):
        api_token_mint(user=holder, actor=holder)


def test_a_permission_that_moves_no_money_needs_no_second_factor(second_factor_required, client):
    holder = user_holding("movements.reject_movement")
    client.force_login(holder)

    assert not needs_second_factor(holder)
    assert client.get(reverse("admin:index")).status_code == 200


def fresh_member_of(name: str, *perms: str, **fields):
    """A user who holds ``perms`` only through group ``name``, read again (nothing cached)."""
    from django.contrib.auth.models import Group, User

    group = Group.objects.create(name=name)
    for perm in perms:
        app_label, codename = perm.split(".")
        group.permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    user = User.objects.create_user(f"member-of-{name}", **fields)
    user.groups.add(group)
    return User.objects.get(pk=user.pk)


def test_a_money_permission_held_through_a_group_is_asked_in_one_statement(
    second_factor_required, django_assert_num_queries
):
    # Every API write asks it of its token's user: one statement, not the model backend's two.
    member = fresh_member_of("approvers", "movements.approve_movement")
    with django_assert_num_queries(1):
        assert needs_second_factor(member)
    other = fresh_member_of("rejecters", "movements.reject_movement", "axes.delete_accesslog")
    with django_assert_num_queries(1):
        assert not needs_second_factor(other)
    assert member.has_perm("movements.approve_movement")  # the same answer as the backend's
    assert not any(other.has_perm(perm) for perm in MONEY_PERMISSIONS)


def test_who_needs_a_second_factor_asks_nothing_more_of_the_database_than_it_must(
    second_factor_required, django_assert_num_queries, settings
):
    from django.contrib.auth.models import User

    superuser = User.objects.create_superuser("root-ish", "r@qtg.invalid", None)
    inactive = fresh_member_of("gone", "movements.approve_movement", is_active=False)
    console = fresh_member_of("console", "movements.retry_node")
    console.has_perm("movements.reject_movement")  # the console read this request's permissions
    with django_assert_num_queries(0):
        assert needs_second_factor(superuser)
        assert not needs_second_factor(inactive)
        assert needs_second_factor(console)
    settings.QTG_OTP_REQUIRED = False
    with django_assert_num_queries(0):
        assert not needs_second_factor(superuser)


def test_the_token_read_brings_whether_its_user_needs_a_second_factor(
    second_factor_required, django_assert_num_queries
):
    # Every API request reads its token: the same statement says whether its user holds a
    # money permission, so the permission check of a write asks nothing more.
    from django.utils import timezone

    from access.services import api_token_lookup

    member = fresh_member_of("approvers", "movements.approve_movement")
    other = fresh_member_of("rejecters", "movements.reject_movement")
    keys = {
        user: api_token_mint(user=user, actor=user, second_factor_at=timezone.now()).key
        for user in (member, other)
    }
    for user, expected in ((member, True), (other, False)):
        token = api_token_lookup(keys[user])
        with django_assert_num_queries(0):
            assert needs_second_factor(token.user) is expected
        assert needs_second_factor(type(user).objects.get(pk=user.pk)) is expected
