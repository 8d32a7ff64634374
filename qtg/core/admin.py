"""Admin building blocks shared by the apps."""

from typing import Any

from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.http import HttpRequest


class ReadOnlyModelAdmin(admin.ModelAdmin):
    """A model whose rows change only through services (or never): no add, no change, no
    delete in the admin. Operators act on it through the admin's actions, which call services."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyInline(admin.TabularInline):
    """An audit inline: no add, no change, no delete; visible to whoever may view the parent
    (``view_permission``), so the whole history is seen with the row it explains."""

    view_permission = ""
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = False

    def has_view_permission(self, request, obj=None):
        return request.user.has_perm(self.view_permission)

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def bulk_confirmation_context(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    *,
    title: str,
    has_items: bool,
    dangerous: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """The context of ``admin/bulk_action_confirmation.html``: the selection is posted back
    unchanged with post=yes. ``extra`` adds the page's own rows (and may override the
    selection or the action name)."""
    return {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.model._meta,
        "title": title,
        "action": request.POST.get("action"),
        "action_checkbox_name": ACTION_CHECKBOX_NAME,
        "selected": request.POST.getlist(ACTION_CHECKBOX_NAME),
        "media": model_admin.media,
        "has_items": has_items,
        "dangerous": dangerous,
        **extra,
    }
