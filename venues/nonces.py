"""Nonces per (chain, sender), allocated by QTG itself from the database.

Gap-free and never reused, with any number of workers: the cursor row is locked
(``SELECT ... FOR UPDATE``) while a nonce is taken, and the caller creates the transaction
that keeps the nonce in the same database transaction, so a nonce is never handed out without
its CREATED transaction. A node attempt allocates once: its retries and its recovery find the
transaction and re-use its nonce (and, once signed, its bytes).
"""

from django.db import IntegrityError, transaction

from venues.models import NonceCursor


class InFlightFull(Exception):
    """The sender already has ``limit`` nonces allocated that the chain has not mined: no new
    one is taken (nothing was allocated, nothing was sent)."""

    def __init__(self, *, in_flight: int, limit: int, next_nonce: int, chain_mined: int):
        super().__init__(
            f"{in_flight} nonces of the sender in flight (allocated, not mined), the most "
            f"allowed is {limit}"
        )
        self.in_flight, self.limit = in_flight, limit
        self.next_nonce, self.chain_mined = next_nonce, chain_mined


def sender_lock(*, chain: str, sender: str, chain_next: int) -> NonceCursor:
    """Lock the sender's cursor row (created at ``chain_next`` if it has none yet) for the
    rest of the caller's database transaction: what is decided under it (one allowance
    approve per sender and spender) is decided by one worker at a time."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("sender_lock must run inside a database transaction")
    if not NonceCursor.objects.filter(chain=chain, sender=sender).exists():
        try:
            with transaction.atomic():
                NonceCursor.objects.create(chain=chain, sender=sender, next_nonce=chain_next)
        except IntegrityError:
            pass  # another worker created it first
    return NonceCursor.objects.select_for_update().get(chain=chain, sender=sender)


def nonce_allocate(
    *,
    chain: str,
    sender: str,
    chain_next: int,
    chain_mined: int | None = None,
    max_in_flight: int | None = None,
) -> int:
    """The next nonce of ``sender`` on ``chain``. ``chain_next`` is the chain's own count of
    the sender's transactions (pending included): where a cursor starts, and where it jumps to
    if the account sent transactions QTG did not make (those nonces are used up). Call it
    inside the ``transaction.atomic`` that creates the transaction keeping the nonce.

    ``chain_mined`` is the chain's count of the sender's mined transactions; with
    ``max_in_flight``, a nonce is refused (``InFlightFull``) while that many nonces below it
    are allocated and not mined: decided under the cursor's lock, so any number of workers
    together never take more."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("nonce_allocate must run inside the transaction that keeps the nonce")
    cursor = NonceCursor.objects.select_for_update().filter(chain=chain, sender=sender).first()
    if cursor is None:
        try:
            with transaction.atomic():
                NonceCursor.objects.create(chain=chain, sender=sender, next_nonce=chain_next)
        except IntegrityError:
            pass  # another worker created it first: take its row's lock below
        cursor = NonceCursor.objects.select_for_update().get(chain=chain, sender=sender)
    nonce = max(cursor.next_nonce, chain_next)
    if max_in_flight is not None and chain_mined is not None:
        in_flight = nonce - chain_mined
        if in_flight >= max_in_flight:
            raise InFlightFull(
                in_flight=in_flight, limit=max_in_flight, next_nonce=nonce, chain_mined=chain_mined
            )
    cursor.next_nonce = nonce + 1
    cursor.save(update_fields=["next_nonce", "updated_at"])
    return nonce
