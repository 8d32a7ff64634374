"""Chain transactions in the admin: read-only, with their audit trail; a movement's page lists
the transactions its nodes made, with their states."""

from importlib import import_module

from django.contrib import admin
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from movements.public import add_movement_page_inline
from qtg.core.admin import ReadOnlyInline, ReadOnlyModelAdmin
from venues import display
from venues.models import (
    LIVE_TX_STATES,
    ChainLedgerEntry,
    ChainTransaction,
    ChainTransactionEvent,
    NonceCursor,
    TxState,
)


class ChainTransactionEventInline(ReadOnlyInline):
    model = ChainTransactionEvent
    view_permission = "venues.view_chaintransaction"
    verbose_name = "event"
    verbose_name_plural = "Events (newest first)"
    fields = readonly_fields = (
        "at",
        "from_state",
        "to_state",
        "actor_type",
        "actor_id",
        "evidence",
    )
    ordering = ("-at", "-id")


@admin.register(ChainTransaction)
class ChainTransactionAdmin(ReadOnlyModelAdmin):
    """One transaction as a person reads it: what it does (the decoded call, its amount and
    recipient), what it cost in the chain's units, how deep it is against the chain's finality
    policy, a link to the chain's explorer; then the stored record and its events."""

    list_display = (
        "id",
        "chain",
        "sender",
        "nonce",
        "purpose",
        "state",
        "tx_hash",
        "block_number",
        "confirmations_shown",
        "node",
        "state_changed_at",
    )
    list_filter = ("state", "purpose", "chain")
    search_fields = ("tx_hash", "sender", "movement__id")
    list_select_related = ("node", "movement")
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "chain",
                    "family",
                    "state",
                    "purpose",
                    "sender",
                    "nonce",
                    "tx_hash_link",
                    "movement",
                    "node",
                    "replaces",
                )
            },
        ),
        ("What it does", {"fields": ("call_summary", "amount", "recipient", "call_arguments")}),
        ("Fees", {"fields": ("fee_shown", "family_fields")}),
        ("Finality", {"fields": ("confirmations_shown", "block_number", "block_hash")}),
        (
            "Times",
            {
                "fields": (
                    "created_at",
                    "signed_at",
                    "broadcast_at",
                    "pending_at",
                    "confirmed_at",
                    "finalized_at",
                    "state_changed_at",
                )
            },
        ),
        ("As signed", {"classes": ("collapse",), "fields": ("unsigned", "raw_signed")}),
    )
    readonly_fields = [field.name for field in ChainTransaction._meta.fields] + [
        "tx_hash_link",
        "call_summary",
        "amount",
        "recipient",
        "call_arguments",
        "fee_shown",
        "family_fields",
        "confirmations_shown",
    ]
    inlines = [ChainTransactionEventInline]
    ordering = ("-id",)

    def _call(self, tx):
        # One decode per page: the fields below read the same call.
        if getattr(tx, "_decoded_call", False) is False:
            tx._decoded_call = display.decoded_call(tx)
        return tx._decoded_call

    @admin.display(description="transaction")
    def tx_hash_link(self, tx):
        if not tx.tx_hash:
            return "— (not signed yet)"
        link = display.explorer_link(tx)
        if not link:
            return format_html("<code>{}</code> (no explorer configured)", tx.tx_hash)
        return format_html(
            '<code>{}</code> <a href="{}" target="_blank" rel="noopener noreferrer">'
            "view on the explorer</a>",
            tx.tx_hash,
            link,
        )

    @admin.display(description="call")
    def call_summary(self, tx):
        call = self._call(tx)
        return call.summary if call is not None else "—"

    @admin.display(description="amount")
    def amount(self, tx):
        return display.call_argument(self._call(tx), "amount")

    @admin.display(description="recipient")
    def recipient(self, tx):
        return display.call_argument(self._call(tx), "recipient", "mint recipient", "spender")

    @admin.display(description="decoded arguments")
    def call_arguments(self, tx):
        call = self._call(tx)
        if call is None or not call.arguments:
            return "—"
        return format_html(
            '<table class="qtg-call">{}</table>',
            format_html_join("", "<tr><th>{}</th><td>{}</td></tr>", call.arguments),
        )

    @admin.display(description="fee paid")
    def fee_shown(self, tx):
        return display.fee_paid(tx)

    @admin.display(description="the family's fields")
    def family_fields(self, tx):
        rows = display.detail_rows(tx)
        if not rows:
            return "—"
        return format_html_join(mark_safe("<br>"), "{}: {}", rows)

    @admin.display(description="confirmations")
    def confirmations_shown(self, tx):
        return str(display.confirmations(tx))


@admin.register(ChainLedgerEntry)
class ChainLedgerEntryAdmin(ReadOnlyModelAdmin):
    """What nodes' transactions moved at finality, and each reversal by a final reorg
    (append-only: a reversal points at the entry it compensates)."""

    list_display = (
        "id",
        "at",
        "chain",
        "kind",
        "amount",
        "asset",
        "chain_transaction",
        "movement",
        "compensates",
    )
    list_filter = ("kind", "chain", "asset")
    search_fields = ("chain_transaction__tx_hash", "movement__id")
    list_select_related = ("chain_transaction", "movement", "compensates")
    readonly_fields = [field.name for field in ChainLedgerEntry._meta.fields]
    ordering = ("-at", "-id")


@admin.register(NonceCursor)
class SenderQueueAdmin(ReadOnlyModelAdmin):
    """Each sender's nonce queue on each chain: the next nonce QTG hands out, the lowest one
    still in flight (what every later transaction of the sender waits behind), its state and
    age, and how many are in flight."""

    list_display = (
        "chain",
        "sender",
        "next_nonce",
        "lowest_in_flight",
        "lowest_state",
        "lowest_age",
        "in_flight",
    )
    list_filter = ("chain",)
    search_fields = ("sender",)
    readonly_fields = [field.name for field in NonceCursor._meta.fields]
    ordering = ("chain", "sender")

    def _queue(self, cursor):
        return ChainTransaction.objects.filter(
            chain=cursor.chain,
            sender=cursor.sender,
            nonce__isnull=False,
            state__in=[*LIVE_TX_STATES, TxState.CREATED],
        ).exclude(state=TxState.CONFIRMED)

    def _lowest(self, cursor):
        return self._queue(cursor).order_by("nonce", "id").first()

    @admin.display(description="lowest nonce in flight")
    def lowest_in_flight(self, cursor):
        lowest = self._lowest(cursor)
        return "-" if lowest is None else lowest.nonce

    @admin.display(description="its state")
    def lowest_state(self, cursor):
        lowest = self._lowest(cursor)
        return "-" if lowest is None else lowest.state

    @admin.display(description="waiting for (s)")
    def lowest_age(self, cursor):
        lowest = self._lowest(cursor)
        if lowest is None:
            return "-"
        return int((timezone.now() - lowest.created_at).total_seconds())

    @admin.display(description="in flight")
    def in_flight(self, cursor):
        return self._queue(cursor).count()


class MovementChainTransactionInline(ReadOnlyInline):
    """The movement page: every transaction its nodes signed, with its state."""

    model = ChainTransaction
    view_permission = "movements.view_movementrequest"
    verbose_name = "chain transaction"
    verbose_name_plural = "Chain transactions (every broadcast of every node)"
    fields = readonly_fields = (
        "node_key",
        "chain",
        "nonce",
        "state",
        "tx_hash",
        "replaces",
        "block_number",
        "confirmations",
        "fee_shown",
        "state_changed_at",
    )
    show_change_link = True

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("node", "replaces").order_by("id")

    @admin.display(description="node")
    def node_key(self, obj):
        return obj.node.node_key if obj.node_id else "-"

    @admin.display(description="fee paid")
    def fee_shown(self, obj):
        return display.fee_paid(obj)


add_movement_page_inline(MovementChainTransactionInline)


# The exchange adapter's own rows (its journal and measured clocks).
import_module("venues.cex.admin")
