"""The simulated venues: an exchange (withdraw, withdrawal status, deposits), a chain (transfer,
confirmations, reorgs), a signer and Circle's CCTP (burn, attestation, mint).

Deterministic: identifiers and transaction hashes derive from the caller's idempotency key or
signed bytes, and a chain's height is a function of the clock (``block_seconds`` from the
reviewed finality file, scaled by ``settings.QTG_SANDBOX_TIME_SCALE``). Every side effect is
written to ``LedgerEntry`` in the same transaction as the record it creates, and only when the
record is new, so a replay is answered from the record and never repeated.
"""

import hashlib
import hmac
import json
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from sandbox.errors import VenueDisabled, VenueRejected, VenueTimeout
from sandbox.faults import NO_FAULT, Fault
from sandbox.finality import chain_finality
from sandbox.models import Attestation, ChainTx, Deposit, LedgerEntry, Withdrawal

EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
SIGNER_SECRET = b"qtg-sandbox-signer"


def ensure_enabled() -> None:
    if not settings.QTG_SANDBOX_ENABLED:
        raise VenueDisabled("the sandbox venues are switched off (QTG_SANDBOX_ENABLED)")


def _sha(*parts: str) -> str:
    return hashlib.sha256(":".join(parts).encode()).hexdigest()


def _ledger(
    venue: str,
    operation: str,
    reference: str,
    *,
    asset: str = "",
    amount: Decimal | None = None,
    **detail: Any,
) -> None:
    LedgerEntry.objects.create(
        venue=venue,
        operation=operation,
        reference=reference,
        asset=asset,
        amount=amount,
        detail=detail,
    )


def _after(fault: Fault) -> None:
    """Faults that strike once the venue has done the work. ``delay`` never sleeps here: the
    venue answers at once and shows the outcome later (its status calls compare the time)."""
    if fault.is_("submit_timeout_landed"):
        raise VenueTimeout("the venue did not answer in time (the request was carried out)")
    if fault.is_("submit_delay"):
        # The one fault that holds a worker inside a call, on purpose: a slow venue that has
        # carried the request out and answers late (bounded in sandbox/faults.py).
        time.sleep(fault.seconds)


def _before(fault: Fault) -> None:
    if fault.is_("submit_stall"):
        # Held before the venue acts on the request (bounded in sandbox/faults.py).
        time.sleep(fault.seconds)
    if fault.is_("fail"):
        raise VenueRejected("the venue rejected the request (sandbox fault 'fail')")
    if fault.is_("submit_timeout_lost"):
        raise VenueTimeout("the venue did not answer in time (the request was lost)")


# --- chain ------------------------------------------------------------------------------------


def block_seconds(chain: str) -> float:
    return chain_finality(chain).block_seconds * settings.QTG_SANDBOX_TIME_SCALE


def chain_height(chain: str, at: datetime | None = None) -> int:
    at = at or timezone.now()
    return int((at - EPOCH).total_seconds() / block_seconds(chain))


def block_hash(chain: str, height: int) -> str:
    return "0x" + _sha("block", chain, str(height))


@dataclass(frozen=True)
class TxStatus:
    chain: str
    tx_hash: str
    found: bool
    included: bool = False
    block_height: int | None = None
    block_hash: str = ""
    confirmations: int = 0
    required: int = 0
    reorg_count: int = 0

    @property
    def final(self) -> bool:
        return self.included and self.confirmations >= self.required

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _status(tx: ChainTx) -> TxStatus:
    height = chain_height(tx.chain)
    confirmations = max(0, height - tx.included_height + 1)
    return TxStatus(
        chain=tx.chain,
        tx_hash=tx.tx_hash,
        found=True,
        included=confirmations > 0,
        block_height=tx.included_height if confirmations else None,
        block_hash=block_hash(tx.chain, tx.included_height) if confirmations else "",
        confirmations=confirmations,
        required=chain_finality(tx.chain).confirmations,
        reorg_count=tx.reorg_count,
    )


def tx_status(*, tx_hash: str, fault: Fault = NO_FAULT) -> TxStatus:
    """Where a transaction stands. With the ``reorg`` fault, the first time it is seen in a
    block the block is reorganised away: the transaction drops back to the mempool and is
    re-mined two blocks later (confirmations start again from zero)."""
    ensure_enabled()
    return _tx_and_status(tx_hash, fault)[1]


def _tx_and_status(tx_hash: str, fault: Fault) -> tuple[ChainTx | None, TxStatus]:
    tx = ChainTx.objects.filter(tx_hash=tx_hash).first()
    if tx is None:
        return None, TxStatus(chain="", tx_hash=tx_hash, found=False)
    status = _status(tx)
    if fault.is_("reorg") and tx.reorg_count == 0 and status.included:
        with transaction.atomic():
            tx = ChainTx.objects.select_for_update().get(pk=tx.pk)
            if tx.reorg_count == 0:
                _ledger(
                    tx.chain,
                    LedgerEntry.Operation.REORG,
                    tx.tx_hash,
                    old_height=tx.included_height,
                    old_block_hash=block_hash(tx.chain, tx.included_height),
                    confirmations_before=status.confirmations,
                )
                tx.included_height = chain_height(tx.chain) + 2
                tx.reorg_count += 1
                tx.save(update_fields=["included_height", "reorg_count"])
        status = _status(tx)
    return tx, status


def _insert_tx(
    *,
    chain: str,
    tx_hash: str,
    kind: str,
    operation: str,
    asset: str,
    amount: Decimal,
    sender: str = "",
    recipient: str = "",
    signed_payload: str = "",
    detail: dict | None = None,
) -> ChainTx:
    """Put a transaction in the next block and record it (the caller makes it happen once)."""
    tx = ChainTx.objects.create(
        chain=chain,
        tx_hash=tx_hash,
        kind=kind,
        signed_payload=signed_payload,
        sender=sender,
        recipient=recipient,
        asset=asset,
        amount=amount,
        included_height=chain_height(chain) + 1,
        detail=detail or {},
    )
    _ledger(
        chain, operation, tx_hash, asset=asset, amount=amount, sender=sender, recipient=recipient
    )
    return tx


def _create_tx(**fields: Any) -> tuple[ChainTx, bool]:
    """Put a transaction in the next block, once (the hash is the dedup key)."""
    try:
        with transaction.atomic():
            return _insert_tx(**fields), True
    except IntegrityError:
        return ChainTx.objects.get(tx_hash=fields["tx_hash"]), False


# --- signer -----------------------------------------------------------------------------------


def sign(*, key_id: str, payload: dict[str, Any]) -> str:
    """Sign a transaction payload (deterministically); every signature is a ledger entry."""
    ensure_enabled()
    body = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    signature = hmac.new(SIGNER_SECRET + key_id.encode(), body.encode(), "sha256").hexdigest()
    signed = (
        json.dumps(
            {"payload": json.loads(body), "key_id": key_id, "sig": signature},
            sort_keys=True,
            separators=(",", ":"),
        )
        .encode()
        .hex()
    )
    _ledger("signer", LedgerEntry.Operation.SIGN, signed_tx_hash(signed), key_id=key_id)
    return signed


def signed_tx_hash(signed_payload: str) -> str:
    return "0x" + hashlib.sha256(signed_payload.encode()).hexdigest()


def _decode(signed_payload: str) -> dict[str, Any]:
    try:
        envelope = json.loads(bytes.fromhex(signed_payload))
        body = json.dumps(envelope["payload"], sort_keys=True, separators=(",", ":"))
        key = SIGNER_SECRET + envelope["key_id"].encode()
        expected = hmac.new(key, body.encode(), "sha256").hexdigest()
    except (ValueError, KeyError, TypeError) as exc:
        raise VenueRejected(f"malformed signed transaction: {exc}") from None
    if not hmac.compare_digest(expected, envelope["sig"]):
        raise VenueRejected("bad signature")
    return envelope["payload"]


def broadcast(*, signed_payload: str, fault: Fault = NO_FAULT) -> str:
    """Broadcast signed bytes (a CCTP burn or mint); the same bytes are the same transaction,
    so a re-broadcast is harmless. Returns the transaction hash."""
    ensure_enabled()
    payload = _decode(signed_payload)
    _before(fault)
    tx_hash = signed_tx_hash(signed_payload)
    operation = payload.get("op")
    amount = Decimal(str(payload.get("amount", "0")))
    with transaction.atomic():
        if operation == "burn":
            _create_tx(
                chain=payload["chain"],
                tx_hash=tx_hash,
                kind=ChainTx.Kind.BURN,
                operation=LedgerEntry.Operation.BURN,
                asset=payload["asset"],
                amount=amount,
                sender=payload.get("from", ""),
                recipient=payload.get("to", ""),
                signed_payload=signed_payload,
                detail={"destination_chain": payload.get("destination_chain", "")},
            )
        elif operation == "mint":
            attestation = (
                Attestation.objects.select_for_update()
                .filter(burn_tx_hash=payload.get("burn_tx_hash", ""))
                .first()
            )
            if attestation is None or attestation.message != payload.get("attestation"):
                raise VenueRejected("mint refused: no valid attestation for this burn")
            if attestation.used_by_mint and attestation.used_by_mint != tx_hash:
                raise VenueRejected(
                    "mint refused: this burn was already minted", minted_by=attestation.used_by_mint
                )
            _create_tx(
                chain=payload["chain"],
                tx_hash=tx_hash,
                kind=ChainTx.Kind.MINT,
                operation=LedgerEntry.Operation.MINT,
                asset=payload["asset"],
                amount=amount,
                recipient=payload.get("to", ""),
                signed_payload=signed_payload,
            )
            if not attestation.used_by_mint:
                attestation.used_by_mint = tx_hash
                attestation.save(update_fields=["used_by_mint"])
        else:
            raise VenueRejected(f"unsupported transaction type {operation!r}")
    _after(fault)
    return tx_hash


def is_known(tx_hash: str) -> bool:
    ensure_enabled()
    return ChainTx.objects.filter(tx_hash=tx_hash).exists()


# --- CCTP attestation -------------------------------------------------------------------------


@dataclass(frozen=True)
class AttestationStatus:
    status: str  # PENDING, READY, FAILED
    message: str = ""
    burn: TxStatus | None = None


def attestation_status(*, burn_tx_hash: str, fault: Fault = NO_FAULT) -> AttestationStatus:
    """Circle attests a burn once it is final on its chain (plus any injected delay)."""
    ensure_enabled()
    existing = Attestation.objects.filter(burn_tx_hash=burn_tx_hash).first()
    if existing is not None:
        return AttestationStatus("READY", existing.message)
    burn = tx_status(tx_hash=burn_tx_hash)
    if fault.is_("observe_fail"):
        return AttestationStatus("FAILED", burn=burn)
    if not burn.final:
        return AttestationStatus("PENDING", burn=burn)
    tx = ChainTx.objects.get(tx_hash=burn_tx_hash)
    if fault.is_("delay") and timezone.now() < tx.broadcast_at + timedelta(seconds=fault.seconds):
        return AttestationStatus("PENDING", burn=burn)
    message = "0x" + _sha("attestation", burn_tx_hash)
    try:
        with transaction.atomic():
            Attestation.objects.create(burn_tx_hash=burn_tx_hash, message=message)
            _ledger("circle", LedgerEntry.Operation.ATTESTATION, burn_tx_hash)
    except IntegrityError:
        pass
    return AttestationStatus("READY", message, burn)


# --- exchange ---------------------------------------------------------------------------------


def withdraw(
    *,
    venue: str,
    client_key: str,
    asset: str,
    amount: Decimal,
    address: str,
    network: str,
    fault: Fault = NO_FAULT,
    valid_until: datetime | None = None,
) -> Withdrawal:
    """Accept a withdrawal once per client key: a replay returns the original withdrawal. A
    request acted on after ``valid_until`` is refused, as an exchange refuses a signed request
    past its window (Binance's recvWindow): so a request that was held up somewhere is
    carried out only while its sender may still be waiting for it."""
    ensure_enabled()
    existing = Withdrawal.objects.filter(venue=venue, client_key=client_key).first()
    if existing is not None:
        return existing
    if network not in _known_chains():
        raise VenueRejected(f"{venue} does not support network {network!r}")
    _before(fault)
    now = timezone.now()
    if valid_until is not None and now > valid_until:
        raise VenueRejected(
            f"request expired: valid until {valid_until.isoformat()}, acted on at "
            f"{now.isoformat()}",
            valid_until=valid_until.isoformat(),
        )
    try:
        with transaction.atomic():
            withdrawal = Withdrawal.objects.create(
                venue=venue,
                client_key=client_key,
                withdrawal_id="wd-" + _sha(venue, client_key)[:24],
                asset=asset,
                amount=amount,
                address=address,
                network=network,
            )
            _ledger(
                venue,
                LedgerEntry.Operation.WITHDRAW,
                withdrawal.withdrawal_id,
                asset=asset,
                amount=amount,
                client_key=client_key,
                address=address,
                network=network,
            )
    except IntegrityError:
        return Withdrawal.objects.get(venue=venue, client_key=client_key)
    _after(fault)
    return withdrawal


def _known_chains() -> set[str]:
    from sandbox.finality import finality_policy

    return set(finality_policy())


def withdrawal_by_key(*, venue: str, client_key: str) -> Withdrawal | None:
    """Recovery's question: did a withdrawal with this client key happen?"""
    ensure_enabled()
    return Withdrawal.objects.filter(venue=venue, client_key=client_key).first()


def withdrawal_status(*, withdrawal_id: str, fault: Fault = NO_FAULT) -> Withdrawal:
    """A withdrawal is processed (its on-chain transfer broadcast) the first time it is looked
    at after its processing delay; ``observe_fail`` makes the exchange fail it instead."""
    ensure_enabled()
    withdrawal = Withdrawal.objects.filter(withdrawal_id=withdrawal_id).first()
    if withdrawal is None:
        raise VenueRejected(f"no withdrawal {withdrawal_id}")
    if withdrawal.status != Withdrawal.Status.PROCESSING:
        return withdrawal
    if fault.is_("delay") and timezone.now() < withdrawal.created_at + timedelta(
        seconds=fault.seconds
    ):
        return withdrawal
    # Taken out of PROCESSING by a conditional UPDATE, which holds the row until we commit:
    # whoever's UPDATE matched is the one that carries the withdrawal out.
    pending = Withdrawal.objects.filter(pk=withdrawal.pk, status=Withdrawal.Status.PROCESSING)
    if fault.is_("observe_fail"):
        status, tx_hash = Withdrawal.Status.FAILED, ""
    else:
        status, tx_hash = Withdrawal.Status.SENT, "0x" + _sha("transfer", withdrawal_id)
    now = timezone.now()
    with transaction.atomic():
        moved = pending.update(status=status, tx_hash=tx_hash, updated_at=now)
        if moved and status == Withdrawal.Status.SENT:
            _insert_tx(
                chain=withdrawal.network,
                tx_hash=tx_hash,
                kind=ChainTx.Kind.TRANSFER,
                operation=LedgerEntry.Operation.CHAIN_TRANSFER,
                asset=withdrawal.asset,
                amount=withdrawal.amount,
                sender=withdrawal.venue,
                recipient=withdrawal.address,
            )
    if not moved:  # another observer got there first: the row says what happened
        withdrawal.refresh_from_db(fields=["status", "tx_hash", "updated_at"])
        return withdrawal
    withdrawal.status, withdrawal.tx_hash, withdrawal.updated_at = status, tx_hash, now
    return withdrawal


@dataclass(frozen=True)
class DepositStatus:
    status: str  # PENDING, CREDITED, REJECTED
    chain: TxStatus


def deposit_status(*, venue: str, tx_hash: str, fault: Fault = NO_FAULT) -> DepositStatus:
    """An exchange credits a deposit once its transaction is final on its chain (plus any
    injected delay); ``observe_fail`` makes it reject the deposit; ``reorg`` reorganises the
    transaction away the first time it is seen in a block."""
    ensure_enabled()
    tx, chain = _tx_and_status(tx_hash, fault)
    if tx is None:
        return DepositStatus("PENDING", chain)
    if Deposit.objects.filter(venue=venue, tx_hash=tx_hash).exists():
        return DepositStatus("CREDITED", chain)
    if fault.is_("observe_fail"):
        return DepositStatus("REJECTED", chain)
    if not chain.final:
        return DepositStatus("PENDING", chain)
    if fault.is_("delay") and timezone.now() < tx.broadcast_at + timedelta(seconds=fault.seconds):
        return DepositStatus("PENDING", chain)
    try:
        with transaction.atomic():
            Deposit.objects.create(
                venue=venue, chain=tx.chain, tx_hash=tx_hash, asset=tx.asset, amount=tx.amount
            )
            _ledger(
                venue,
                LedgerEntry.Operation.DEPOSIT_CREDIT,
                tx_hash,
                asset=tx.asset,
                amount=tx.amount,
            )
    except IntegrityError:
        pass
    return DepositStatus("CREDITED", chain)
