"""No one-person path through API tokens (issue 29, item 3): a token minted for someone else
never decides and, outside the demo, works only once a second superuser activates it; a user
who must use a second factor mints their own tokens with a one-time code; tokens are scoped."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.urls import reverse
from django_otp.oath import totp
from django_otp.plugins.otp_totp.models import TOTPDevice
from rest_framework.test import APIClient

from access.models import ApiToken
from access.services import TokenRefused, api_token_activate, api_token_mint
from movements.states import RequestState
from tests.api.conftest import MOVEMENTS, movement_url, post_create
from tests.conftest import ALL_MOVEMENT_PERMS, make_user

pytestmark = pytest.mark.django_db


def api(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def code_of(device: TOTPDevice) -> str:
    return str(totp(device.bin_key, step=device.step, digits=device.digits)).zfill(device.digits)


def mint_in_admin(client, user, **fields):
    """POST the admin's mint form; the key from the one-time page (None if refused)."""
    body = {"user": user.pk, "name": "t", "days": 30, "scopes": ["read", "create"], **fields}
    response = client.post(reverse("admin:access_apitoken_add"), body)
    if response.status_code != 302 or "one-time-secret" not in response["Location"]:
        return None
    return client.get(response["Location"]).context["shown"]["secret"]


@pytest.fixture
def operator(db):
    return make_user("operator", *ALL_MOVEMENT_PERMS, is_staff=True)


def test_a_superuser_cannot_approve_their_own_movement_with_a_token_minted_for_an_operator(
    client, admin_user, operator
):
    # given a movement the superuser created
    created = post_create(api(api_token_mint(user=admin_user).key))
    assert created.status_code == 201, created.json()
    # when the superuser mints a token for the operator in the admin (asking for decide)
    client.force_login(admin_user)
    key = mint_in_admin(client, operator, scopes=["read", "create", "decide"])
    assert key is None  # a token for someone else cannot decide
    key = mint_in_admin(client, operator)
    # then approving with it is refused, and the movement still waits
    response = api(key).post(movement_url(created.json()["id"], "approve"), format="json")
    assert response.status_code == 403
    assert "minted for someone else" in response.json()["detail"]
    status = api(api_token_mint(user=admin_user).key).get(movement_url(created.json()["id"]))
    assert status.json()["request_state"] == RequestState.PENDING_APPROVAL
    token = ApiToken.objects.get(user=operator)
    assert token.minted_for_other and token.minted_by == admin_user
    assert "decide" not in token.scopes


def test_outside_the_demo_a_token_for_someone_else_works_only_after_a_second_superuser(
    settings, admin_user
):
    settings.QTG_TOKENS_FOR_OTHERS_ALONE = False
    bot = make_user("bot")
    minted = api_token_mint(user=bot, actor=admin_user)

    assert api(minted.key).get(MOVEMENTS).status_code == 401
    with pytest.raises(TokenRefused, match="second superuser"):
        api_token_activate(token=minted.token, actor=admin_user)

    second = User.objects.create_superuser("second", password="pw-second-superuser")
    api_token_activate(token=minted.token, actor=second)
    assert api(minted.key).get(MOVEMENTS).status_code == 200


def test_a_second_factor_user_cannot_get_a_token_minted_by_someone_else(settings, admin_user):
    settings.QTG_OTP_REQUIRED = True
    approver = make_user("approver", "approve_movement", is_staff=True)

    with pytest.raises(TokenRefused, match="must use a second factor"):
        api_token_mint(user=approver, actor=admin_user)


def test_a_second_factor_user_mints_from_the_command_line_only_with_their_code(settings):
    settings.QTG_OTP_REQUIRED = True
    settings.OTP_TOTP_THROTTLE_FACTOR = 0  # the wrong code below would otherwise slow the next
    approver = make_user("approver", "approve_movement", is_staff=True)
    device = TOTPDevice.objects.create(user=approver, name="phone", confirmed=True)

    with pytest.raises(CommandError, match="one-time code"):
        call_command("api_token_create", "approver")
    with pytest.raises(CommandError, match="wrong"):
        call_command(
            "api_token_create",
            "approver",
            "--otp",
            "000000" if code_of(device) != "000000" else "111111",
        )
    call_command("api_token_create", "approver", "--otp", code_of(device))

    token = ApiToken.objects.get(user=approver)
    assert token.second_factor_at is not None and "decide" in token.scopes


def test_a_second_factor_user_mints_their_own_deciding_token_with_a_fresh_code(
    client, settings, make_movement
):
    settings.QTG_OTP_REQUIRED = True
    approver = make_user("approver", *ALL_MOVEMENT_PERMS, is_staff=True)
    device = TOTPDevice.objects.create(user=approver, name="phone", confirmed=True)
    client.force_login(approver)
    session = client.session
    session["otp_device_id"] = device.persistent_id
    session.save()

    # without a code: refused; with the current code: a token that decides
    assert mint_in_admin(client, approver, scopes=["read", "decide"]) is None
    key = mint_in_admin(client, approver, scopes=["read", "decide"], otp_token=code_of(device))
    assert key is not None
    movement = make_movement()

    response = api(key).post(movement_url(movement.pk, "approve"), format="json")

    assert response.status_code == 200, response.json()


def test_a_token_without_the_scope_is_refused_what_it_does_not_cover(make_movement):
    user = make_user("integrator", *ALL_MOVEMENT_PERMS)
    reader = api(api_token_mint(user=user, scopes=["read"]).key)
    creator = api(api_token_mint(user=user, scopes=["read", "create"]).key)

    assert reader.get(MOVEMENTS).status_code == 200
    assert post_create(reader).status_code == 403
    movement = make_movement()
    assert creator.post(movement_url(movement.pk, "approve"), format="json").status_code == 403
    assert (
        creator.post(
            movement_url(movement.pk, "reject"), {"reason": "x"}, format="json"
        ).status_code
        == 403
    )


def test_the_second_superuser_who_activates_a_token_is_recorded_in_the_linked_trail(
    settings, admin_user
):
    from access.models import ApiTokenEvent
    from qtg.core.chain import link_problem

    settings.QTG_TOKENS_FOR_OTHERS_ALONE = False
    bot = make_user("bot")
    minted = api_token_mint(user=bot, actor=admin_user)
    second = User.objects.create_superuser("second", password="pw-second-superuser")

    api_token_activate(token=minted.token, actor=second)

    events = list(ApiTokenEvent.objects.filter(token=minted.token).order_by("pk"))
    assert [(e.action, e.actor, e.subject) for e in events] == [
        ("minted", admin_user, bot),
        ("activated", second, bot),
    ]
    assert all(link_problem(e) is None for e in events)
    assert events[1].chain_prev == events[0].chain_hash


def test_a_token_minted_without_a_second_factor_stops_deciding_once_its_user_needs_one(
    settings, make_movement
):
    from django.contrib.auth.models import Permission

    # given an integrator's own deciding token, minted while they held no money permission
    settings.QTG_OTP_REQUIRED = True
    user = make_user("integrator", "view_movementrequest")
    key = api_token_mint(user=user, actor=user, scopes=["read", "create", "decide"]).key
    # when they are given the permission to approve (so they must use a second factor)
    user.user_permissions.add(Permission.objects.get(codename="approve_movement"))
    movement = make_movement()

    response = api(key).post(movement_url(movement.pk, "approve"), format="json")

    # then the old token cannot approve: they mint a new one with their one-time code
    assert response.status_code == 403
    assert "second factor" in response.json()["detail"]
    assert api(key).get(MOVEMENTS).status_code == 200
    movement.refresh_from_db()
    assert movement.request_state == RequestState.PENDING_APPROVAL


def edit_below_the_application(sql: str, params=()) -> None:
    """The runtime role may UPDATE and INSERT tokens (it revokes and mints them)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql.format(table=ApiToken._meta.db_table), params)


def test_a_token_row_rewritten_below_the_application_to_decide_is_refused(
    admin_user, operator, make_movement
):
    # given a token a superuser minted for the operator (it never decides) ...
    minted = api_token_mint(user=operator, actor=admin_user)
    # ... made to look like the operator's own deciding token, in the database
    edit_below_the_application(
        "UPDATE {table} SET minted_for_other = %s, minted_by_id = NULL, scopes = %s WHERE id = %s",
        [False, '["read", "create", "decide"]', minted.token.pk],
    )
    movement = make_movement()

    response = api(minted.key).post(movement_url(movement.pk, "approve"), format="json")

    assert response.status_code == 401
    movement.refresh_from_db()
    assert movement.request_state == RequestState.PENDING_APPROVAL


def test_a_token_row_inserted_below_the_application_is_refused(operator):
    import secrets

    from django.utils import timezone

    from access.services import token_digest

    key = secrets.token_hex(20)
    now = timezone.now()
    edit_below_the_application(
        "INSERT INTO {table} (user_id, prefix, digest, name, created_at, expires_at, "
        "minted_for_other, scopes, activated_at) VALUES (%s, %s, %s, '', %s, %s, %s, %s, %s)",
        [
            operator.pk,
            key[:8],
            token_digest(key),
            now,
            now + timedelta(days=1),
            False,
            '["read", "create", "decide"]',
            now,
        ],
    )

    assert api(key).get(MOVEMENTS).status_code == 401


def test_a_second_factor_proof_written_into_a_token_row_below_the_application_is_refused(
    settings, make_movement
):
    from django.contrib.auth.models import Permission

    settings.QTG_OTP_REQUIRED = True
    user = make_user("integrator", "view_movementrequest")
    minted = api_token_mint(user=user, actor=user, scopes=["read", "create", "decide"])
    user.user_permissions.add(Permission.objects.get(codename="approve_movement"))
    edit_below_the_application(
        "UPDATE {table} SET second_factor_at = now() WHERE id = %s"
        if settings.DB_IS_POSTGRES
        else "UPDATE {table} SET second_factor_at = datetime('now') WHERE id = %s",
        [minted.token.pk],
    )

    response = api(minted.key).post(movement_url(make_movement().pk, "approve"), format="json")

    assert response.status_code == 401
