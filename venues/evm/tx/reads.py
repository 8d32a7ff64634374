"""Read facts: what the chain says about a transaction, each number with the block it was
answered at (the finalized checkpoint, who used a nonce, why a mined transaction reverted,
what a receipt moved)."""

from typing import Any

from venues.evm.config import EvmChain
from venues.evm.tx.build import Transfer
from venues.evm.tx.common import rpc_read, unsigned_for_signing
from venues.evm.tx.heads import Head, finalized
from venues.models import ChainTransaction

TRANSFER_TOPIC = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"


def finalized_block(w3: Any, chain: EvmChain, *, head: Head | None = None) -> dict[str, Any] | None:
    """The chain's ``finalized`` block (number and hash) when its finality policy uses the
    tag, else None. With ``head`` (the head block just read): read once per head block
    (``heads.finalized``)."""
    if not chain.finality.tag:
        return None
    if head is not None:
        return finalized(w3, head)
    block = rpc_read("finalized block", w3.eth.get_block, "finalized")
    return {"number": int(block["number"]), "hash": block["hash"].to_0x_hex()}


def nonce_spender(
    w3: Any, sender: str, nonce: int, *, since: int = 0, chain: EvmChain | None = None
) -> dict[str, Any]:
    """Who used ``nonce`` of ``sender``, read from the chain itself (not from a lookup by hash,
    which a lagging backend answers "not found"): the sender's transaction count at the head
    and at the finalized block, and, once the count at the head has passed ``nonce``, the
    block where it did (binary search over the count at block numbers from ``since``) and
    the transaction in it from ``sender`` with that nonce. Every number names the block
    (number and hash) it was answered at. "Finalized" is the chain's reviewed policy: the
    ``finalized`` tag, a depth below the head, or the lower of the two."""
    head = rpc_read("latest block", w3.eth.get_block, "latest")
    final = rpc_read("finalized block", w3.eth.get_block, "finalized")
    head_number, final_number = int(head["number"]), int(final["number"])
    policy = chain.finality if chain is not None else None
    if policy is not None and policy.depth:
        by_depth = max(0, head_number - policy.depth + 1)
        if not policy.tag or by_depth < final_number:
            final = rpc_read("block", w3.eth.get_block, by_depth)
            final_number = by_depth

    def count(block: int) -> int:
        return int(rpc_read("nonce", w3.eth.get_transaction_count, sender, block))

    facts: dict[str, Any] = {
        "head": {"number": head_number, "hash": head["hash"].to_0x_hex()},
        "finalized": {"number": final_number, "hash": final["hash"].to_0x_hex()},
        "nonce_latest": count(head_number),
        "nonce_finalized": count(final_number),
        "by": None,
        "block": None,
    }
    if facts["nonce_latest"] <= nonce:
        return facts
    low, high = min(max(0, since), head_number), head_number
    if count(low) > nonce:
        low = 0
    while low < high:
        middle = (low + high) // 2
        if count(middle) > nonce:
            high = middle
        else:
            low = middle + 1
    block = rpc_read("block", w3.eth.get_block, low, True)
    facts["block"] = {"number": int(block["number"]), "hash": block["hash"].to_0x_hex()}
    for found in block["transactions"]:
        if str(found["from"]).lower() == sender.lower() and int(found["nonce"]) == nonce:
            facts["by"] = found["hash"].to_0x_hex()
            break
    return facts


def revert_reason(w3: Any, tx: ChainTransaction) -> str | None:
    """Why a mined transaction reverted: replayed as ``eth_call`` on the state its block
    started from, else (the revert depended on a transaction earlier in the same block) on
    the state after the block. None if neither replay reverts."""
    unsigned = unsigned_for_signing(tx.unsigned)
    call = {
        "from": tx.sender,
        "to": unsigned["to"],
        "data": unsigned.get("data", "0x"),
        "value": unsigned.get("value", 0),
        "gas": unsigned["gas"],
    }
    block = int(tx.block_number)
    for at, note in ((block - 1, ""), (block, f" (replayed on the state after block {block})")):
        try:
            w3.eth.call(call, block_identifier=at)
        except Exception as exc:
            return (str(getattr(exc, "message", "") or exc) + note)[:500]
    return None


def moved(w3: Any, receipt: Any, transfer: Transfer) -> dict[str, Any] | None:
    """The transfer the receipt shows (recipient, units), checked against what was asked:
    None when it matches, else what was found."""
    if not transfer.token:
        tx = w3.eth.get_transaction(receipt["transactionHash"])
        found = {"to": tx["to"], "units": int(tx["value"])}
        ok = (tx["to"] or "").lower() == transfer.recipient.lower() and found[
            "units"
        ] == transfer.units
        return None if ok else found
    for log in receipt["logs"]:
        if (log["address"] or "").lower() != transfer.token.lower() or len(log["topics"]) != 3:
            continue
        if log["topics"][0].to_0x_hex() != TRANSFER_TOPIC:
            continue
        to = "0x" + log["topics"][2].hex()[-40:]
        sender = "0x" + log["topics"][1].hex()[-40:]
        units = int.from_bytes(bytes(log["data"]), "big")
        if (
            to.lower() == transfer.recipient.lower()
            and sender.lower() == transfer.sender.lower()
            and units == transfer.units
        ):
            return None
    return {"logs": len(receipt["logs"]), "expected_units": transfer.units}
