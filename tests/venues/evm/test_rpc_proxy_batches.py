"""The fault-playing JSON-RPC proxies play their faults on the calls of a JSON-RPC batch too:
a call inside a batch gets what it would get alone (``standins.rpc_proxy``, and the test
proxy ``tests.venues.evm.rpc_proxy`` that holds requests past the client's timeout). Code that
batches its reads must not escape the faults the product defends against."""

import httpx
import pytest
import requests
from web3 import Web3

from tests.venues.evm.rpc_proxy import RPCProxy

pytestmark = pytest.mark.devchain


def call(method: str, *params, id: int) -> dict:
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": list(params)}


def post(url: str, body) -> httpx.Response:
    return httpx.post(url, json=body, timeout=10)


@pytest.fixture
def mined(devchain):
    """The hash of a transaction the chain has mined."""
    sender = devchain.accounts[2]
    return devchain.web3.eth.send_transaction(
        {"from": sender.address, "to": sender.address, "value": 1}
    ).to_0x_hex()


def test_a_lagging_lookup_answers_null_in_its_element_and_the_other_calls_are_answered(
    devchain, lossy, mined
):
    lossy.lag_lookups(mined, seconds=30)

    answer = post(
        lossy.url,
        [
            call("eth_blockNumber", id=1),
            call("eth_getTransactionReceipt", mined, id=2),
            call("eth_getTransactionByHash", mined, id=3),
        ],
    ).json()

    by_id = {element["id"]: element for element in answer}
    assert int(by_id[1]["result"], 16) == devchain.block_number()
    assert by_id[2]["result"] is None and by_id[3]["result"] is None
    assert [method for method, _ in lossy.lagged] == [
        "eth_getTransactionReceipt",
        "eth_getTransactionByHash",
    ]


def test_a_missed_receipt_is_null_that_many_times_alone_or_in_a_batch_then_answered(
    devchain, lossy, mined
):
    post(lossy.url, call("standin_missReceipts", mined, 2, id=0))

    alone = post(lossy.url, call("eth_getTransactionReceipt", mined, id=1)).json()
    batch = post(
        lossy.url,
        [
            call("eth_getTransactionByHash", mined, id=2),
            call("eth_getTransactionReceipt", mined, id=3),
        ],
    ).json()
    after = post(lossy.url, call("eth_getTransactionReceipt", mined, id=4)).json()

    by_id = {element["id"]: element for element in batch}
    assert alone["result"] is None and by_id[3]["result"] is None
    assert by_id[2]["result"]["hash"] == mined  # the body is not a receipt lookup
    assert after["result"]["transactionHash"] == mined
    assert lossy.lagged == [("eth_getTransactionReceipt", mined.lower())] * 2


def test_an_error_answer_for_a_method_is_its_own_element_of_the_batch(devchain, lossy):
    lossy.answer_error("eth_getTransactionCount", "header not found", times=1)
    treasury = devchain.accounts[1].address

    answer = post(
        lossy.url,
        [call("eth_blockNumber", id=1), call("eth_getTransactionCount", treasury, "latest", id=2)],
    ).json()

    by_id = {element["id"]: element for element in answer}
    assert "result" in by_id[1]
    assert by_id[2]["error"] == {"code": -32000, "message": "header not found"}
    assert lossy.errored == [("eth_getTransactionCount", "header not found")]


def test_web3_raises_for_a_batch_one_of_whose_calls_is_answered_with_an_error(devchain, lossy):
    from web3.exceptions import Web3RPCError

    lossy.answer_error("eth_getTransactionCount", "header not found", times=1)
    w3 = Web3(Web3.HTTPProvider(lossy.url))
    treasury = devchain.accounts[1].address

    with pytest.raises(Web3RPCError, match="header not found"), w3.batch_requests() as batch:
        batch.add(w3.eth.get_block("latest"))
        batch.add(w3.eth.get_transaction_count(treasury, "latest"))
        batch.execute()


def test_a_lost_answer_loses_the_whole_batch_after_the_chain_acted_on_each_call(devchain, lossy):
    before = devchain.block_number()
    lossy.lose_response("anvil_mine", times=1)

    answer = post(lossy.url, [call("anvil_mine", "0x1", id=1), call("anvil_mine", "0x1", id=2)])

    assert answer.status_code == 502
    assert devchain.block_number() == before + 2  # both calls reached the chain
    assert [method for method, _ in lossy.lost] == ["anvil_mine", "anvil_mine"]


def test_a_trailing_head_and_finalized_tag_answer_the_calls_of_a_batch(devchain, lossy):
    devchain.mine(30)
    head = devchain.block_number()
    lossy.trail_head(5)
    lossy.trail_finalized(20)

    answer = post(
        lossy.url,
        [
            call("eth_blockNumber", id=1),
            call("eth_getBlockByNumber", "latest", False, id=2),
            call("eth_getBlockByNumber", "finalized", False, id=3),
        ],
    ).json()

    by_id = {element["id"]: element for element in answer}
    assert int(by_id[1]["result"], 16) == head - 5
    assert int(by_id[2]["result"]["number"], 16) == head - 5
    assert int(by_id[3]["result"]["number"], 16) == head - 20


def test_a_batch_is_passed_on_as_it_came_when_no_fault_is_armed(devchain, lossy, mined):
    answer = post(
        lossy.url,
        [call("eth_getTransactionReceipt", mined, id=7), call("eth_blockNumber", id=8)],
    ).json()

    by_id = {element["id"]: element for element in answer}
    assert by_id[7]["result"]["transactionHash"] == mined
    assert lossy.calls[-3:] == [
        ("batch", 2),
        ("eth_getTransactionReceipt", [mined]),
        ("eth_blockNumber", []),
    ]


@pytest.fixture
def holding(devchain):
    with RPCProxy(devchain.url, hold_seconds=1.5) as proxy:
        yield proxy


def test_a_stalled_method_holds_the_whole_batch_past_the_clients_timeout(devchain, holding, mined):
    holding.stall("eth_getTransactionReceipt", times=1, forward=False)
    w3 = Web3(Web3.HTTPProvider(holding.url, request_kwargs={"timeout": 1}))

    with pytest.raises(requests.exceptions.Timeout), w3.batch_requests() as batch:
        batch.add(w3.eth.get_block("latest"))
        batch.add(w3.eth.get_transaction_receipt(mined))
        batch.execute()

    assert holding.stalled == ["eth_getTransactionReceipt"]
    assert w3.eth.get_transaction_receipt(mined)["transactionHash"].to_0x_hex() == mined


def test_a_stalled_batch_forwarded_first_reached_the_node(devchain, holding):
    before = devchain.block_number()
    holding.stall("anvil_mine", times=1, forward=True)

    with pytest.raises(httpx.TimeoutException):
        httpx.post(
            holding.url,
            json=[call("anvil_mine", "0x1", id=1), call("eth_blockNumber", id=2)],
            timeout=1,
        )

    assert holding.stalled == ["anvil_mine"]
    assert devchain.block_number() == before + 1


def test_a_swallowed_raw_transaction_in_a_batch_is_answered_with_its_hash_and_never_sent(
    devchain, holding
):
    sender = devchain.accounts[3]
    w3 = devchain.web3
    nonce = w3.eth.get_transaction_count(sender.address)
    signed = sender.signer.sign_transaction(
        {
            "to": sender.address,
            "value": 1,
            "nonce": nonce,
            "gas": 21_000,
            "gasPrice": w3.eth.gas_price * 2,
            "chainId": w3.eth.chain_id,
        }
    )
    holding.stall("eth_sendRawTransaction", times=1, forward="swallow")

    answer = post(
        holding.url,
        [
            call("eth_sendRawTransaction", signed.raw_transaction.to_0x_hex(), id=1),
            call("eth_getTransactionCount", sender.address, "latest", id=2),
        ],
    ).json()

    by_id = {element["id"]: element for element in answer}
    assert by_id[1]["result"] == signed.hash.to_0x_hex()
    assert int(by_id[2]["result"], 16) == nonce
    assert w3.eth.get_transaction_count(sender.address, "pending") == nonce  # never sent
