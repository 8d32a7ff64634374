"""The simulated venues' own records, in the database so every process sees the same venue."""

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone

MONEY = {"max_digits": 38, "decimal_places": 18}


class LedgerEntry(models.Model):
    """One side effect a simulated venue performed (append-only): the proof that nothing
    happened twice."""

    class Operation(models.TextChoices):
        WITHDRAW = "withdraw", "Exchange withdrawal accepted"
        CHAIN_TRANSFER = "chain_transfer", "Transfer broadcast on chain"
        SIGN = "sign", "Payload signed"
        BURN = "burn", "CCTP burn broadcast"
        MINT = "mint", "CCTP mint broadcast"
        ATTESTATION = "attestation", "CCTP attestation issued"
        DEPOSIT_CREDIT = "deposit_credit", "Deposit credited"
        REORG = "reorg", "Transaction reorganised out of its block"

    venue = models.CharField(max_length=200)
    operation = models.CharField(max_length=32, choices=Operation.choices)
    reference = models.CharField(max_length=200, db_index=True)
    asset = models.CharField(max_length=32, blank=True)
    amount = models.DecimalField(null=True, blank=True, **MONEY)
    detail = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "ledger entries"

    def __str__(self) -> str:
        return f"{self.venue} {self.operation} {self.reference}"


class Withdrawal(models.Model):
    """A withdrawal at a simulated exchange, keyed by the client's idempotency key."""

    class Status(models.TextChoices):
        PROCESSING = "PROCESSING", "Processing"
        SENT = "SENT", "Sent"
        FAILED = "FAILED", "Failed"

    venue = models.CharField(max_length=200)
    client_key = models.CharField(max_length=128)
    withdrawal_id = models.CharField(max_length=64, unique=True)
    asset = models.CharField(max_length=32)
    amount = models.DecimalField(**MONEY)
    address = models.CharField(max_length=200)
    network = models.CharField(max_length=32)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PROCESSING)
    tx_hash = models.CharField(max_length=80, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["venue", "client_key"], name="sandbox_withdrawal_key"),
        ]

    def __str__(self) -> str:
        return f"{self.withdrawal_id} {self.amount} {self.asset} ({self.status})"


class ChainTx(models.Model):
    """A transaction on a simulated chain. Its block height is fixed when it is included;
    confirmations follow from the chain's height, which advances with time."""

    class Kind(models.TextChoices):
        TRANSFER = "transfer", "Transfer"
        BURN = "burn", "CCTP burn"
        MINT = "mint", "CCTP mint"

    chain = models.CharField(max_length=32)
    tx_hash = models.CharField(max_length=80, unique=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    signed_payload = models.TextField(blank=True)
    sender = models.CharField(max_length=200, blank=True)
    recipient = models.CharField(max_length=200, blank=True)
    asset = models.CharField(max_length=32)
    amount = models.DecimalField(**MONEY)
    included_height = models.BigIntegerField()
    reorg_count = models.PositiveIntegerField(default=0)
    detail = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    broadcast_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.chain}:{self.tx_hash[:12]} {self.kind}"


class Deposit(models.Model):
    """A deposit credited at a simulated exchange, once per on-chain transaction."""

    venue = models.CharField(max_length=200)
    chain = models.CharField(max_length=32)
    tx_hash = models.CharField(max_length=80)
    asset = models.CharField(max_length=32)
    amount = models.DecimalField(**MONEY)
    credited_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["venue", "tx_hash"], name="sandbox_deposit_once"),
        ]

    def __str__(self) -> str:
        return f"{self.venue} {self.amount} {self.asset}"


class Attestation(models.Model):
    """Circle's (simulated) attestation of a finalized burn."""

    burn_tx_hash = models.CharField(max_length=80, unique=True)
    message = models.CharField(max_length=200)
    used_by_mint = models.CharField(max_length=80, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"attestation of {self.burn_tx_hash[:12]}"
