"""API tokens in the admin: superusers mint (the key is shown once, and minting for someone
else is recorded as such) and revoke; the record of both is read-only."""

from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.http import HttpResponseRedirect
from django.urls import reverse

from access.models import ApiToken, ApiTokenEvent
from access.services import api_token_mint, api_token_revoke
from qtg.core.admin import ReadOnlyModelAdmin


class MintForm(forms.ModelForm):
    user = forms.ModelChoiceField(queryset=get_user_model().objects.filter(is_active=True))
    days = forms.IntegerField(min_value=1, initial=90, help_text="Lifetime in days.")

    class Meta:
        model = ApiToken
        fields = ("user", "name")


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "user", "name", "created_at", "expires_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("prefix", "user__username", "name")
    list_select_related = ("user",)
    actions = ["revoke"]

    def has_add_permission(self, request):
        return request.user.is_superuser

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_form(self, request, obj=None, change=False, **kwargs):
        return MintForm

    def get_fields(self, request, obj=None):
        return ("user", "name", "days") if obj is None else super().get_fields(request, obj)

    def add_view(self, request, form_url="", extra_context=None):
        if request.method == "POST" and self.has_add_permission(request):
            form = MintForm(request.POST)
            if form.is_valid():
                try:
                    minted = api_token_mint(
                        user=form.cleaned_data["user"],
                        actor=request.user,
                        name=form.cleaned_data["name"],
                        lifetime=timedelta(days=form.cleaned_data["days"]),
                    )
                except ValueError as exc:
                    self.message_user(request, str(exc), messages.ERROR)
                else:
                    self.message_user(
                        request,
                        f"Token for {minted.token.user}: {minted.key} — copy it now, it is "
                        f"not shown again.",
                        messages.SUCCESS,
                    )
                    return HttpResponseRedirect(reverse("admin:access_apitoken_changelist"))
        return super().add_view(request, form_url, extra_context)

    @admin.action(description="Revoke the selected tokens", permissions=["revoke"])
    def revoke(self, request, queryset):
        for token in queryset:
            api_token_revoke(token=token, actor=request.user)
        self.message_user(request, f"{queryset.count()} token(s) revoked.")

    def has_revoke_permission(self, request):
        return request.user.is_superuser


@admin.register(ApiTokenEvent)
class ApiTokenEventAdmin(ReadOnlyModelAdmin):
    list_display = ("created_at", "action", "token", "subject", "actor_label", "for_someone_else")
    list_filter = ("action", "for_someone_else")
    search_fields = ("subject__username", "actor_label", "token__prefix")
    list_select_related = ("token", "subject", "token__user")
