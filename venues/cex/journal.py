"""The withdrawal journal (``CexWithdrawal``): written before a withdrawal is sent, moved
forward with what the exchange answered or recovery found.

Every write after the insert is a compare-and-set on the state the writer expects the row to
be in (``advance``): a stalled process holding a stale copy cannot move the row back, an id
once recorded is never cleared or replaced, and an id another row holds is refused by the
database (``cex_withdrawal_id_once``) and reported as ``IdTaken``.
"""

from datetime import datetime
from decimal import Decimal

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from qtg.core.actors import Actor, acting
from venues.cex.models import CexDepositClaim, CexWithdrawal

State = CexWithdrawal.State

# Which states a row may move to from which: anything else is refused.
FORWARD: dict[str, tuple[str, ...]] = {
    State.SENDING: (State.SENT, State.NOT_SENT, State.REFUSED),
    State.SENT: (State.ACCEPTED, State.REFUSED, State.UNKNOWN, State.FOUND, State.NOT_FOUND),
    State.UNKNOWN: (State.FOUND, State.NOT_FOUND),
    # "Not found" is provisional: a later sighting walks it back to FOUND.
    State.NOT_FOUND: (State.FOUND,),
    State.ACCEPTED: (),
    State.FOUND: (),
    State.REFUSED: (),
    State.NOT_SENT: (),
}
FINAL = tuple(state for state, onward in FORWARD.items() if not onward)
# Rows whose request is being sent by a live process right now.
IN_FLIGHT = (State.SENDING, State.SENT)


class AlreadyJournaled(Exception):
    """A withdrawal with this client id was already sent (or begun): never send it twice."""

    def __init__(self, row: CexWithdrawal) -> None:
        super().__init__(f"withdrawal {row.client_id} is already journaled ({row.state})")
        self.row = row


class NotSendable(Exception):
    """The fence's compare-and-set found the row no longer SENDING (recovery closed it): the
    request must not leave."""

    def __init__(self, row: CexWithdrawal) -> None:
        super().__init__(f"journal row {row.client_id} is {row.state}, not SENDING")
        self.row = row


class IdTaken(Exception):
    """The exchange named a withdrawal id another journal row already holds."""

    def __init__(self, withdrawal_id: str, holder: CexWithdrawal | None) -> None:
        who = f"{holder.client_id} (node {holder.node_key})" if holder else "another withdrawal"
        super().__init__(f"withdrawal id {withdrawal_id} already belongs to {who}")
        self.withdrawal_id = withdrawal_id
        self.holder = holder


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


def advance(
    row: CexWithdrawal,
    *,
    to: str,
    withdrawal_id: str = "",
    error: str = "",
    **fields: object,
) -> bool:
    """Move ``row`` to ``to`` if, in the database, it is still in a state that may move there
    and carries no other withdrawal id. True when it moved (``row`` then reflects it); False
    when it had moved on meanwhile (``row`` is refreshed with what the database holds).
    Raises ``IdTaken`` when another row holds ``withdrawal_id``."""
    sources = [state for state, onward in FORWARD.items() if to in onward]
    matching = CexWithdrawal.objects.filter(pk=row.pk, state__in=sources)
    values: dict[str, object] = {"state": to, "answered_at": timezone.now(), **fields}
    if error:
        values["error"] = error[:1000]
    if withdrawal_id:
        matching = matching.filter(Q(withdrawal_id="") | Q(withdrawal_id=withdrawal_id))
        values["withdrawal_id"] = withdrawal_id
    try:
        with transaction.atomic():
            moved = matching.update(**values) == 1
            if moved:
                _record_answer(row, to=to, withdrawal_id=withdrawal_id, error=error, fields=fields)
    except IntegrityError:
        holder = (
            CexWithdrawal.objects.filter(account=row.account, withdrawal_id=withdrawal_id)
            .exclude(pk=row.pk)
            .first()
        )
        raise IdTaken(withdrawal_id, holder) from None
    row.refresh_from_db()
    return moved


def _record_answer(row: CexWithdrawal, *, to: str, withdrawal_id: str, error: str, fields) -> None:
    """Each answer the journal takes, as its own append-only linked record: a later finding
    (recovery finding the withdrawal) is a new record, and the answer before it stays."""
    from movements.public import record_decision

    record_decision(
        subject=f"cexwithdrawal:{row.client_id}",
        action=f"answer:{to}",
        actor=acting(Actor.system("venues.cex")),
        detail={
            "exchange": row.exchange,
            "account": row.account,
            "withdrawal_id": withdrawal_id,
            "error": error[:1000],
            **{name: value for name, value in fields.items() if name != "raw"},
        },
    )


def mark_sent(row: CexWithdrawal, *, valid_until: datetime | None, skew_ms: int) -> bool:
    """The fence's compare-and-set, in its transaction: SENDING -> SENT (or, for a request
    sent again after the exchange said "wait", SENT with its new validity). False: the row
    moved on (recovery closed it) and nothing may be sent."""
    moved = (
        CexWithdrawal.objects.filter(pk=row.pk, state__in=IN_FLIGHT, withdrawal_id="").update(
            state=State.SENT, sent_at=timezone.now(), valid_until=valid_until, skew_ms=skew_ms
        )
        == 1
    )
    row.refresh_from_db()
    return moved


def withdrawal_answered(
    row: CexWithdrawal, *, state: str, withdrawal_id: str = "", error: str = ""
) -> bool:
    """Record what the exchange answered (or what recovery found): ``advance``."""
    return advance(row, to=state, withdrawal_id=withdrawal_id, error=error)


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


def holder_of(account: str, withdrawal_id: str, *, client_id: str) -> CexWithdrawal | None:
    """The other journal row that holds ``withdrawal_id`` at ``account``, if any."""
    if not withdrawal_id:
        return None
    return (
        CexWithdrawal.objects.filter(account=account, withdrawal_id=withdrawal_id)
        .exclude(client_id=client_id)
        .first()
    )


def journaled(client_id: str) -> CexWithdrawal | None:
    return CexWithdrawal.objects.filter(client_id=client_id).first()


def claim_deposit(
    *, account: str, txid: str, deposit_id: str, request_id: str, node_key: str
) -> CexDepositClaim:
    """Count the deposit ``txid`` at ``account`` for this movement's node; the claim that
    stands (another movement's, when it was counted there first)."""
    try:
        with transaction.atomic():
            claim, _ = CexDepositClaim.objects.get_or_create(
                account=account,
                txid=txid,
                defaults={"deposit_id": deposit_id, "request_id": request_id, "node_key": node_key},
            )
    except IntegrityError:
        claim = CexDepositClaim.objects.get(account=account, txid=txid)
    return claim
