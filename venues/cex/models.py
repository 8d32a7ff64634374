"""What the exchange executors keep in the database: the withdrawal journal and the shared rate
limit of each exchange credential (rows of the ``venues`` app)."""

from django.db import models
from django.db.models import Q


class CexWithdrawal(models.Model):
    """One withdrawal request, written BEFORE it is sent: after a lost answer, recovery knows
    what was asked, with which client id, and when sending began (the lower bound of a history
    search on an exchange without client ids).

    The row only moves forward (``venues.cex.journal``: every write is a compare-and-set on
    the state it was read in): SENDING -> SENT happens in the fence's transaction, right
    before the request leaves; a row still SENDING was never sent and never will be once
    recovery has moved it to NOT_SENT. ACCEPTED and FOUND are final, an id is never cleared,
    and one exchange account's withdrawal id belongs to one row (database unique)."""

    class State(models.TextChoices):
        SENDING = "SENDING", "journaled; the request has not left (it may only after the fence)"
        SENT = "SENT", "fenced: the request left (or is leaving); outcome not known yet"
        NOT_SENT = "NOT_SENT", "never sent (recovery closed it before the fence let it go)"
        ACCEPTED = "ACCEPTED", "accepted by the exchange"
        REFUSED = "REFUSED", "refused by the exchange (nothing was withdrawn)"
        UNKNOWN = "UNKNOWN", "answer lost: recovery asks the exchange"
        FOUND = "FOUND", "found by recovery"
        NOT_FOUND = "NOT_FOUND", "not found by recovery after the visibility window"

    UNRESOLVED = (State.SENDING, State.SENT, State.UNKNOWN)

    client_id = models.CharField(max_length=128, unique=True)
    exchange = models.CharField(max_length=64)
    account = models.CharField(max_length=128)
    coin = models.CharField(max_length=32)
    network = models.CharField(max_length=32)
    address = models.CharField(max_length=256)
    amount = models.DecimalField(max_digits=38, decimal_places=18)
    state = models.CharField(max_length=16, choices=State.choices, default=State.SENDING)
    withdrawal_id = models.CharField(max_length=128, blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    node_key = models.CharField(max_length=128, blank=True)
    started_at = models.DateTimeField()
    # When the fence let the request go, and until when the exchange could still act on it
    # (the signed request's own validity; null: the exchange sets no bound, e.g. Upbit).
    sent_at = models.DateTimeField(null=True, blank=True)
    valid_until = models.DateTimeField(null=True, blank=True)
    # The exchange's clock minus ours when the request was signed (milliseconds).
    skew_ms = models.IntegerField(null=True, blank=True)
    answered_at = models.DateTimeField(null=True, blank=True)
    error = models.CharField(max_length=1000, blank=True)

    class Meta:
        app_label = "venues"
        constraints = [
            models.UniqueConstraint(
                fields=["account", "withdrawal_id"],
                condition=~Q(withdrawal_id=""),
                name="cex_withdrawal_id_once",
            )
        ]
        indexes = [
            models.Index(
                fields=["exchange", "account", "coin", "network", "amount", "state"],
                name="cex_withdrawal_twin_idx",
            )
        ]

    def __str__(self) -> str:
        return f"{self.exchange}/{self.account} {self.amount} {self.coin} ({self.state})"

    def save(self, *args, **kwargs) -> None:
        # A row read earlier and saved later would write back what it knew then (a stalled
        # worker's stale copy): after the insert, only the journal's compare-and-set writes.
        if self.pk is not None and not kwargs.get("force_insert"):
            raise RuntimeError("CexWithdrawal rows change only through venues.cex.journal")
        super().save(*args, **kwargs)


class CexDepositClaim(models.Model):
    """A deposit at an exchange account counted for one movement: (account, txid) is unique,
    so a deposit is never counted for two withdrawals."""

    account = models.CharField(max_length=128)
    txid = models.CharField(max_length=256)
    deposit_id = models.CharField(max_length=128, blank=True)
    request_id = models.CharField(max_length=64)
    node_key = models.CharField(max_length=128)
    claimed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "venues"
        constraints = [
            models.UniqueConstraint(fields=["account", "txid"], name="cex_deposit_txid_once")
        ]

    def __str__(self) -> str:
        return f"{self.account} {self.txid} -> {self.request_id}/{self.node_key}"


class CexClock(models.Model):
    """The exchange's clock as last measured for one account (``fetchTime``): its offset from
    ours and how uncertain the measurement was (half the round trip), shown in the admin."""

    account = models.CharField(max_length=128, unique=True)
    exchange = models.CharField(max_length=64)
    skew_ms = models.IntegerField()
    uncertainty_ms = models.IntegerField()
    measured_at = models.DateTimeField()

    class Meta:
        app_label = "venues"

    def __str__(self) -> str:
        return f"{self.account}: exchange clock {self.skew_ms:+d} ms"


class CexRateBucket(models.Model):
    """The request budget of one exchange credential, shared by every worker: a token bucket
    read and written under ``SELECT ... FOR UPDATE``, and the time before which nobody may ask
    at all (the exchange said Retry-After, or banned the key)."""

    # "<exchange kind>:<sha256 of the API key, 16 hex>": the key itself is never stored.
    credential = models.CharField(max_length=64, unique=True)
    tokens = models.FloatField()
    refreshed_at = models.DateTimeField()
    blocked_until = models.DateTimeField(null=True, blank=True)
    blocked_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        app_label = "venues"

    def __str__(self) -> str:
        return self.credential
