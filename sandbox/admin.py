"""The sandbox venues' records, read-only: what the simulated venues did, for demos and audits
of the tests' claim that nothing happened twice."""

from django.contrib import admin

from sandbox.models import Attestation, ChainTx, Deposit, LedgerEntry, Withdrawal


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "venue", "operation", "reference", "amount", "asset")
    list_filter = ("operation", "venue")
    search_fields = ("reference",)
    ordering = ("-id",)


@admin.register(Withdrawal)
class WithdrawalAdmin(ReadOnlyAdmin):
    list_display = ("withdrawal_id", "venue", "amount", "asset", "network", "status", "created_at")
    list_filter = ("status", "venue", "network")
    search_fields = ("withdrawal_id", "client_key", "tx_hash")


@admin.register(ChainTx)
class ChainTxAdmin(ReadOnlyAdmin):
    list_display = ("tx_hash", "chain", "kind", "amount", "asset", "included_height", "reorg_count")
    list_filter = ("chain", "kind")
    search_fields = ("tx_hash",)


@admin.register(Deposit)
class DepositAdmin(ReadOnlyAdmin):
    list_display = ("venue", "chain", "tx_hash", "amount", "asset", "credited_at")
    search_fields = ("tx_hash",)


@admin.register(Attestation)
class AttestationAdmin(ReadOnlyAdmin):
    list_display = ("burn_tx_hash", "used_by_mint", "created_at")
