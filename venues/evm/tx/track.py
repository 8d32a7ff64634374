"""One look at a node's transactions (``track``): the facts are read (receipts at the
primary endpoint, the mempool, the checkpoint, the nonce at the head and at finality) and the
pure rules of ``venues.evm.tx.policy`` decide what is done with them: confirm (the winner of
the nonce from the mined receipt), walk a reorged transaction back, finalize at the chain's
finality, re-send the stored bytes, bump the fee of the sender's lowest stuck nonce, wait,
conclude DROPPED, and fill the sender's nonce gaps (``venues.evm.tx.gaps``)."""

from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from movements.executors.base import TransientError
from venues.evm import client
from venues.evm.config import GWEI, EvmChain
from venues.evm.endpoints import receipt_elsewhere, sighting_elsewhere
from venues.evm.family import evm_fees
from venues.evm.tx import policy
from venues.evm.tx.broadcast import send_stored
from venues.evm.tx.build import node_transactions, signer_of_tx
from venues.evm.tx.common import ACTOR, S, chain_of, log, move_tx, rpc_read
from venues.evm.tx.heads import Head, head_and_receipts
from venues.evm.tx.reads import finalized_block, nonce_spender, revert_reason
from venues.evm.tx.sign import sign_stored
from venues.models import LIVE_TX_STATES, ChainTransaction
from venues.transactions import (
    chain_transaction_count_confirmations,
    chain_transaction_create,
    chain_transaction_record,
)


@dataclass
class Track:
    """Where a node's transactions stand after one look."""

    status: str  # none | waiting | finalized | failed | dropped
    winner: ChainTransaction | None = None
    original: ChainTransaction | None = None
    reorg: dict[str, Any] | None = None
    attention: dict[str, Any] | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    receipt: Any = None

    def summary(self) -> dict[str, Any]:
        detail = dict(self.detail)
        if self.winner is not None:
            detail |= {
                "tx_hash": self.winner.tx_hash,
                "block_number": self.winner.block_number,
                "block_hash": self.winner.block_hash,
                "confirmations": self.winner.confirmations,
            }
        if self.attention:
            detail["attention"] = self.attention
        if self.reorg:
            detail["reorg"] = self.reorg
        return detail


def track(node_id: int, *, now=None) -> Track:
    """Look at everything the node signed and move each transaction along: a receipt makes
    it CONFIRMED (its rivals with the same nonce REPLACED) and, at the chain's finality,
    FINALIZED (FAILED if it reverted); a block that is no longer canonical walks it back to
    PENDING (re-broadcast if it left the mempool); the newest transaction not seen by the
    network within the broadcast window is re-broadcast from its stored bytes; one PENDING
    longer than ``replace_after_seconds`` is replaced by a fee bump."""
    from venues.evm.tx.gaps import with_gap_hint

    now = now or timezone.now()
    # The sender's nonce-gap hint comes with the node's rows (one statement for both).
    txs = node_transactions(node_id, read_with=with_gap_hint)
    if not txs:
        return Track("none")
    original = txs[0]
    chain = chain_of(original)
    w3 = client.web3_for(chain)
    result = Track("waiting", original=original)
    looked = [
        tx
        for tx in txs
        if tx.tx_hash and (tx.state in LIVE_TX_STATES or tx.state in (S.REPLACED, S.DROPPED))
    ]
    # The head, then every receipt the look needs: one round trip.
    tip, receipts = head_and_receipts(w3, [tx.tx_hash for tx in looked])
    head = tip.number
    looks: dict[int, Any] = {tx.pk: receipt for tx, receipt in zip(looked, receipts, strict=True)}
    result.detail |= _fill_gaps(w3, chain, original, head=head, now=now)
    by_id = {tx.pk: tx for tx in txs}
    plan = policy.after_receipts([_seen(tx, looks) for tx in txs])
    if plan.settled is not None:
        # Already final (an earlier look that was not written through to the node).
        winner = by_id[plan.settled]
        result.winner = winner
        result.receipt = rpc_read("receipt", client.receipt_of, w3, winner.tx_hash)
        result.status = "finalized" if winner.state == S.FINALIZED else "failed"
        if result.status == "failed":
            result.detail["revert_reason"] = revert_reason(w3, winner)
        return result
    asked: dict[int, dict[str, Any]] = {}
    for pk in plan.walk_back:
        if looks.get(pk) is not None:
            continue  # mined in another block now: a reorg the primary itself shows
        # Its receipt missed at the primary: a lagging backend of a load-balanced provider
        # answers null for a transaction its peers serve. Gone only if no endpoint (the
        # primary asked again among them) serves it in its block: else this look waits.
        sighting = sighting_elsewhere(chain, by_id[pk].tx_hash, by_id[pk].block_hash)
        if sighting.seen is not None:
            result.detail["receipt_missed"] = sighting.evidence()
            return result
        asked[pk] = sighting.evidence()
    for pk in plan.walk_back:
        tx = by_id[pk]
        result.reorg = walk_back(tx, looks.get(pk), head, asked=asked.get(pk))
        result.attention = {
            "reason": "reorg",
            "message": f"block {result.reorg['old_block_number']} of {chain.name} left the "
            f"canonical chain with transaction {tx.tx_hash}",
        }
    if plan.winner is not None:
        winner = by_id[plan.winner]
        confirm(winner, looks[winner.pk], head, chain, tip=tip)
        for pk in plan.replaced:
            move_tx(by_id[pk], S.REPLACED, {"replaced_by": winner.tx_hash, "nonce": winner.nonce})
        result.winner, result.receipt = winner, looks[winner.pk]
        if winner.state == S.FINALIZED:
            result.status = "finalized"
        elif winner.state == S.FAILED:
            result.status = "failed"
            result.detail["revert_reason"] = revert_reason(w3, winner)
        else:
            result.detail["waiting_for"] = chain.finality.describe()
        return result
    if plan.conclude == "dropped":
        # Concluded absent at the primary endpoint: not while another serves a receipt.
        seen = receipt_elsewhere(chain, [tx.tx_hash for tx in txs if tx.tx_hash])
        if seen is not None:
            result.detail["receipt_elsewhere"] = seen
            plan = policy.after_receipts([_seen(tx, looks) for tx in txs], receipt_elsewhere=True)
    if plan.mempool is None:
        result.status = plan.conclude
        return result
    newest = keep_in_mempool(w3, chain, by_id[plan.mempool], txs, result, now=now)
    if result.status == "waiting" and newest.state in (S.PENDING, S.BROADCAST, S.SIGNED):
        _maybe_bump(w3, chain, newest, result, now=now)
    return result


def _seen(tx: ChainTransaction, looks: dict[int, Any]) -> policy.Seen:
    receipt = looks.get(tx.pk)
    return policy.Seen(
        id=tx.pk,
        state=str(tx.state),
        signed=bool(tx.tx_hash),
        receipt_block=receipt["blockHash"].to_0x_hex() if receipt is not None else None,
        recorded_block=tx.block_hash or "",
        reverted_final=tx.state == S.FAILED and bool(tx.block_hash),
    )


def _fill_gaps(
    w3: Any, chain: EvmChain, original: ChainTransaction, *, head: int, now
) -> dict[str, Any]:
    """The sender's nonces left unused by ended nodes filled (``venues.evm.tx.gaps``), at every
    look at one of its nodes: a transfer waiting behind a gap is what notices it (whether
    there may be work was read with ``original``). Its own trouble (the node not answering,
    no key) never fails the node being looked at."""
    from venues.evm.tx.gaps import fill_nonce_gaps, hint_of

    sender = original.sender
    try:
        report = fill_nonce_gaps(chain, sender, w3=w3, head=head, now=now, hint=hint_of(original))
    except Exception as exc:
        log.warning("nonce gaps of %s on %s: %s", sender, chain.name, exc, exc_info=True)
        return {"nonce_gap_error": f"{type(exc).__name__}: {exc}"[:300]}
    if not report.filled:
        return {}
    return {"nonces_filled": {str(tx.nonce): tx.tx_hash for tx in report.filled}}


def walk_back(
    tx: ChainTransaction, receipt: Any, head: int, *, asked: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A CONFIRMED transaction whose block left the canonical chain back to PENDING, with the
    evidence (``asked``: every endpoint's answer, where its receipt was missing)."""
    evidence = {
        "old_block_number": tx.block_number,
        "old_block_hash": tx.block_hash,
        "head": head,
        "now_in_block": receipt["blockHash"].to_0x_hex() if receipt is not None else None,
        **(asked or {}),
    }
    move_tx(tx, S.PENDING, {"reorg": evidence}, block_number=None, block_hash="", confirmations=0)
    return evidence


def confirm(
    tx: ChainTransaction, receipt: Any, head: int, chain: EvmChain, *, tip: Head | None = None
) -> None:
    """A mined transaction CONFIRMED (its block, fee, confirmations) and, at the chain's
    finality, FINALIZED (FAILED if it reverted). ``tip``: the head block ``head`` was read
    from, whose finalized checkpoint is read once (else the checkpoint is read now). The
    checkpoint is read first and what the look concludes is written in one database
    transaction (one commit, not one per step; no lock held across a call to the node)."""
    block_number = int(receipt["blockNumber"])
    block_hash = receipt["blockHash"].to_0x_hex()
    confirmations = policy.confirmations(head=head, block=block_number)
    checkpoint, final = None, False
    if policy.needs_checkpoint(chain.finality, head=head, block=block_number):
        checkpoint = finalized_block(client.web3_for(chain), chain, head=tip)
        final = policy.final(
            chain.finality,
            head=head,
            block=block_number,
            checkpoint=checkpoint["number"] if checkpoint else None,
        )
    with transaction.atomic():
        # The count rides on the look's transitions; alone (bookkeeping) only when it moved.
        counted = tx.confirmations == confirmations
        if tx.state != S.CONFIRMED:
            _confirmed(tx, receipt, head, block_number, block_hash, confirmations)
            counted = True
        if not final:
            if not counted:
                chain_transaction_count_confirmations(
                    chain_transaction_id=tx.pk, confirmations=confirmations
                )
                tx.confirmations = confirmations
            return
        move_tx(
            tx,
            S.FINALIZED if int(receipt["status"]) == 1 else S.FAILED,
            {
                "confirmations": confirmations,
                "required": chain.finality.describe(),
                "head": head,
                "finalized_block": checkpoint,
                "block_number": block_number,
                "block_hash": block_hash,
                "status": int(receipt["status"]),
            },
            confirmations=confirmations,
        )


def _confirmed(
    tx: ChainTransaction,
    receipt: Any,
    head: int,
    block_number: int,
    block_hash: str,
    confirmations: int,
) -> None:
    if tx.state == S.SIGNED:
        move_tx(tx, S.BROADCAST, {"found_by_hash": True})
    fee = int(receipt["gasUsed"]) * int(receipt.get("effectiveGasPrice") or 0)
    back = (
        {"walked_back": "mined after all", "was": tx.state}
        if tx.state in (S.REPLACED, S.DROPPED)
        else {}
    )
    move_tx(
        tx,
        S.CONFIRMED,
        {
            "block_number": block_number,
            "block_hash": block_hash,
            "head": head,
            "status": int(receipt["status"]),
            "gas_used": int(receipt["gasUsed"]),
            **back,
        },
        block_number=block_number,
        block_hash=block_hash,
        fee_paid=fee,
        confirmations=confirmations,
    )


def keep_in_mempool(
    w3: Any, chain: EvmChain, newest: ChainTransaction, txs, result: Track, *, now
) -> ChainTransaction:
    """The newest transaction (the one that pays most) must be known to the network: seen ->
    PENDING; signed but never handed over, gone from the mempool, or not seen within the
    broadcast window -> its stored bytes again."""
    if policy.mempool_step(
        state=str(newest.state), in_pool=False, since_broadcast=None, window=0
    ) == (policy.Step.SIGN):
        newest = sign_stored(newest, signer_of_tx(newest))
    seen = rpc_read("transaction", client.transaction_of, w3, newest.tx_hash)
    since = (now - newest.broadcast_at).total_seconds() if newest.broadcast_at else None
    step = policy.mempool_step(
        state=str(newest.state),
        in_pool=seen is not None,
        since_broadcast=since,
        window=chain.broadcast_window_seconds,
    )
    if step == policy.Step.MARK_PENDING:
        move_tx(newest, S.PENDING, {"seen": "mempool"})
    if step in (policy.Step.MARK_PENDING, policy.Step.KEEP):
        return newest
    if step == policy.Step.WAIT:
        result.detail["waiting_for"] = "the network to see the transaction"
        return newest
    reason = policy.RESEND_REASONS[str(newest.state)]
    try:
        sent = send_stored(w3, newest)
    except Exception as exc:
        if client.is_network_error(exc):
            raise TransientError(f"re-broadcast: {exc}"[:500]) from exc
        raise
    evidence = {"rebroadcast": reason, "rpc": sent.outcome, "message": sent.message}
    answer = policy.after_send(sent.outcome)
    if answer == policy.Answer.BROADCAST:
        if newest.state == S.BROADCAST:
            chain_transaction_record(
                chain_transaction_id=newest.pk,
                actor=ACTOR,
                evidence=evidence,
                fields={"broadcast_at": timezone.now()},
            )
        else:
            move_tx(newest, S.BROADCAST, evidence)
        result.detail["rebroadcast"] = newest.tx_hash
        if reason == "left the mempool":
            result.attention = result.attention or {
                "reason": "dropped",
                "message": f"{newest.tx_hash} left the mempool: re-broadcast from its stored bytes",
            }
        return newest
    if answer == policy.Answer.CHECK_NONCE:
        _nonce_used(w3, chain, newest, txs, result, message=sent.message, now=now)
        return newest
    if answer == policy.Answer.WAIT_LOWER:
        result.detail["waiting_for"] = f"the sender's nonces below {newest.nonce} ({sent.message})"
        return newest
    chain_transaction_record(
        chain_transaction_id=newest.pk, actor=ACTOR, evidence={"broadcast_refused": sent.message}
    )
    result.detail["broadcast_refused"] = sent.message
    if not client.says(sent.message, client.UNDERPRICED):
        result.attention = {
            "reason": "broadcast_refused",
            "message": f"the node refuses {newest.tx_hash}: {sent.message}",
        }
    return newest


def _nonce_used(
    w3: Any,
    chain: EvmChain,
    newest: ChainTransaction,
    txs: list[ChainTransaction],
    result: Track,
    *,
    message: str,
    now,
) -> None:
    """The node says the nonce of our stored bytes is used and no receipt of ours was served:
    the facts are read and the pure rule (``venues.evm.tx.policy``) decides. Only a nonce used by
    another transaction at finality, seen so at two looks a window apart, drops ours."""
    from venues.evm.tx.policy import NonceFacts, Verdict, verdict

    since = _created_head(txs[0])
    spent = nonce_spender(w3, newest.sender, int(newest.nonce), since=since, chain=chain)
    spent["message"] = message
    ours = bool(spent["by"]) and (
        any(tx.tx_hash == spent["by"] for tx in txs)
        or ChainTransaction.objects.filter(chain=newest.chain, tx_hash=spent["by"]).exists()
    )
    spent["ours"] = ours
    noted = (
        newest.events.filter(
            evidence__nonce_spent__by=spent["by"], evidence__nonce_spent__ours=False
        )
        .order_by("at")
        .values_list("at", flat=True)
        .first()
        if spent["by"] and not ours
        else None
    )
    facts = NonceFacts(
        nonce=int(newest.nonce),
        nonce_latest=spent["nonce_latest"],
        nonce_finalized=spent["nonce_finalized"],
        spent_by=spent["by"],
        ours=ours,
        spent_block=spent["block"]["number"] if spent["block"] else None,
        finalized_block=spent["finalized"]["number"],
        noted_at=noted,
        now=now,
        window_seconds=chain.broadcast_window_seconds,
        watch_seconds=chain.post_final_watch,
    )
    decided = verdict(facts)
    if decided == Verdict.DROP and chain.rpc_endpoints:
        # Absence is concluded only if no endpoint of the chain contradicts it.
        from dataclasses import replace

        from venues.evm.endpoints import absence_cross_check

        check = absence_cross_check(
            chain,
            hashes=[tx.tx_hash for tx in txs if tx.tx_hash],
            sender=newest.sender,
            nonce=int(newest.nonce),
            spent_block=spent["block"],
        )
        spent["cross_check"] = check.evidence()
        facts = replace(
            facts,
            receipt_anywhere=check.receipt_anywhere,
            contradicted=check.contradiction is not None,
        )
        decided = verdict(facts)
        if decided != Verdict.DROP:
            # The endpoints disagree about the chain (or one cannot say): nobody concludes,
            # and a person is told at once rather than when the node has been stuck long.
            why = check.contradiction or "another endpoint serves a receipt of ours"
            result.attention = result.attention or {
                "reason": "venue",
                "message": f"nonce {newest.nonce} of {newest.sender} on {chain.name}: the "
                f"primary endpoint says {spent['by']} used it, but {why}; not concluded",
            }
    spent["verdict"] = str(decided)
    result.detail["nonce_spent"] = spent
    if decided == Verdict.DROP:
        for tx in txs:
            if tx.state in LIVE_TX_STATES:
                move_tx(tx, S.DROPPED, {"nonce_spent": spent, "first_seen_at": noted.isoformat()})
        result.status = "dropped"
        result.attention = {
            "reason": "dropped",
            "message": f"nonce {newest.nonce} of {newest.sender} was used by {spent['by']}, "
            f"a transaction QTG did not sign (final at block {spent['finalized']['number']})",
        }
        return
    already = newest.events.filter(
        evidence__nonce_spent__by=spent["by"],
        evidence__nonce_spent__verdict=str(decided),
        evidence__nonce_spent__block__hash=(spent["block"] or {}).get("hash"),
    ).exists()
    if (decided in (Verdict.MINED, Verdict.NOTE) or "cross_check" in spent) and not already:
        chain_transaction_record(
            chain_transaction_id=newest.pk, actor=ACTOR, evidence={"nonce_spent": spent}
        )
    result.detail["waiting_for"] = {
        Verdict.MINED: (
            "the primary endpoint to agree with another that serves a receipt of ours"
            if facts.receipt_anywhere and not facts.ours
            else f"the receipt of {spent['by']} (mined, not served by the node yet)"
        ),
        Verdict.RESEND: "the node to accept the stored bytes again",
        Verdict.WAIT: f"finality of the block that used nonce {newest.nonce}"
        if noted is None
        else f"the end of the watch over {spent['by']} (final since {noted.isoformat()})",
        Verdict.NOTE: "a second look at the transaction that used the nonce",
    }[decided]


def _created_head(tx: ChainTransaction) -> int:
    """The head block when ``tx`` was created (its first event's evidence), 0 if unknown."""
    first = tx.events.order_by("id").values_list("evidence", flat=True).first() or {}
    return int(first.get("head") or 0)


def _maybe_bump(w3: Any, chain: EvmChain, newest: ChainTransaction, result: Track, *, now) -> None:
    """A fee bump of a transaction stuck longer than ``replace_after_seconds``: same nonce,
    both fees raised by the chain's rule (at least 10 %), a new transaction that competes
    with the old. Only the sender's lowest unconfirmed nonce is bumped (bumping N while N-1
    is stuck is pointless); above the fee cap, nothing is sent and an operator is told."""
    since = newest.pending_at or newest.signed_at or newest.created_at

    def step(*, lower: bool = False, used: int | None = None) -> policy.Bump:
        return policy.bump_step(
            stuck_seconds=(now - since).total_seconds(),
            replace_after=chain.replace_after_seconds,
            lower_unconfirmed=lower,
            nonce=int(newest.nonce),
            used_at_head=used,
        )

    if step() == policy.Bump.NOT_YET:
        return
    lower = (
        ChainTransaction.objects.filter(
            chain=newest.chain,
            sender=newest.sender,
            nonce__lt=newest.nonce,
            state__in=[S.SIGNED, S.BROADCAST, S.PENDING],
        )
        .order_by("nonce")
        .values_list("nonce", flat=True)
        .first()
    )
    if step(lower=lower is not None) == policy.Bump.WAIT_LOWER:
        result.detail["waiting_for_nonce"] = lower
        return
    used = int(rpc_read("nonce", w3.eth.get_transaction_count, newest.sender, "latest"))
    if step(used=used) == policy.Bump.WAIT_RECEIPT:
        # The nonce is used at the head (by one of ours whose receipt this node does not
        # serve yet, or by another): a replacement could never be mined. Wait for the facts.
        result.detail["waiting_for"] = (
            f"the receipt of the transaction that used nonce {newest.nonce}"
        )
        return
    fees_now = evm_fees(newest)
    old_max, old_tip = fees_now["max_fee_per_gas"], fees_now["max_priority_fee_per_gas"]
    base = int(rpc_read("latest block", w3.eth.get_block, "latest")["baseFeePerGas"])
    new_tip = chain.bumped(old_tip)
    new_max = max(chain.bumped(old_max), 2 * base + new_tip)
    if new_max > chain.max_fee_wei:
        if chain.bumped(old_max) > chain.max_fee_wei or chain.max_fee_wei < base + new_tip:
            result.attention = {
                "reason": "fee_cap",
                "message": f"{newest.tx_hash} is stuck and a fee bump would pass the cap of "
                f"{chain.max_fee_wei / GWEI} gwei on {chain.name}",
                "max_fee_wei": old_max,
                "cap_wei": chain.max_fee_wei,
                "base_fee_wei": base,
            }
            result.detail["fee_cap"] = True
            return
        new_max = chain.max_fee_wei
    unsigned = {
        **newest.unsigned,
        "maxFeePerGas": str(new_max),
        "maxPriorityFeePerGas": str(new_tip),
    }
    replacement = chain_transaction_create(
        chain=newest.chain,
        sender=newest.sender,
        nonce=newest.nonce,
        unsigned=unsigned,
        actor=ACTOR,
        movement_id=newest.movement_id,
        node_id=newest.node_id,
        replaces=newest,
        family="evm",
        detail={
            "gas_limit": fees_now["gas_limit"],
            "max_fee_per_gas": new_max,
            "max_priority_fee_per_gas": new_tip,
        },
        evidence={
            "fee_bump": {"replaces": newest.tx_hash, "old_max_fee": old_max, "base_fee": base},
            "stuck_since": since.isoformat(),
        },
    )
    replacement = sign_stored(replacement, signer_of_tx(replacement))
    try:
        sent = send_stored(w3, replacement)
    except Exception as exc:
        if client.is_network_error(exc):
            return  # stored and signed: the next look broadcasts it
        raise
    if sent.outcome in ("sent", "known"):
        move_tx(replacement, S.BROADCAST, {"rpc": sent.outcome, "fee_bump_of": newest.tx_hash})
    else:
        chain_transaction_record(
            chain_transaction_id=replacement.pk,
            actor=ACTOR,
            evidence={"broadcast_refused": sent.message},
        )
    result.detail["fee_bump"] = {"replacement": replacement.tx_hash, "max_fee_wei": new_max}


def follow(w3: Any, chain: EvmChain, tx: ChainTransaction, *, head: int, now) -> None:
    """One look at a transaction no node owns (a nonce filler, the sender's CCTP allowance
    approve), by the same steps as a node's: CREATED -> signed; mined -> CONFIRMED
    (FINALIZED at the chain's finality, the one rule); a CONFIRMED one whose block left the
    canonical chain -> PENDING; else kept known to the network from its stored bytes (its
    nonce used by someone else -> the nonce verdict, DROPPED only at finality)."""
    if tx.state == S.CREATED:
        tx = sign_stored(tx, signer_of_tx(tx))
    receipt = rpc_read("receipt", client.receipt_of, w3, tx.tx_hash)
    [plan_tx] = [_seen(tx, {tx.pk: receipt})]
    plan = policy.after_receipts([plan_tx])
    if plan.walk_back:
        walk_back(tx, receipt, head)
    if plan.winner is not None:
        confirm(tx, receipt, head, chain)
        return
    if plan.mempool is not None:
        keep_in_mempool(w3, chain, tx, [tx], Track("waiting", original=tx), now=now)
