"""Several RPC endpoints of one chain (``rpc_url_env`` and ``rpc_endpoints`` in the reviewed
config): sends and everyday reads go to the primary; a conclusion of absence drawn from the
primary's answers (DROPPED; a transaction seen in a block, final or not, or an attested CCTP
burn, gone: a reorg) is first put to every endpoint, the primary asked again among them.

- A receipt of one of ours at ANY endpoint that answers is a sighting, lagging or not (a
  lagging endpoint is behind the chain, it does not invent blocks): never absent then.
- Negative answers count only from endpoints that are not lagging: an endpoint whose head is
  more than ``max_head_lag_blocks`` behind the highest head is not asked for conclusions.
- An endpoint that does not answer, a primary that lags, an endpoint that still holds ours in
  its pool, has not seen the nonce used at its head, or has another block where the primary
  found the nonce's user: a contradiction. No conclusion is drawn; the transaction is looked
  at again.

Every answer (endpoint, head, lagging, what it said) goes into the evidence.
"""

from dataclasses import dataclass, field
from typing import Any

from venues.evm import client
from venues.evm.config import EvmChain


@dataclass
class CrossCheck:
    receipt_anywhere: bool = False
    contradiction: str | None = None
    answers: list[dict[str, Any]] = field(default_factory=list)

    def evidence(self) -> dict[str, Any]:
        return {
            "endpoints": self.answers,
            "receipt_anywhere": self.receipt_anywhere,
            "contradiction": self.contradiction,
        }


def _ask(what: str, fn, *args) -> tuple[Any, str | None]:
    try:
        return fn(*args), None
    except Exception as exc:
        if client.is_network_error(exc) or client.rpc_message(exc):
            return None, f"{what}: {type(exc).__name__}: {exc}"[:300]
        raise


def _sightings(chain: EvmChain, hashes: list[str]) -> list[tuple[dict[str, Any], Any]]:
    """Each endpoint's head and the first receipt it serves of ``hashes``."""
    found = []
    for env, w3 in client.web3_endpoints(chain):
        entry: dict[str, Any] = {"endpoint": env}
        head, error = _ask("head", lambda w3=w3: int(w3.eth.block_number))
        if error:
            entry["error"] = error
            found.append((entry, None))
            continue
        entry["head"] = head
        for tx_hash in hashes:
            receipt, error = _ask("receipt", client.receipt_of, w3, tx_hash)
            if error:
                entry["error"] = error
                break
            if receipt is not None:
                entry["receipt"] = {
                    "tx_hash": tx_hash,
                    "block_number": int(receipt["blockNumber"]),
                    "block_hash": receipt["blockHash"].to_0x_hex(),
                }
                break
        found.append((entry, w3))
    heads = [entry["head"] for entry, _ in found if "head" in entry]
    top = max(heads) if heads else 0
    for entry, _ in found:
        if "head" in entry:
            entry["lagging"] = entry["head"] < top - chain.max_head_lag_blocks
    return found


def absence_cross_check(
    chain: EvmChain,
    *,
    hashes: list[str],
    sender: str,
    nonce: int,
    spent_block: dict[str, Any] | None,
) -> CrossCheck:
    """Whether every endpoint agrees that none of ``hashes`` (one nonce's transactions) can be
    mined: the nonce used at each head, by the block the primary found (``spent_block``)."""
    check = CrossCheck()
    for index, (entry, w3) in enumerate(_sightings(chain, hashes)):
        check.answers.append(entry)
        if "receipt" in entry:
            check.receipt_anywhere = True
        if "error" in entry:
            check.contradiction = check.contradiction or f"{entry['endpoint']} did not answer"
            continue
        if entry["lagging"]:
            if index == 0:
                check.contradiction = check.contradiction or "the primary endpoint is lagging"
            continue
        if index == 0 or "receipt" in entry:
            continue
        problem = _disagrees(
            w3, entry, hashes=hashes, sender=sender, nonce=nonce, block=spent_block
        )
        if problem:
            entry["disagrees"] = problem
            check.contradiction = check.contradiction or f"{entry['endpoint']}: {problem}"
    return check


def _disagrees(w3, entry, *, hashes, sender, nonce, block) -> str | None:
    for tx_hash in hashes:
        body, error = _ask("transaction", client.transaction_of, w3, tx_hash)
        if error:
            return error
        if body is not None:
            return f"it holds {tx_hash} (in its pool)"
    used, error = _ask("nonce", w3.eth.get_transaction_count, sender, entry["head"])
    if error:
        return error
    entry["nonce_latest"] = int(used)
    if int(used) <= nonce:
        return f"nonce {nonce} is not used at its head {entry['head']}"
    if block is not None:
        found, error = _ask("block", w3.eth.get_block, int(block["number"]))
        if error:
            return error
        if found is None or found["hash"].to_0x_hex() != block["hash"]:
            return f"another block at {block['number']} than the one that used the nonce"
    return None


@dataclass(frozen=True)
class Sighting:
    """Every endpoint's answer to a lookup of one transaction, and the first that serves it
    where it was looked for (None: no endpoint does)."""

    answers: list[dict[str, Any]]
    seen: dict[str, Any] | None

    def evidence(self) -> dict[str, Any]:
        return {"endpoints": self.answers, **({"sighting": self.seen} if self.seen else {})}


def sighting_elsewhere(chain: EvmChain, tx_hash: str, block_hash: str | None = None) -> Sighting:
    """Whether an endpoint serves ``tx_hash`` (in ``block_hash`` when given) although a look at
    the primary just did not: a transaction is not concluded gone (a reorg, a final one
    included) while one does. Every endpoint is asked, the primary again: one lookup of a
    load-balanced backend can miss a receipt its peers serve, a second look is an answer of
    its own."""
    found = _sightings(chain, [tx_hash])
    answers = [entry for entry, _ in found]
    for entry, w3 in found:
        receipt = entry.get("receipt")
        if not receipt or block_hash not in (None, receipt["block_hash"]):
            continue
        # A receipt whose block the endpoint no longer holds at its height is a stale index
        # entry, not a sighting; one it cannot say either way about is no absence either.
        block, error = _ask("block", w3.eth.get_block, receipt["block_number"])
        if error:
            entry["error"] = error
        elif block is None or block["hash"].to_0x_hex() != receipt["block_hash"]:
            entry["stale_receipt"] = True
            continue
        return Sighting(answers, {"endpoint": entry["endpoint"], **receipt})
    return Sighting(answers, None)


def receipt_elsewhere(chain: EvmChain, hashes: list[str]) -> dict[str, Any] | None:
    """Any endpoint of the chain that serves a receipt of one of ``hashes`` (asked before a
    node's transactions are concluded dropped: a receipt anywhere is never absence), with
    every endpoint's answer; None when none does (or the chain lists no other endpoint)."""
    if not chain.rpc_endpoints:
        return None
    found = _sightings(chain, hashes)
    for entry, _ in found:
        if "receipt" in entry:
            return {
                **entry["receipt"],
                "endpoint": entry["endpoint"],
                "endpoints": [e for e, _ in found],
            }
    return None
