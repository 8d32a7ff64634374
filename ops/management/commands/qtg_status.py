"""``manage.py qtg_status``: what ``/health/ready`` checks (the same checks, the same budget),
and the money in flight per asset."""

from django.core.management.base import BaseCommand, CommandError

from ops.health import report, run_checks
from ops.status import MONEY_COLUMNS, snapshot
from qtg.core import money


class Command(BaseCommand):
    help = (
        "Readiness (database, broker, beat, workers, venues) and money in flight; "
        "exit 1 if unhealthy."
    )

    def handle(self, *args, **options):
        health = report(run_checks())
        self.stdout.write(f"health: {health['status'].upper()}")
        for name, check in health["checks"].items():
            style = self.style.SUCCESS if check["status"] == "ok" else self.style.ERROR
            self.stdout.write(f"  {name:<9} {style(check['detail'])}")
        for weakened in health["weakened"]:
            self.stdout.write(
                self.style.WARNING(f"  weakened: {weakened['variable']} ({weakened['cost']})")
            )
        if health["checks"]["database"]["status"] == "ok":
            self._numbers()
        if health["status"] == "fail":
            raise CommandError("unhealthy")

    def _numbers(self) -> None:
        now = snapshot()
        self.stdout.write("money in flight (HELD reservations):")
        for asset, total in now.in_flight_by_asset.items():
            self.stdout.write(f"  {asset:<9} {money.format_amount(total, grouping=True)}")
        if not now.in_flight_by_asset:
            self.stdout.write("  none")
        else:
            # Money awaiting approval has not left anywhere: say where each part is.
            self.stdout.write("  of which:")
            for (asset, place), total in sorted(now.held_by_asset_and_place.items()):
                label = dict(MONEY_COLUMNS)[place]
                amount = money.format_amount(total, grouping=True)
                self.stdout.write(f"    {asset:<7} {amount:>16}  {label}")
        busy = {state: n for state, n in now.movements_by_state.items() if n}
        self.stdout.write(
            "movements: " + (", ".join(f"{s} {n}" for s, n in busy.items()) or "none")
        )
        self.stdout.write(
            f"nodes UNKNOWN: {now.nodes_unknown}; needing attention: "
            f"{now.movements_needing_attention}; oldest due node: {now.oldest_due_seconds:.0f}s; "
            f"DEAD webhook deliveries: {now.dead_deliveries}"
        )
