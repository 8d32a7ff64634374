"""The worker services: claim nodes, call their executors outside any transaction, and map
what the executors returned or raised onto the spec's node transitions.

A worker works a batch at a time (``QTG_CLAIM_BATCH`` nodes), each step in short pieces:

1. ``claims``: a claim transaction locks the due nodes with their requests (SKIP LOCKED on
   PostgreSQL), gives them a lease and moves them (READY -> PREPARING/OBSERVING);
2. ``runs``: the executor calls, one node after another, with no transaction open and no lock
   held (``leases`` renews the leases of the nodes still waiting as the batch goes); a node
   enters SUBMITTING alone, right before its own submit, by a compare-and-set;
3. ``results``: result transactions re-lock the requests and then their nodes and apply each
   result whose lease is still ours: ``outcomes`` (pure rules) says which transition, and it
   is written with the rest of the batch. A late result is recorded as evidence only.

``sweeps`` runs these for the periodic tasks; ``leases`` also reaps the nodes of dead workers.
"""

from movements.services.execution.claims import (
    Claim,
    attempt_idempotency_key,
    claim_observable_nodes,
    claim_ready_node,
    claim_ready_nodes,
    claim_unknown_nodes,
    worker_identity,
)
from movements.services.execution.leases import reap_expired_leases
from movements.services.execution.runs import run_action, run_actions, run_observes, run_recovers
from movements.services.execution.sweeps import (
    dispatch_one,
    dispatch_ready_nodes,
    due_counts,
    first_claim_size,
    observe_submitted_nodes,
    oldest_due_since,
    recover_unknown_nodes,
)

__all__ = [
    "Claim",
    "attempt_idempotency_key",
    "claim_observable_nodes",
    "claim_ready_node",
    "claim_ready_nodes",
    "claim_unknown_nodes",
    "dispatch_one",
    "dispatch_ready_nodes",
    "due_counts",
    "first_claim_size",
    "observe_submitted_nodes",
    "oldest_due_since",
    "reap_expired_leases",
    "recover_unknown_nodes",
    "run_action",
    "run_actions",
    "run_observes",
    "run_recovers",
    "worker_identity",
]
