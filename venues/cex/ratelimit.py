"""The request budget of an exchange credential, shared by every worker process.

A token bucket in the database (one ``CexRateBucket`` row per credential, read and written
under ``SELECT ... FOR UPDATE``): every HTTP request to the exchange takes a token first. When
the exchange itself says "wait" (HTTP 429 with Retry-After, a 418 ban, Upbit's 429 without a
header), the time it named is remembered on the row as ``blocked_until`` and nobody sends a
request with that credential before it: a key told to wait that keeps calling gets banned.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from venues.cex.models import CexRateBucket


@dataclass(frozen=True)
class Budget:
    per_second: float
    burst: float


def take(credential: str, budget: Budget) -> float:
    """Take one token: 0.0 when the request may go now, else how many seconds to wait before
    asking again (nothing was taken).

    The time is read once the row is locked: a caller that waited for the lock (behind a
    transaction that held the row) must not be granted a token as of when it began to wait,
    and the bucket's clock never goes back. Either would let requests granted apart leave
    together, more of them in one second than the budget allows."""
    with transaction.atomic():
        bucket, now = _locked(credential, budget)
        if bucket.blocked_until is not None and bucket.blocked_until > now:
            return (bucket.blocked_until - now).total_seconds()
        elapsed = max(0.0, (now - bucket.refreshed_at).total_seconds())
        tokens = min(budget.burst, bucket.tokens + elapsed * budget.per_second)
        bucket.refreshed_at = max(now, bucket.refreshed_at)
        if tokens >= 1.0:
            bucket.tokens = tokens - 1.0
            wait = 0.0
        else:
            bucket.tokens = tokens
            wait = (1.0 - tokens) / budget.per_second
        bucket.save(update_fields=["tokens", "refreshed_at"])
        return wait


def block(credential: str, budget: Budget, *, seconds: float, reason: str) -> None:
    """Nobody asks with this credential for ``seconds`` (never shortening a longer block)."""
    with transaction.atomic():
        bucket, now = _locked(credential, budget)
        until = now + timedelta(seconds=seconds)
        if bucket.blocked_until is None or bucket.blocked_until < until:
            bucket.blocked_until = until
            bucket.blocked_reason = reason[:200]
            # What the exchange counted against us is spent: start the bucket empty after it.
            bucket.tokens = 0.0
            bucket.refreshed_at = until
            bucket.save(update_fields=["blocked_until", "blocked_reason", "tokens", "refreshed_at"])


def blocked_for(credential: str) -> float:
    """Seconds left of a remembered block (0.0 when none)."""
    until = (
        CexRateBucket.objects.filter(credential=credential)
        .values_list("blocked_until", flat=True)
        .first()
    )
    if until is None:
        return 0.0
    return max(0.0, (until - timezone.now()).total_seconds())


def _locked(credential: str, budget: Budget) -> tuple[CexRateBucket, datetime]:
    """The credential's row, locked (created full the first time), and the time read after the
    lock was granted."""
    CexRateBucket.objects.get_or_create(
        credential=credential, defaults={"tokens": budget.burst, "refreshed_at": timezone.now()}
    )
    bucket = CexRateBucket.objects.select_for_update().get(credential=credential)
    return bucket, timezone.now()
