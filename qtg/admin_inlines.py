"""Admin building blocks shared by the apps."""

from django.contrib import admin


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
