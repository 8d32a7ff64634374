"""The sandbox venues' records, read-only: what the simulated venues did, for demos and audits
of the tests' claim that nothing happened twice."""

from django.contrib import admin

from qtg.core.admin import ReadOnlyModelAdmin
from sandbox.models import Attestation, ChainTx, Deposit, LedgerEntry, Withdrawal


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyModelAdmin):
    list_display = ("created_at", "venue", "operation", "reference", "amount", "asset")
    list_filter = ("operation", "venue")
    search_fields = ("reference",)
    ordering = ("-id",)


@admin.register(Withdrawal)
class WithdrawalAdmin(ReadOnlyModelAdmin):
    list_display = ("withdrawal_id", "venue", "amount", "asset", "network", "status", "created_at")
    list_filter = ("status", "venue", "network")
    search_fields = ("withdrawal_id", "client_key", "tx_hash")


@admin.register(ChainTx)
class ChainTxAdmin(ReadOnlyModelAdmin):
    list_display = ("tx_hash", "chain", "kind", "amount", "asset", "included_height", "reorg_count")
    list_filter = ("chain", "kind")
    search_fields = ("tx_hash",)


@admin.register(Deposit)
class DepositAdmin(ReadOnlyModelAdmin):
    list_display = ("venue", "chain", "tx_hash", "amount", "asset", "credited_at")
    search_fields = ("tx_hash",)


@admin.register(Attestation)
class AttestationAdmin(ReadOnlyModelAdmin):
    list_display = ("burn_tx_hash", "used_by_mint", "created_at")
