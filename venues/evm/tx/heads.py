"""The chain's head as one look sees it, and the facts read once per head instead of once
per transaction looked at.

- ``latest``: the head block (number, hash, base fee): one read per look.
- ``finalized``: the chain's ``finalized`` block, read once per head block and endpoint in
  this process (a cache keyed by the head's hash, so a reorg to another head at the same
  height asks again). A checkpoint read at an older head can only be lower than the
  current one: anything decided with it is decided later, never wrongly.
- ``sender_counts``: the sender's transaction count at ``pending`` and at ``latest`` and the
  head block, in one JSON-RPC batch (one round trip where a new nonce is allocated).
"""

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

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


def sender_counts(w3: Any, sender: str) -> tuple[int, int, Head]:
    """(the sender's count at ``pending``, at ``latest``, the head block), one round trip."""

    def batch() -> list[Any]:
        with w3.batch_requests() as requests:
            requests.add(w3.eth.get_transaction_count(sender, "pending"))
            requests.add(w3.eth.get_transaction_count(sender, "latest"))
            requests.add(w3.eth.get_block("latest"))
            return requests.execute()

    pending, mined, block = rpc_read("nonce and head", batch)
    return int(pending), int(mined), _head(block)


def _endpoint(w3: Any) -> str:
    return str(getattr(w3.provider, "endpoint_uri", "") or id(w3))
