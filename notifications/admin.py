"""Notifications in the console: *My notifications*, where every staff user chooses for each
kind whether to be told at once, in the digest or never (their own row only), and the outbox
of notifications, read-only, for whoever holds its view permission (superusers)."""

from django import forms
from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse

from notifications.models import PREFERENCE_KINDS, Mode, Notification, NotificationPreference
from notifications.services import preferences_of, preferences_set
from qtg.core.admin import ReadOnlyModelAdmin


class PreferencesForm(forms.Form):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for kind in PREFERENCE_KINDS:
            self.fields[kind.value] = forms.ChoiceField(
                label=kind.label, choices=Mode.choices, widget=forms.RadioSelect
            )


@admin.register(NotificationPreference)
class NotificationPreferenceAdmin(admin.ModelAdmin):
    """One page per person: their own preferences (no list, no add, no delete)."""

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_staff

    def has_view_permission(self, request, obj=None):
        return self.has_module_permission(request) and (obj is None or obj.user == request.user)

    def has_change_permission(self, request, obj=None):
        return self.has_view_permission(request, obj)

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_urls(self):
        from django.urls import path

        return [
            path(
                "",
                self.admin_site.admin_view(self.changelist_view),
                name="notifications_notificationpreference_changelist",
            )
        ]

    def changelist_view(self, request, extra_context=None):
        """GET: the person's choices; POST: save them (``preferences_set``)."""
        form = PreferencesForm(request.POST or None, initial=preferences_of(request.user))
        if request.method == "POST" and form.is_valid():
            preferences_set(user=request.user, modes=form.cleaned_data)
            self.message_user(request, "Your notification preferences are saved.", messages.SUCCESS)
            return HttpResponseRedirect(request.path)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "My notifications",
            "form": form,
            "email": request.user.email,
        }
        return TemplateResponse(request, "admin/notifications/preferences.html", context)


@admin.register(Notification)
class NotificationAdmin(ReadOnlyModelAdmin):
    list_display = ("created_at", "kind", "channel", "mode", "address", "subject", "status")
    list_filter = ("status", "kind", "channel", "mode")
    search_fields = ("address", "subject", "request__id")
    list_select_related = ("recipient",)
    readonly_fields = [field.name for field in Notification._meta.fields]
