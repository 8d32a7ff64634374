"""Create the operator console's roles as groups: viewers, approvers, operators, supervisors,
security admins (idempotent; ``qtg_prestart`` runs it at every start)."""

from django.core.management.base import BaseCommand

from movements.permissions import GROUP_PERMISSIONS, ensure_operator_groups


class Command(BaseCommand):
    help = (
        "Create or update the role groups (viewers, approvers, operators, supervisors, "
        "security admins) so each holds exactly its permissions (movements/permissions.py)."
    )

    def handle(self, *args, **options):
        groups = ensure_operator_groups()
        for name, group in groups.items():
            self.stdout.write(
                f"{name}: {group.permissions.count()} permissions "
                f"({', '.join(p.split('.', 1)[1] for p in GROUP_PERMISSIONS[name])})"
            )
