"""A second factor (django-otp, TOTP) for the operator console.

With ``QTG_OTP_REQUIRED`` on (production's default), a user holding a permission of
``MONEY_PERMISSIONS`` (it moves money or changes its rules) signs in with a one-time code and
cannot use the console without it, and mints API tokens only with one; others give a code if
they registered an authenticator. A superuser registers one for a user under "TOTP devices" in
the admin (it shows the QR code).
"""

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model, logout
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.db.models import Q
from django.shortcuts import redirect
from django.urls import reverse
from django_otp import devices_for_user
from django_otp.admin import OTPAdminAuthenticationForm

from qtg.core.compiled import Compiled

# Every permission that moves money or changes the rules money moves by, and why: the one table
# (issue 29). With QTG_OTP_REQUIRED on (production), a user holding any of them gives a one-time
# code to use the console and to mint an API token. tests/security/test_money_permissions.py
# checks every admin action and API endpoint against it and NOT_MONEY_PERMISSIONS.
MONEY_PERMISSIONS: dict[str, str] = {
    # movements
    "movements.approve_movement": "releases a movement to move its funds",
    "movements.resume_manual_gate": "lets a gated movement move its funds",
    "movements.resume_intervention": "sets a stopped movement moving again",
    "movements.retry_node": "sends a venue call (a withdrawal, a transfer) again",
    "movements.resolve_unknown_node": "says whether money moved (writes it off or counts it)",
    "movements.force_complete_movement": "declares funds arrived",
    "movements.force_fail_movement": "declares funds never moved and releases their hold",
    "movements.cancel_in_transit": "stops watching funds in transit",
    "movements.propose_override": "proposes a force, cancel in transit or write-off",
    "movements.confirm_override": "confirms a force, cancel in transit or write-off",
    "movements.propose_approvalpolicy": "proposes how many approvers money needs",
    "movements.decide_approvalpolicy": "activates how many approvers money needs",
    "movements.add_approvalpolicy": "writes approval policies",
    "movements.change_approvalpolicy": "writes approval policies",
    "movements.delete_approvalpolicy": "removes approval policies",
    "movements.propose_addressbookentry": "proposes a destination funds may be sent to",
    "movements.decide_addressbookentry": "approves or removes a destination",
    "movements.add_addressbookentry": "writes the address book",
    "movements.change_addressbookentry": "writes the address book",
    "movements.delete_addressbookentry": "removes address book entries",
    "movements.add_routetemplate": "writes the plans money follows",
    "movements.change_routetemplate": "writes the plans money follows",
    "movements.delete_routetemplate": "removes the plans money follows",
    # reservations
    "reservations.settle_reservation": "books held funds as spent or released",
    "reservations.add_hardcap": "sets how much may be in flight",
    "reservations.change_hardcap": "sets how much may be in flight",
    "reservations.delete_hardcap": "removes a limit on funds in flight",
    "reservations.add_clientlimit": "sets a client's share of the limits",
    "reservations.change_clientlimit": "sets a client's share of the limits",
    "reservations.delete_clientlimit": "removes a client's limit",
    # webhooks: where the news of money goes (and what a receiver trusts)
    "callbacks.add_subscription": "sends movement events to a new receiver",
    "callbacks.change_subscription": "redirects movement events or their signing secret",
    "callbacks.delete_subscription": "stops the news of money to a receiver",
    # who may do all of the above
    "auth.add_user": "creates users who may hold these permissions",
    "auth.change_user": "grants these permissions",
    "auth.add_group": "creates groups holding these permissions",
    "auth.change_group": "grants these permissions",
    "auth.add_permission": "defines permissions",
    "auth.change_permission": "redefines permissions",
    "otp_totp.add_totpdevice": "registers a second factor for a user",
    "otp_totp.change_totpdevice": "changes a user's second factor",
    "otp_totp.delete_totpdevice": "removes a user's second factor",
    "access.activate_apitoken": "makes a token minted for someone else usable",
    "access.add_apitoken": "mints API tokens",
    "authtoken.add_tokenproxy": "mints DRF's clear-text tokens (accepted where legacy is on)",
    "authtoken.change_tokenproxy": "reassigns DRF's clear-text tokens",
    "authtoken.add_token": "mints DRF's clear-text tokens",
    "authtoken.change_token": "reassigns DRF's clear-text tokens",
}
# Reviewed, and neither moves money nor changes its rules (reading, stopping, records).
NOT_MONEY_PERMISSIONS: dict[str, str] = {
    "movements.reject_movement": "refuses a movement before anything moved",
    "movements.cancel_movement": "stops a movement before funds are in transit",
    "movements.withdraw_movement": "takes back a movement waiting for approval (nothing moved)",
    "movements.handle_attention": "snoozes or closes an attention flag",
    "callbacks.redeliver_delivery": "sends an event again to the same receiver",
    "auth.delete_user": "removes a user (their records stay, PROTECT)",
    "auth.delete_group": "removes a group (fewer permissions)",
    "auth.delete_permission": "removes a permission",
    "access.change_apitoken": "nothing: tokens are never edited",
    "access.delete_apitoken": "nothing: tokens are revoked, never deleted",
    "authtoken.delete_tokenproxy": "deletes a clear-text token (it stops working)",
    "authtoken.delete_token": "deletes a clear-text token (it stops working)",
    "axes.delete_accessattempt": "clears a lockout",
    "axes.change_accessattempt": "edits a lockout record",
    "axes.change_accesslog": "edits a sign-in record",
    "axes.change_accessfailurelog": "edits a sign-in failure record",
    "axes.change_accessattemptexpiration": "edits a lockout expiry",
    "axes.delete_accesslog": "clears sign-in records",
    "axes.delete_accessfailurelog": "clears sign-in failure records",
    "axes.delete_accessattemptexpiration": "clears lockout expiries",
}


def money_permissions_of(user):
    """The money permissions ``user`` holds, their own or a group's (``user``: a pk, or an
    ``OuterRef`` to one for a query that asks it of the rows it reads)."""
    named = Q()
    for perm in MONEY_PERMISSIONS:
        app_label, codename = perm.split(".", 1)
        named |= Q(content_type__app_label=app_label, codename=codename)
    return Permission.objects.filter(named).filter(Q(user=user) | Q(group__user=user)).order_by()


# Every API write asks it of its token's user (``access.permissions``) unless the token's read
# brought the answer (``HOLDS_MONEY_PERMISSION``): one statement, where the model backend's
# has_perm reads all of the user's and their groups' permissions (two).
_MONEY_PERMISSION_HELD = Compiled(
    lambda *, user: money_permissions_of(user).values_list("pk", flat=True)[:1],
    user=lambda: get_user_model()._meta.pk,
)
# Set on a user by the read that brought it (``access.services.api_token_lookup``): whether
# they held a money permission then, for this request.
HOLDS_MONEY_PERMISSION = "_qtg_holds_money_permission"


def _holds_money_permission(user) -> bool:
    if user.is_superuser:
        return True  # the model backend grants an active superuser every permission
    known = getattr(user, HOLDS_MONEY_PERMISSION, None)
    if known is not None:
        return known
    if hasattr(user, "_perm_cache"):
        # Already read for this request (the console asks has_perm again and again).
        return any(user.has_perm(perm) for perm in MONEY_PERMISSIONS)
    return bool(list(_MONEY_PERMISSION_HELD(user=user.pk)))


def needs_second_factor(user) -> bool:
    """Whether ``user`` may use the console only after giving a one-time code, and mints API
    tokens only with one: they hold a permission of MONEY_PERMISSIONS (superusers hold all)."""
    return bool(
        settings.QTG_OTP_REQUIRED
        and user.is_authenticated
        and user.is_active
        and _holds_money_permission(user)
    )


def second_factor_verified(user, code: str) -> bool:
    """Whether ``code`` is a valid one-time code of one of ``user``'s confirmed devices now
    (each code is accepted once: django-otp's TOTP device refuses a replay)."""
    code = (code or "").strip()
    return bool(code) and any(
        device.verify_token(code) for device in devices_for_user(user, confirmed=True)
    )


class SecondFactorAuthenticationForm(OTPAdminAuthenticationForm):
    """The console's sign-in: password, then a one-time code for users who have an
    authenticator, and refused for users who need one and have none."""

    def _chosen_device(self, user):
        # One authenticator (the usual case): no need to pick it from a list first.
        device = super()._chosen_device(user)
        if device is None:
            devices = list(devices_for_user(user, confirmed=True))
            if len(devices) == 1:
                device = devices[0]
        return device

    def clean(self):
        self.cleaned_data = AdminAuthenticationForm.clean(self)
        user = self.get_user()
        if user is None:
            return self.cleaned_data
        if next(devices_for_user(user, confirmed=True), None) is not None:
            self.clean_otp(user)
        elif needs_second_factor(user):
            raise ValidationError(
                "This account needs a second factor: ask an administrator to register an "
                "authenticator for it.",
                code="second_factor_missing",
            )
        return self.cleaned_data


class SecondFactorMiddleware:
    """A console session of a user who needs a second factor and has not given one (signed
    in before it was required, or another way) ends at the sign-in page."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        if user is None or not request.path.startswith(reverse("admin:index")):
            return self.get_response(request)  # not the console (the API, health, metrics)
        login_url = reverse("admin:login")
        if request.path != login_url and needs_second_factor(user) and not user.is_verified():
            logout(request)
            return redirect(f"{login_url}?next={request.path}")
        return self.get_response(request)
