"""The chain's head as one look sees it, and the facts read once per head instead of once
per transaction looked at.

- ``latest``: the head block (number, hash, base fee): one read per look.
- ``finalized``: the chain's ``finalized`` block, read once per head block and endpoint in
  this process (a cache keyed by the head's hash, so a reorg to another head at the same
  height asks again). A checkpoint read at an older head can only be lower than the
  current one: anything decided with it is decided later, never wrongly.
- ``sender_reads``: the sender's transaction count at ``pending`` and at ``latest``, the head
  block and the new transaction's gas estimate, in one JSON-RPC batch (one round trip where
  a new nonce is allocated).
- ``head_and_receipts``: the head block and the receipts a look reads, in one JSON-RPC batch.

A batch is one HTTP exchange: a timeout or a lost answer loses all of it, and an element the
node answers with an error fails all of it (web3 raises): either way the read is transient and
asked again at the next look, as a single read would be. A receipt the node does not serve is
None, as from ``client.receipt_of`` (not evidence of anything on its own).
"""

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from movements.executors.base import TransientError
from venues.evm import client
from venues.evm.tx.common import rpc_read

CACHED_HEADS = 64  # per process: enough for every endpoint of every chain to keep a few

_finalized: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()
_lock = threading.Lock()


@dataclass(frozen=True)
class Head:
    number: int
    hash: str
    base_fee: int | None


def _head(block: Any) -> Head:
    base_fee = block.get("baseFeePerGas")
    return Head(
        number=int(block["number"]),
        hash=block["hash"].to_0x_hex(),
        base_fee=int(base_fee) if base_fee is not None else None,
    )


def latest(w3: Any) -> Head:
    """The head block the node serves now."""
    return _head(rpc_read("latest block", w3.eth.get_block, "latest"))


def finalized(w3: Any, head: Head) -> dict[str, Any]:
    """The ``finalized`` block (number and hash) as the node served it at ``head``: read once
    per head block and endpoint."""
    key = (_endpoint(w3), head.hash)
    with _lock:
        found = _finalized.get(key)
    if found is not None:
        return dict(found)
    block = rpc_read("finalized block", w3.eth.get_block, "finalized")
    found = {"number": int(block["number"]), "hash": block["hash"].to_0x_hex()}
    with _lock:
        _finalized[key] = found
        while len(_finalized) > CACHED_HEADS:
            _finalized.popitem(last=False)
    return dict(found)


@dataclass(frozen=True)
class SenderReads:
    """What a new nonce is decided on, read in one round trip."""

    pending: int  # the sender's transaction count at ``pending``
    mined: int  # ... at ``latest``
    head: Head
    gas: int | None = None  # the gas estimate of the call asked for, if it was asked


def sender_reads(w3: Any, sender: str, *, estimate: dict[str, Any] | None = None) -> SenderReads:
    """The sender's counts, the head block and, with ``estimate`` (a call), its gas estimate:
    one JSON-RPC batch. A node that refuses the estimate (a revert, funds short) answers the
    batch with an error: the counts are then read again without it and ``gas`` is None (the
    caller asks for the estimate alone, where its refusal is told apart from a timeout)."""

    def batch(with_estimate: bool) -> list[Any]:
        with w3.batch_requests() as requests:
            requests.add(w3.eth.get_transaction_count(sender, "pending"))
            requests.add(w3.eth.get_transaction_count(sender, "latest"))
            requests.add(w3.eth.get_block("latest"))
            if with_estimate:
                requests.add(w3.eth.estimate_gas(estimate))
            return requests.execute()

    found: list[Any] | None = None
    if estimate is not None:
        try:
            found = batch(True)
        except Exception as exc:
            if client.is_network_error(exc):
                raise TransientError(
                    f"nonce, head and gas: {type(exc).__name__}: {exc}"[:500]
                ) from exc
            found = None  # an answer with an error: asked again, the estimate alone after
    if found is None:
        found = [*rpc_read("nonce and head", batch, False), None]
    pending, mined, block, gas = found
    return SenderReads(
        int(pending), int(mined), _head(block), int(gas) if gas is not None else None
    )


def _endpoint(w3: Any) -> str:
    return str(getattr(w3.provider, "endpoint_uri", "") or id(w3))


def head_and_receipts(
    w3: Any, hashes: list[str], *, head_last: bool = False
) -> tuple[Head, list[Any]]:
    """The head block and the receipt of each of ``hashes`` (None where the node serves
    none), in one JSON-RPC batch: one round trip for what a look reads. ``head_last``: the
    head is asked after the receipts (a caller counting a receipt's confirmations from it;
    a node may answer a batch's calls in any order, so a head below the receipt's block is
    still possible and counts no confirmations)."""
    if not hashes:
        return latest(w3), []

    def batch() -> list[Any]:
        with w3.batch_requests() as requests:
            if not head_last:
                requests.add(w3.eth.get_block("latest"))
            for tx_hash in hashes:
                requests.add(_none_if_null(w3.eth.get_transaction_receipt(tx_hash)))
            if head_last:
                requests.add(w3.eth.get_block("latest"))
            return requests.execute()

    found = rpc_read("head and receipts", batch)
    if len(found) != len(hashes) + 1:
        raise TransientError(f"head and receipts: {len(found)} answers to {len(hashes) + 1}")
    block, receipts = (found[-1], found[:-1]) if head_last else (found[0], found[1:])
    for tx_hash, receipt in zip(hashes, receipts, strict=True):
        # An answer paired with the wrong call would confirm the wrong transaction.
        if receipt is not None and receipt["transactionHash"].to_0x_hex() != tx_hash.lower():
            raise TransientError(f"head and receipts: the answer for {tx_hash} is another's")
    return _head(block), list(receipts)


def _none_if_null(request: Any) -> Any:
    """A batched request whose null answer is None (web3 raises ``TransactionNotFound`` for
    a missing receipt, which would fail the whole batch): its request information (what
    web3 8 hands the batch in batching mode) without the null-result formatter."""
    call, (result_formatters, error_formatters, _null) = request
    return call, (result_formatters, error_formatters, None)
