"""The shared request budget (an exchange credential's, or Iris's) under real concurrency on
PostgreSQL: a worker that waited for the bucket's row is granted a token as of when it got the
row, not as of when it began to wait (SQLite serialises writers, so the wait cannot be staged
there)."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from tests.threads import own_connection
from venues.cex import ratelimit
from venues.cex.models import CexRateBucket

BUDGET = ratelimit.Budget(per_second=1.0, burst=1.0)
HELD_SECONDS = 1.5


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_caller_that_waited_for_the_bucket_is_not_granted_a_token_from_before_its_wait():
    """One transaction holds the bucket's row for 1.5 s (a worker taking its token inside a
    longer transaction); another worker asks meanwhile and waits. When the row is free, that
    worker and one asking right then are, together, granted no more than the burst: the
    waiter's token is counted at the time it got the row, so the refill of its wait is not
    handed out twice (each grant is a request sent; Iris answers 429 to one too many)."""
    CexRateBucket.objects.create(
        credential="iris:test", tokens=1.0, refreshed_at=timezone.now() - timedelta(seconds=10)
    )
    holding, released = threading.Event(), threading.Event()
    granted: list[float] = []  # when each take() that was granted returned
    errors: list[BaseException] = []

    @own_connection(errors)
    def hold() -> None:
        with transaction.atomic():
            CexRateBucket.objects.select_for_update().get(credential="iris:test")
            holding.set()
            time.sleep(HELD_SECONDS)
        released.set()

    @own_connection(errors)
    def ask() -> None:
        if ratelimit.take("iris:test", BUDGET) == 0.0:
            granted.append(time.monotonic())

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(timeout=10)
    waiter = threading.Thread(target=ask)
    waiter.start()  # blocks on the row
    assert released.wait(timeout=10)
    waiter.join(timeout=10)
    ask()  # a worker asking the moment the row is free
    holder.join(timeout=10)

    assert errors == []
    # In any half second the budget allows the burst (1) plus half a token: one grant.
    assert len(granted) == 1, f"{len(granted)} tokens granted within {HELD_SECONDS} s of a wait"
