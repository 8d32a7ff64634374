"""The callback event types a subscription can ask for, and the catalogue that documents each
(when it is sent, what its ``context`` carries): the OpenAPI document's ``webhooks`` section
and the README are written from it."""

# Every event's ``data`` is the movement exactly as GET /api/v1/movements/{id}/ shows it, plus
# its ``sequence``; ``context`` is what the event adds: the fields below, each always present
# unless named in ``optional``. ``example`` is a real event of the type (the movement's state
# then, and the context it carried): the OpenAPI document publishes it.
PREVIOUS_STATE = ("string", "The state it left.")
NODE_ATTENTION_CONTEXT = {
    "node_key": ("string", "The node concerned."),
    "attention": ("string", "The reason (as in the movement's `attention[].reason`)."),
    "message": ("string", "What is wrong, for a person."),
    "since": ("string", "When the condition began (ISO 8601)."),
}
STUCK_NODE_EXAMPLE = {
    "node_key": "withdraw",
    "attention": "stuck",
    "message": "withdraw has been SUBMITTED for 1800 s, longer than its venue should take",
    "since": "2026-12-01T10:32:11Z",
}
EVENT_CATALOGUE: dict[str, dict] = {
    "request_created": {
        "when": "A movement was received (before it is validated): the first event of every "
        "movement.",
        "context": {},
        "example": {"state": "RECEIVED", "sequence": 1, "context": {}},
    },
    "approval_pending": {
        "when": "A movement waits for approval: it entered PENDING_APPROVAL, or it received "
        "an approval and still needs more.",
        "context": {
            "approvals_required": ("integer", "How many distinct approvers it needs."),
            "approvals_received": ("integer", "How many valid approvals it has so far."),
            "previous_state": (
                "string",
                "The state it left, when it entered PENDING_APPROVAL (absent after an "
                "approval short of the quorum).",
            ),
        },
        "optional": {"previous_state"},
        "example": {
            "state": "PENDING_APPROVAL",
            "sequence": 2,
            "context": {
                "previous_state": "VALIDATED",
                "approvals_required": 2,
                "approvals_received": 0,
            },
        },
    },
    "frontier_advanced": {
        "when": "Nodes of the plan woke up (READY or SKIPPED): the movement progressed.",
        "context": {
            "woken": ("array", "The keys of the nodes that woke."),
            "frontier": ("array", "The keys of the nodes that may run now."),
            "cause": ("string", "`approved` when the approval woke the first nodes."),
            "completed_node": ("string", "The node whose completion woke them."),
        },
        "optional": {"cause", "completed_node"},
        "example": {
            "state": "EXECUTING",
            "sequence": 5,
            "context": {
                "woken": ["withdraw_observe"],
                "frontier": ["withdraw_observe"],
                "completed_node": "withdraw",
            },
        },
    },
    "request_completed": {
        "when": "The movement COMPLETED: the funds arrived.",
        "context": {"previous_state": PREVIOUS_STATE},
        "example": {
            "state": "COMPLETED",
            "sequence": 8,
            "context": {"previous_state": "EXECUTING"},
        },
    },
    "request_failed": {
        "when": "The movement FAILED, safely (nothing moved, or what moved was accounted for).",
        "context": {"previous_state": PREVIOUS_STATE},
        "example": {
            "state": "FAILED",
            "sequence": 6,
            "context": {"previous_state": "EXECUTING"},
        },
    },
    "request_attention": {
        "when": "The movement needs a person: it entered WAITING_MANUAL_ACTION or "
        "MANUAL_INTERVENTION, or one of its nodes needs attention (kept for existing "
        "subscribers; the three events below tell the cases apart).",
        "context": {
            "previous_state": ("string", "The state it left (state changes only)."),
            **NODE_ATTENTION_CONTEXT,
        },
        "optional": {"previous_state", *NODE_ATTENTION_CONTEXT},
        "example": {
            "state": "WAITING_MANUAL_ACTION",
            "sequence": 6,
            "context": {"previous_state": "EXECUTING"},
        },
    },
    "request_waiting_manual_action": {
        "when": "The movement entered WAITING_MANUAL_ACTION: a manual gate waits for an "
        "operator (POST /movements/{id}/resume/).",
        "context": {"previous_state": PREVIOUS_STATE},
        "example": {
            "state": "WAITING_MANUAL_ACTION",
            "sequence": 7,
            "context": {"previous_state": "EXECUTING"},
        },
    },
    "request_manual_intervention": {
        "when": "The movement entered MANUAL_INTERVENTION: it stopped after a side effect and "
        "an operator must resolve it.",
        "context": {"previous_state": PREVIOUS_STATE},
        "example": {
            "state": "MANUAL_INTERVENTION",
            "sequence": 7,
            "context": {"previous_state": "EXECUTING"},
        },
    },
    "node_attention": {
        "when": "A node needs attention (waiting longer than its venue should take, a late "
        "answer contradicting a conclusion, ...); also in the movement's `attention`.",
        "context": NODE_ATTENTION_CONTEXT,
        "example": {"state": "EXECUTING", "sequence": 6, "context": STUCK_NODE_EXAMPLE},
    },
    "request_approved": {
        "when": "The movement was APPROVED (its quorum met): execution starts.",
        "context": {"previous_state": PREVIOUS_STATE},
        "example": {
            "state": "APPROVED",
            "sequence": 3,
            "context": {"previous_state": "PENDING_APPROVAL"},
        },
    },
    "request_rejected": {
        "when": "The movement was REJECTED by an approver, or withdrawn by its creator or a "
        "supervisor (then `withdrawn_by` and `reason` are in the context too).",
        "context": {
            "previous_state": PREVIOUS_STATE,
            "withdrawn_by": ("string", "Who withdrew it (a withdrawal only)."),
            "reason": ("string", "Why it was withdrawn (a withdrawal only)."),
        },
        "optional": {"withdrawn_by", "reason"},
        "example": {
            "state": "REJECTED",
            "sequence": 3,
            "context": {
                "previous_state": "PENDING_APPROVAL",
                "withdrawn_by": "treasury-bot",
                "reason": "sent to the wrong destination",
            },
        },
    },
    "request_expired": {
        "when": "Its approval window closed before it was approved: EXPIRED.",
        "context": {"previous_state": PREVIOUS_STATE},
        "example": {
            "state": "EXPIRED",
            "sequence": 3,
            "context": {"previous_state": "PENDING_APPROVAL"},
        },
    },
    "request_cancelled": {
        "when": "An operator CANCELLED the movement.",
        "context": {"previous_state": PREVIOUS_STATE},
        "example": {
            "state": "CANCELLED",
            "sequence": 7,
            "context": {"previous_state": "WAITING_MANUAL_ACTION"},
        },
    },
    # Not about one movement: a signed checkpoint of the audit chain (qtg/core/checkpoints.py),
    # sent to operator subscriptions only, for subscribers who keep their own copy.
    "audit.checkpoint": {
        "when": "A signed checkpoint of the audit chain was written (operator subscriptions "
        "only; not in the movement feed): `data` is the checkpoint as written to the file "
        "(docs/audit.md, docs/verify_checkpoints.py), not a movement.",
        "context": {},
        "data": "checkpoint",
        "example": {
            "context": {},
            "data": {
                "v": 1,
                "seq": 42,
                "prev": "9c1d4e2f0a7b3c5d6e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d",
                "at": "2026-12-01T11:00:00+00:00",
                "reason": "beat",
                "key_id": "k1",
                "tables": {
                    "movements.movementevent": {
                        "rows": 1842,
                        "last_id": 1842,
                        "legacy_through": 0,
                        "streams": {
                            "0b6f3c52-6a5e-4f3e-9d55-2f1e8c1b7a10": [
                                8,
                                1842,
                                "5e8d1f0c3b2a4d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6",
                            ]
                        },
                    }
                },
                "sig": "3b0c8f1e2d4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c",
            },
        },
    },
}

EVENT_TYPES = tuple(EVENT_CATALOGUE)
# Sent to operator subscriptions only (the admin's): a client's subscription cannot ask for them,
# and the movement feed never carries them.
OPERATOR_EVENT_TYPES = ("audit.checkpoint",)
CLIENT_EVENT_TYPES = tuple(t for t in EVENT_TYPES if t not in OPERATOR_EVENT_TYPES)

# ``event_types: ["*"]`` subscribes to every event type, present and future.
ALL_EVENT_TYPES = "*"

# Sent by ``POST /api/v1/webhooks/{id}/test/`` only; no subscription asks for it.
TEST_EVENT_TYPE = "webhook_test"
