"""The callback event types a subscription can ask for, and the catalogue that documents each
(when it is sent, what its ``context`` carries): the OpenAPI document's ``webhooks`` section
and the README are written from it."""

# Every event's ``data`` is the movement exactly as GET /api/v1/movements/{id}/ shows it, plus
# its ``sequence``; ``context`` is what the event adds (the fields below, all always present).
EVENT_CATALOGUE: dict[str, dict] = {
    "request_created": {
        "when": "A movement was received (before it is validated): the first event of every "
        "movement.",
        "context": {},
    },
    "approval_pending": {
        "when": "A movement waits for approval: it entered PENDING_APPROVAL, or it received "
        "an approval and still needs more.",
        "context": {
            "approvals_required": ("integer", "How many distinct approvers it needs."),
            "approvals_received": ("integer", "How many valid approvals it has so far."),
        },
    },
    "frontier_advanced": {
        "when": "Nodes of the plan woke up (READY or SKIPPED): the movement progressed.",
        "context": {
            "woken": ("array", "The keys of the nodes that woke."),
            "frontier": ("array", "The keys of the nodes that may run now."),
        },
    },
    "request_completed": {
        "when": "The movement COMPLETED: the funds arrived.",
        "context": {"previous_state": ("string", "The state it left.")},
    },
    "request_failed": {
        "when": "The movement FAILED, safely (nothing moved, or what moved was accounted for).",
        "context": {"previous_state": ("string", "The state it left.")},
    },
    "request_attention": {
        "when": "The movement needs a person: it entered WAITING_MANUAL_ACTION or "
        "MANUAL_INTERVENTION, or one of its nodes needs attention (kept for existing "
        "subscribers; the three events below tell the cases apart).",
        "context": {
            "previous_state": ("string", "The state it left (state changes only)."),
        },
    },
    "request_waiting_manual_action": {
        "when": "The movement entered WAITING_MANUAL_ACTION: a manual gate waits for an "
        "operator (POST /movements/{id}/resume/).",
        "context": {"previous_state": ("string", "The state it left.")},
    },
    "request_manual_intervention": {
        "when": "The movement entered MANUAL_INTERVENTION: it stopped after a side effect and "
        "an operator must resolve it.",
        "context": {"previous_state": ("string", "The state it left.")},
    },
    "node_attention": {
        "when": "A node needs attention (waiting longer than its venue should take, a late "
        "answer contradicting a conclusion, ...); also in the movement's `attention`.",
        "context": {
            "node_key": ("string", "The node concerned."),
            "attention": ("string", "The reason (as in the movement's `attention[].reason`)."),
            "message": ("string", "What is wrong, for a person."),
            "since": ("string", "When the condition began (ISO 8601)."),
        },
    },
    "request_approved": {
        "when": "The movement was APPROVED (its quorum met): execution starts.",
        "context": {"previous_state": ("string", "The state it left.")},
    },
    "request_rejected": {
        "when": "The movement was REJECTED by an approver, or withdrawn by its creator or a "
        "supervisor (then `withdrawn_by` and `reason` are in the context too).",
        "context": {"previous_state": ("string", "The state it left.")},
    },
    "request_expired": {
        "when": "Its approval window closed before it was approved: EXPIRED.",
        "context": {"previous_state": ("string", "The state it left.")},
    },
    "request_cancelled": {
        "when": "An operator CANCELLED the movement.",
        "context": {"previous_state": ("string", "The state it left.")},
    },
    # Not about one movement: a signed checkpoint of the audit chain (qtg/core/checkpoints.py),
    # sent to operator subscriptions only, for subscribers who keep their own copy.
    "audit.checkpoint": {
        "when": "A signed checkpoint of the audit chain was written (operator subscriptions "
        "only; not in the movement feed): `data` is the checkpoint as written to the file "
        "(docs/audit.md, docs/verify_checkpoints.py), not a movement.",
        "context": {},
        "data": "checkpoint",
    },
}

EVENT_TYPES = tuple(EVENT_CATALOGUE)

# ``event_types: ["*"]`` subscribes to every event type, present and future.
ALL_EVENT_TYPES = "*"

# Sent by ``POST /api/v1/webhooks/{id}/test/`` only; no subscription asks for it.
TEST_EVENT_TYPE = "webhook_test"
