"""API tokens in the admin. Every staff user mints their own (with a one-time code when they
must use a second factor; only such a token decides); a superuser mints for someone else (never
deciding, recorded as such, and outside the embedded demo usable only once a second superuser
activates it) and revokes. The key is shown once; the record is read-only."""

from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone

from access.models import ApiToken, ApiTokenEvent
from access.one_time import secret_show_once
from access.second_factor import needs_second_factor, second_factor_verified
from access.services import SCOPES, api_token_activate, api_token_mint, api_token_revoke
from qtg.core.admin import PeopleByName, ReadOnlyModelAdmin


class MintForm(forms.ModelForm):
    user = forms.ModelChoiceField(queryset=get_user_model().objects.filter(is_active=True))
    days = forms.IntegerField(min_value=1, initial=90, help_text="Lifetime in days.")
    scopes = forms.MultipleChoiceField(
        choices=[(s, s) for s in SCOPES],
        initial=["read", "create"],
        widget=forms.CheckboxSelectMultiple,
        help_text="decide (approve, reject, cancel, resume) only on your own token.",
    )
    otp_token = forms.CharField(
        required=False,
        label="One-time code",
        help_text="Your authenticator's current code: required if you must use a second factor.",
    )

    class Meta:
        model = ApiToken
        fields = ("user", "name")

    def __init__(self, *args, minter=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.minter = minter
        if minter is not None and not minter.is_superuser:
            # Anyone else mints only their own tokens.
            self.fields["user"].queryset = get_user_model().objects.filter(pk=minter.pk)
            self.fields["user"].initial = minter.pk

    def clean(self):
        cleaned = super().clean()
        user = cleaned.get("user")
        self.second_factor_at = None
        code = cleaned.get("otp_token")
        if user is not None and self.minter is not None and user.pk == self.minter.pk and code:
            if not second_factor_verified(user, code):
                raise forms.ValidationError({"otp_token": "This code is wrong or was used."})
            self.second_factor_at = timezone.now()
        elif (
            user is not None
            and needs_second_factor(user)
            and user.pk == getattr(self.minter, "pk", None)
        ):
            raise forms.ValidationError({"otp_token": "Give your current one-time code."})
        return cleaned


@admin.register(ApiToken)
class ApiTokenAdmin(PeopleByName, admin.ModelAdmin):
    list_display = (
        "prefix",
        "user",
        "name",
        "scopes",
        "minted_for_other",
        "activated_at",
        "created_at",
        "expires_at",
        "revoked_at",
    )
    list_filter = ("revoked_at", "minted_for_other")
    search_fields = ("prefix", "user__username", "name")
    list_select_related = ("user",)
    actions = ["revoke", "activate"]

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        return queryset if request.user.is_superuser else queryset.filter(user=request.user)

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_staff

    def has_view_permission(self, request, obj=None):
        return request.user.is_active and request.user.is_staff

    def has_add_permission(self, request):
        return request.user.is_active and request.user.is_staff

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_form(self, request, obj=None, change=False, **kwargs):
        minter = request.user

        class MintFormOfMinter(MintForm):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, minter=minter, **kwargs)

        return MintFormOfMinter

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("user", "name", "days", "scopes", "otp_token")
        return super().get_fields(request, obj)

    def add_view(self, request, form_url="", extra_context=None):
        if request.method == "POST" and self.has_add_permission(request):
            form = self.get_form(request)(request.POST)
            if form.is_valid():
                try:
                    minted = api_token_mint(
                        user=form.cleaned_data["user"],
                        actor=request.user,
                        name=form.cleaned_data["name"],
                        lifetime=timedelta(days=form.cleaned_data["days"]),
                        scopes=form.cleaned_data["scopes"],
                        second_factor_at=form.second_factor_at,
                    )
                except ValueError as exc:
                    # Nothing minted: back to the form, saying why (never the model's own save).
                    self.message_user(request, str(exc), messages.ERROR)
                    return HttpResponseRedirect(request.get_full_path())
                else:
                    pending = minted.token.activated_at is None
                    return secret_show_once(
                        request,
                        title=f"API token for {minted.token.user}",
                        secret=minted.key,
                        note="Copy the key now: it is not shown again (only its digest is kept)."
                        + (
                            " It works once a second superuser activates it "
                            "(API tokens > select it > Activate)."
                            if pending
                            else ""
                        ),
                        back_url=reverse("admin:access_apitoken_changelist"),
                    )
        return super().add_view(request, form_url, extra_context)

    def get_changeform_initial_data(self, request):
        return {"user": request.user.pk}

    @admin.action(description="Revoke the selected tokens", permissions=["revoke"])
    def revoke(self, request, queryset):
        for token in queryset:
            api_token_revoke(token=token, actor=request.user)
        self.message_user(request, f"{queryset.count()} token(s) revoked.")

    def has_revoke_permission(self, request):
        return request.user.is_superuser

    @admin.action(
        description="Activate the selected tokens minted for someone else (second superuser)",
        permissions=["activate"],
    )
    def activate(self, request, queryset):
        done = 0
        for token in queryset:
            try:
                api_token_activate(token=token, actor=request.user)
            except ValueError as exc:
                self.message_user(request, f"{token}: {exc}", messages.ERROR)
            else:
                done += 1
        if done:
            self.message_user(request, f"{done} token(s) activated.")

    def has_activate_permission(self, request):
        return request.user.is_superuser


@admin.register(ApiTokenEvent)
class ApiTokenEventAdmin(ReadOnlyModelAdmin):
    list_display = ("created_at", "action", "token", "subject", "actor_label", "for_someone_else")
    list_filter = ("action", "for_someone_else")
    search_fields = ("subject__username", "actor_label", "token__prefix")
    list_select_related = ("token", "subject", "token__user")
