"""Concluded is watched too: a node FAILED while one of its signed transactions could still
be mined (dropped, replaced, never seen) is looked at for the chain's ``post_final_watch``
after it was concluded. A receipt of one of them at any endpoint walks the transaction back
(-> CONFIRMED, with every endpoint's answer as evidence) and contradicts the conclusion:
an operator is asked (``late_result``) and a movement still EXECUTING goes to
MANUAL_INTERVENTION with its reservation HELD (``movements.public``). Run by beat
(``venues.watch_concluded``)."""

import logging
from datetime import timedelta

from django.utils import timezone

from movements.public import NodeState, node_conclusion_contradicted
from qtg.core.actors import Actor
from venues.evm.config import evm_chains
from venues.evm.endpoints import _sightings
from venues.models import ChainTransaction, TxPurpose, TxState
from venues.transactions import chain_transaction_transition

S = TxState
ACTOR = Actor.system("venues.evm.watch")
log = logging.getLogger(__name__)
# Signed, never seen mined by QTG: what a concluded node may still see land.
UNMINED = (S.SIGNED, S.BROADCAST, S.PENDING, S.REPLACED, S.DROPPED)


def watch_concluded(*, now=None) -> int:
    """One look at every watched transaction of every EVM chain; how many were found mined."""
    now = now or timezone.now()
    found = 0
    for chain in evm_chains().values():
        if not chain.post_final_watch:
            continue
        since = now - timedelta(seconds=chain.post_final_watch)
        watched = ChainTransaction.objects.filter(
            chain=chain.name,
            purpose=TxPurpose.NODE,
            state__in=UNMINED,
            node__node_state=NodeState.FAILED,
            node__state_changed_at__gte=since,
        ).exclude(tx_hash="")
        for tx in watched.select_related("node"):
            try:
                found += _look(chain, tx)
            except Exception as exc:  # one chain's trouble never stops the others' watch
                log.warning("watching %s on %s: %s", tx.tx_hash, chain.name, exc, exc_info=True)
    return found


def _look(chain, tx: ChainTransaction) -> int:
    answers = _sightings(chain, [tx.tx_hash])
    seen = next((entry for entry, _ in answers if "receipt" in entry), None)
    if seen is None:
        return 0
    receipt = seen["receipt"]
    evidence = {
        "late_sighting": {
            "endpoint": seen["endpoint"],
            "block_number": receipt["block_number"],
            "block_hash": receipt["block_hash"],
            "endpoints": [entry for entry, _ in answers],
        },
        "node_concluded": str(tx.node.node_state),
        "walked_back": "mined after its node was concluded FAILED",
        "was": tx.state,
    }
    chain_transaction_transition(
        chain_transaction_id=tx.pk,
        to_state=S.CONFIRMED,
        actor=ACTOR,
        expected=[tx.state],
        evidence=evidence,
        fields={"block_number": receipt["block_number"], "block_hash": receipt["block_hash"]},
    )
    node_conclusion_contradicted(
        node_id=tx.node_id,
        reason="late_result",
        message=f"{tx.node.node_key} was concluded FAILED, but its transaction {tx.tx_hash} "
        f"is mined on {chain.name} (block {receipt['block_number']}): the money moved; "
        "check the chain and settle the movement by hand",
        evidence=evidence,
        actor=ACTOR,
    )
    return 1
