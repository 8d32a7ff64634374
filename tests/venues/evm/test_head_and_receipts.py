"""``venues.evm.tx.heads.head_and_receipts``: what one look reads (the head and its receipts)
in one JSON-RPC batch, a receipt the node does not serve as None, and an answer that cannot be
paired with its call as a transient read, never a conclusion."""

import pytest
from web3 import Web3
from web3.providers.rpc import HTTPProvider

from movements.executors.base import TransientError
from venues.evm.tx.heads import head_and_receipts

pytestmark = pytest.mark.devchain


@pytest.fixture
def w3(lossy):
    return Web3(HTTPProvider(lossy.url))


@pytest.fixture
def mined(devchain):
    """Two transactions the chain has mined, oldest first."""
    sender = devchain.accounts[2]
    return [
        devchain.web3.eth.send_transaction(
            {"from": sender.address, "to": sender.address, "value": value}
        ).to_0x_hex()
        for value in (1, 2)
    ]


def test_the_head_and_every_receipt_are_read_in_one_round_trip(devchain, lossy, w3, mined):
    tip, receipts = head_and_receipts(w3, mined)

    assert tip.number == devchain.block_number()
    assert [r["transactionHash"].to_0x_hex() for r in receipts] == mined
    assert lossy.calls[0] == ("batch", 3)


def test_a_receipt_the_node_does_not_serve_is_none_and_the_others_are_read(lossy, w3, mined):
    lossy.lag_lookups(mined[0], seconds=30)

    tip, receipts = head_and_receipts(w3, mined, head_last=True)

    assert receipts[0] is None
    assert receipts[1]["transactionHash"].to_0x_hex() == mined[1]
    assert tip.number >= receipts[1]["blockNumber"]
    assert lossy.lagged == [("eth_getTransactionReceipt", mined[0])]


def test_an_error_answer_to_one_receipt_makes_the_whole_read_transient(lossy, w3, mined):
    lossy.answer_error("eth_getTransactionReceipt", "backend unavailable", times=1)

    with pytest.raises(TransientError, match="backend unavailable"):
        head_and_receipts(w3, mined)


@pytest.mark.parametrize(
    ("garble", "refusal"),
    [
        pytest.param(lambda answers: answers[:-1], "2 answers to 3", id="an answer missing"),
        pytest.param(
            lambda answers: [answers[0], answers[2], answers[1]],
            "is another's",
            id="receipts swapped",
        ),
    ],
)
def test_answers_that_cannot_be_paired_with_their_calls_are_a_transient_read(
    w3, mined, monkeypatch, garble, refusal
):
    # A provider that loses or reorders elements of a batch answer (with their ids, so web3
    # cannot put them back): the look must not read one transaction's receipt as another's.
    real = HTTPProvider.make_batch_request

    def garbled(self, requests):
        answers = real(self, requests)
        for index, answer in enumerate(answers):
            answer["id"] = index
        return garble(answers)

    monkeypatch.setattr(HTTPProvider, "make_batch_request", garbled)

    with pytest.raises(TransientError, match=refusal):
        head_and_receipts(w3, mined)
