"""Several RPC endpoints of one Solana chain (``rpc_url_env`` and ``rpc_endpoints`` in the
reviewed config): sends and everyday reads go to the primary; before a transaction whose
status the primary answers null is concluded EXPIRED, every endpoint is asked.

- A status for the signature at ANY endpoint that answers is a landing, lagging or not (a
  lagging endpoint is behind the chain, it does not invent blocks): never EXPIRED then.
- "No landing" counts only from endpoints that are not lagging: an endpoint whose processed
  slot is more than ``max_head_lag_slots`` behind the highest is not asked for conclusions.
- An endpoint that does not answer (or answers an error), a primary that lags, or an endpoint
  whose null status answers at a context slot short of the decisive slot: a contradiction. No
  conclusion is drawn; the transaction is looked at again.

Every answer (endpoint, slot, lagging, status, context slot, error) goes into the evidence.
"""

from dataclasses import dataclass, field
from typing import Any

from solana.rpc.core import RPCException
from solders.transaction_status import TransactionStatus

from .config import SolanaChain
from .rpc import RpcUnavailable, SolanaRpcClient


@dataclass
class CrossCheck:
    landing: TransactionStatus | None = None
    seen_at: str | None = None
    seen_by: SolanaRpcClient | None = None
    contradiction: str | None = None
    answers: list[dict[str, Any]] = field(default_factory=list)


def _answer(env: str, client: SolanaRpcClient, signature: str):
    entry: dict[str, Any] = {"endpoint": env}
    status = None
    try:
        entry["slot"] = client.slot("processed")
        status, context_slot = client.status_at(signature)
        entry["status_context_slot"] = context_slot
    except (RpcUnavailable, RPCException) as exc:
        entry["error"] = f"{type(exc).__name__}: {exc}"[:300]
        return entry, None
    if status is not None:
        entry["status"] = {
            "slot": status.slot,
            "err": None if status.err is None else str(status.err),
            "confirmations": status.confirmations,
        }
    else:
        entry["status"] = None
    return entry, status


def judge(
    answers: list[dict[str, Any]], *, decisive_slot: int, max_lag: int
) -> tuple[int | None, str | None]:
    """The pure rule over every endpoint's answer (the primary first; each with ``slot``,
    ``status`` and ``status_context_slot``, or ``error``): (the index of the first endpoint
    showing a landing, or None; why the endpoints do not all agree it never landed, or None).
    Marks each answer ``lagging``."""
    slots = [answer["slot"] for answer in answers if "error" not in answer]
    top = max(slots) if slots else 0
    landing: int | None = None
    contradiction: str | None = None
    for index, answer in enumerate(answers):
        answer["lagging"] = "error" not in answer and answer["slot"] < top - max_lag
        if answer.get("status") is not None:
            landing = index if landing is None else landing
            continue
        if "error" in answer:
            contradiction = contradiction or f"{answer['endpoint']} did not answer"
        elif answer["lagging"]:
            if index == 0:
                contradiction = contradiction or "the primary endpoint is lagging"
        elif answer["status_context_slot"] < decisive_slot:
            contradiction = contradiction or (
                f"{answer['endpoint']} answers at slot {answer['status_context_slot']}, "
                f"short of the decisive slot {decisive_slot}"
            )
    return landing, contradiction


def absence_cross_check(chain: SolanaChain, signature: str, *, decisive_slot: int) -> CrossCheck:
    """Whether every endpoint agrees that ``signature`` is in no block up to
    ``decisive_slot`` (the finalized slot at which the primary found the blockhash dead)."""
    asked = []
    for env, url in chain.endpoint_urls():
        client = SolanaRpcClient(url, timeout=chain.rpc_timeout_seconds)
        entry, status = _answer(env, client, signature)
        asked.append((entry, client, status))
    answers = [entry for entry, _, _ in asked]
    landing, contradiction = judge(
        answers, decisive_slot=decisive_slot, max_lag=chain.max_head_lag_slots
    )
    check = CrossCheck(contradiction=contradiction, answers=answers)
    if landing is not None:
        entry, client, status = asked[landing]
        check.landing, check.seen_at, check.seen_by = status, entry["endpoint"], client
    return check
