"""What the exchange executors keep in the database: the withdrawal journal and the shared rate
limit of each exchange credential (rows of the ``venues`` app)."""

from django.db import models


class CexWithdrawal(models.Model):
    """One withdrawal request, written BEFORE it is sent: after a lost answer, recovery knows
    what was asked, with which client id, and when sending began (the lower bound of a history
    search on an exchange without client ids)."""

    class State(models.TextChoices):
        SENDING = "SENDING", "being sent (outcome not known yet)"
        ACCEPTED = "ACCEPTED", "accepted by the exchange"
        REFUSED = "REFUSED", "refused by the exchange (nothing was withdrawn)"
        UNKNOWN = "UNKNOWN", "answer lost: recovery asks the exchange"
        FOUND = "FOUND", "found by recovery"
        NOT_FOUND = "NOT_FOUND", "not found by recovery after the visibility window"

    UNRESOLVED = (State.SENDING, State.UNKNOWN)

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
    answered_at = models.DateTimeField(null=True, blank=True)
    error = models.CharField(max_length=1000, blank=True)

    class Meta:
        app_label = "venues"
        indexes = [
            models.Index(
                fields=["exchange", "account", "coin", "network", "amount", "state"],
                name="cex_withdrawal_twin_idx",
            )
        ]

    def __str__(self) -> str:
        return f"{self.exchange}/{self.account} {self.amount} {self.coin} ({self.state})"


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
