"""The exchange adapter's rows in the admin, read-only: each account's measured clock skew
(``CexClock``) and the withdrawal journal (``CexWithdrawal``), whose rows change only through
``venues.cex.journal``."""

from django.contrib import admin

from qtg.core.admin import ReadOnlyModelAdmin
from venues.cex.models import CexClock, CexWithdrawal


@admin.register(CexClock)
class CexClockAdmin(ReadOnlyModelAdmin):
    list_display = ("account", "exchange", "skew", "uncertainty_ms", "measured_at")
    ordering = ("account",)

    @admin.display(description="exchange clock minus ours")
    def skew(self, obj: CexClock) -> str:
        return f"{obj.skew_ms / 1000:+.3f} s"


@admin.register(CexWithdrawal)
class CexWithdrawalAdmin(ReadOnlyModelAdmin):
    list_display = (
        "client_id",
        "account",
        "coin",
        "network",
        "amount",
        "state",
        "withdrawal_id",
        "started_at",
        "sent_at",
        "valid_until",
    )
    list_filter = ("state", "exchange")
    search_fields = ("client_id", "withdrawal_id", "request_id")
    ordering = ("-started_at",)
