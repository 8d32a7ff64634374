"""Write a signed checkpoint of the evidence chain (file, log line, ``audit.checkpoint``)."""

from django.core.management.base import BaseCommand

from ops.audit import audit_checkpoint
from qtg.core.checkpoints import checkpoint_path


class Command(BaseCommand):
    help = "Write a signed audit checkpoint outside the database."

    def add_arguments(self, parser):
        parser.add_argument("--reason", default="manual")

    def handle(self, *args, reason="manual", **options):
        payload = audit_checkpoint(reason=reason)
        rows = sum(t["rows"] for t in payload["tables"].values())
        self.stdout.write(
            f"audit checkpoint {payload['seq']} written to {checkpoint_path()}: {rows} rows"
        )
