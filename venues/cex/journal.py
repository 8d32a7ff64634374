"""The withdrawal journal (``CexWithdrawal``): written before a withdrawal is sent, updated
with what the exchange answered or recovery found."""

from datetime import datetime
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.utils import timezone

from venues.cex.models import CexWithdrawal

State = CexWithdrawal.State


class AlreadyJournaled(Exception):
    """A withdrawal with this client id was already sent (or begun): never send it twice."""

    def __init__(self, row: CexWithdrawal) -> None:
        super().__init__(f"withdrawal {row.client_id} is already journaled ({row.state})")
        self.row = row


def withdrawal_begin(
    *,
    client_id: str,
    exchange: str,
    account: str,
    coin: str,
    network: str,
    address: str,
    amount: Decimal,
    request_id: str,
    node_key: str,
) -> CexWithdrawal:
    """Journal a withdrawal about to be sent (committed before the request leaves)."""
    try:
        with transaction.atomic():
            return CexWithdrawal.objects.create(
                client_id=client_id,
                exchange=exchange,
                account=account,
                coin=coin,
                network=network,
                address=address,
                amount=amount,
                request_id=request_id,
                node_key=node_key,
                started_at=timezone.now(),
            )
    except IntegrityError:
        raise AlreadyJournaled(CexWithdrawal.objects.get(client_id=client_id)) from None


def withdrawal_answered(
    row: CexWithdrawal, *, state: str, withdrawal_id: str = "", error: str = ""
) -> None:
    """Record what the exchange answered (or what recovery found)."""
    row.state = state
    row.withdrawal_id = withdrawal_id or row.withdrawal_id
    row.error = error[:1000]
    row.answered_at = timezone.now()
    row.save(update_fields=["state", "withdrawal_id", "error", "answered_at"])


def unresolved_twin(
    *,
    client_id: str,
    exchange: str,
    account: str,
    coin: str,
    network: str,
    amount: Decimal,
    before: CexWithdrawal | None = None,
) -> CexWithdrawal | None:
    """Another withdrawal of the same amount from the same account whose outcome is not known
    (journaled before ``before``, when given): on an exchange without client ids, recovery
    could not tell the two apart."""
    twins = CexWithdrawal.objects.filter(
        exchange=exchange,
        account=account,
        coin=coin,
        network=network,
        amount=amount,
        state__in=CexWithdrawal.UNRESOLVED,
    ).exclude(client_id=client_id)
    if before is not None:
        twins = twins.filter(pk__lt=before.pk)
    return twins.order_by("pk").first()


def claimed_ids(*, exchange: str, account: str, since: datetime, client_id: str) -> set[str]:
    """The withdrawal ids other journal rows already account for."""
    return set(
        CexWithdrawal.objects.filter(exchange=exchange, account=account, started_at__gte=since)
        .exclude(client_id=client_id)
        .exclude(withdrawal_id="")
        .values_list("withdrawal_id", flat=True)
    )


def journaled(client_id: str) -> CexWithdrawal | None:
    return CexWithdrawal.objects.filter(client_id=client_id).first()
