"""Admin building blocks shared by the apps."""

import functools
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import flatten_fieldsets
from django.core.exceptions import FieldDoesNotExist
from django.http import HttpRequest


@functools.cache
def _by_name(field: str):
    @admin.display(description=field.replace("_", " "))
    def show(obj) -> str:
        user = getattr(obj, field, None)
        return user.get_username() if user is not None else "-"

    show.__name__ = show.__qualname__ = f"{field}_name"
    return show


class PeopleByName:
    """Users in read-only fields are shown by name. The stock read-only field links to the
    user's admin page, which only those who administer users may open: a 403 for everyone
    else, on every page that names a creator, approver or proposer."""

    def _shown(self, field):
        if not isinstance(field, str):
            return field
        try:
            model_field = self.model._meta.get_field(field)
        except FieldDoesNotExist:
            return field
        related = getattr(model_field, "related_model", None)
        if (
            model_field.many_to_one
            and related is not None
            and (related._meta.label == settings.AUTH_USER_MODEL)
        ):
            return _by_name(field)
        return field

    def get_readonly_fields(self, request, obj=None):
        return [self._shown(f) for f in super().get_readonly_fields(request, obj)]

    def get_fieldsets(self, request, obj=None):
        readonly = set(super().get_readonly_fields(request, obj))
        if obj is not None and not self.has_change_permission(request, obj):
            # a page only to view: every field on it is read-only
            readonly |= set(flatten_fieldsets(super().get_fieldsets(request, obj)))
        return [
            (
                name,
                {
                    **options,
                    "fields": [self._shown(f) if f in readonly else f for f in options["fields"]],
                },
            )
            for name, options in super().get_fieldsets(request, obj)
        ]


class ReadOnlyModelAdmin(PeopleByName, admin.ModelAdmin):
    """A model whose rows change only through services (or never): no add, no change, no
    delete in the admin. Operators act on it through the admin's actions, which call services."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyInline(PeopleByName, admin.TabularInline):
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
