"""The nonce allocator: gap-free and never reused, whoever asks at the same time."""

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, transaction

from venues.models import NonceCursor
from venues.nonces import nonce_allocate


def allocate(chain_next=0, sender="0xabc"):
    with transaction.atomic():
        return nonce_allocate(chain="devchain", sender=sender, chain_next=chain_next)


@pytest.mark.django_db
def test_nonces_start_at_the_chain_count_and_follow_one_another():
    assert [allocate(chain_next=5) for _ in range(3)] == [5, 6, 7]
    assert allocate(chain_next=0, sender="0xdef") == 0


@pytest.mark.django_db
def test_nonces_the_account_spent_elsewhere_are_skipped_not_reused():
    allocate(chain_next=3)

    assert allocate(chain_next=10) == 10
    assert NonceCursor.objects.get(chain="devchain", sender="0xabc").next_nonce == 11


@pytest.mark.django_db(transaction=True)
def test_a_nonce_is_never_handed_out_outside_the_transaction_that_keeps_it():
    with pytest.raises(RuntimeError, match="inside the transaction"):
        nonce_allocate(chain="devchain", sender="0xabc", chain_next=0)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_allocations_on_postgresql_are_contiguous_and_unique():
    def many(_):
        try:
            return [allocate(chain_next=0) for _ in range(10)]
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=6) as pool:
        found = [nonce for batch in pool.map(many, range(6)) for nonce in batch]

    assert sorted(found) == list(range(60))
