"""Chain transactions in the admin: read-only, with their audit trail; a movement's page lists
the transactions its nodes made, with their states."""

from django.contrib import admin

from movements.interface import add_movement_page_inline
from qtg.core.admin import ReadOnlyInline, ReadOnlyModelAdmin
from venues.models import ChainTransaction, ChainTransactionEvent


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
    list_display = (
        "id",
        "chain",
        "sender",
        "nonce",
        "purpose",
        "state",
        "tx_hash",
        "block_number",
        "confirmations",
        "node",
        "state_changed_at",
    )
    list_filter = ("state", "purpose", "chain")
    search_fields = ("tx_hash", "sender", "movement__id")
    list_select_related = ("node", "movement")
    readonly_fields = [field.name for field in ChainTransaction._meta.fields]
    inlines = [ChainTransactionEventInline]
    ordering = ("-id",)


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
        "max_fee_per_gas",
        "state_changed_at",
    )
    show_change_link = True

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("node", "replaces").order_by("id")

    @admin.display(description="node")
    def node_key(self, obj):
        return obj.node.node_key if obj.node_id else "-"


add_movement_page_inline(MovementChainTransactionInline)
