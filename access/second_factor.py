"""A second factor (django-otp, TOTP) for the operator console.

With ``QTG_OTP_REQUIRED`` on (production's default), a staff user holding a permission that
moves or writes off money (approve, resolve, force) signs in with a one-time code and cannot
use the console without it; others give a code if they registered an authenticator. A
superuser registers one for a user under "TOTP devices" in the admin (it shows the QR code).
"""

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import logout
from django.core.exceptions import ValidationError
from django.shortcuts import redirect
from django.urls import reverse
from django_otp import devices_for_user
from django_otp.admin import OTPAdminAuthenticationForm

SENSITIVE_PERMISSIONS = (
    "movements.approve_movement",
    "movements.resolve_unknown_node",
    "movements.force_complete_movement",
    "movements.force_fail_movement",
)


def needs_second_factor(user) -> bool:
    """Whether ``user`` may use the console only after giving a one-time code."""
    return bool(
        settings.QTG_OTP_REQUIRED
        and user.is_authenticated
        and user.is_staff
        and any(user.has_perm(perm) for perm in SENSITIVE_PERMISSIONS)
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
        login_url = reverse("admin:login")
        if (
            user is not None
            and request.path.startswith(reverse("admin:index"))
            and request.path != login_url
            and needs_second_factor(user)
            and not user.is_verified()
        ):
            logout(request)
            return redirect(f"{login_url}?next={request.path}")
        return self.get_response(request)
