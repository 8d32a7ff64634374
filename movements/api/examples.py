"""Examples published in the OpenAPI schema, one set per operation: what the API answers,
complete (tests/api/test_schema_examples.py validates each against its schema). A list
operation's example is one item: drf-spectacular lists it (and pages it)."""

from typing import Any

from drf_spectacular.utils import OpenApiExample

MOVEMENT_ID = "0b6f3c52-6a5e-4f3e-9d55-2f1e8c1b7a10"

MOVEMENT_VALUE: dict[str, Any] = {
    "id": MOVEMENT_ID,
    "request_state": "EXECUTING",
    "template": "cex_to_cex",
    "template_version": 1,
    "asset": "USDC",
    "amount": "1500.25",
    "source": "sandbox-exchange-a",
    "destination": "sandbox-exchange-b",
    "params": {},
    "current_frontier": ["withdraw"],
    "expires_at": "2026-12-01T12:00:00Z",
    "created_at": "2026-12-01T10:00:00Z",
    "updated_at": "2026-12-01T10:02:11Z",
    "created_by": "treasury-bot",
    "approved_by": "alice",
    "approved_at": "2026-12-01T10:02:10Z",
    "approvals_required": 1,
    "approvals": [{"by": "alice", "at": "2026-12-01T10:02:10Z"}],
    "failure_reason": None,
    "withdrawn_by": None,
    "reservation": {"state": "HELD", "amount": "1500.25"},
    "nodes": [
        {
            "node_key": "withdraw",
            "kind": "ACTION",
            "node_state": "SUBMITTED",
            "has_side_effect": True,
            "attempt": 1,
            "external_ref": "wd-88121",
            "state_changed_at": "2026-12-01T10:02:11Z",
        },
        {
            "node_key": "withdraw_observe",
            "kind": "OBSERVE",
            "node_state": "BLOCKED",
            "has_side_effect": False,
            "attempt": 0,
            "external_ref": None,
            "state_changed_at": "2026-12-01T10:00:00Z",
        },
        {
            "node_key": "deposit_observe",
            "kind": "OBSERVE",
            "node_state": "BLOCKED",
            "has_side_effect": False,
            "attempt": 0,
            "external_ref": None,
            "state_changed_at": "2026-12-01T10:00:00Z",
        },
    ],
    "attention": [],
}

MOVEMENT = OpenApiExample("A movement", value=MOVEMENT_VALUE, response_only=True)
CREATE_REQUEST = OpenApiExample(
    "Create",
    value={
        "template": "cex_to_cex",
        "asset": "USDC",
        "amount": "1500.25",
        "source": "sandbox-exchange-a",
        "destination": "sandbox-exchange-b",
        "params": {},
        "expires_in_seconds": 3600,
    },
    request_only=True,
)
REASON_REQUEST = OpenApiExample(
    "Reason", value={"reason": "not budgeted this week"}, request_only=True
)
WITHDRAW_REQUEST = OpenApiExample(
    "Withdraw", value={"reason": "sent to the wrong destination"}, request_only=True
)
CANCEL_REQUEST = OpenApiExample(
    "Cancel",
    value={"reason": "wrong destination", "acknowledge_funds_in_transit": False},
    request_only=True,
)
RESUME_REQUEST = OpenApiExample(
    "Resume", value={"node_key": "manual_confirm", "note": "checked"}, request_only=True
)
AUDIT_TRAIL = OpenApiExample(
    "Audit trail",
    value={
        "node_key": None,
        "kind": "transition",
        "old_state": "PENDING_APPROVAL",
        "new_state": "APPROVED",
        "actor_type": "user",
        "actor_id": "alice",
        "detail": {},
        "created_at": "2026-12-01T10:02:10Z",
    },
    response_only=True,
)
# The cex_to_cex template as the API shows it (movements/route_templates/cex_to_cex.yaml).
CEX_TO_CEX_GRAPH: dict[str, Any] = {
    "key": "cex_to_cex",
    "version": 1,
    "name": "Exchange to exchange",
    "description": "Withdraw from the source exchange, watch the withdrawal settle, then watch "
    "the deposit arrive at the destination exchange.\n",
    "nodes": [
        {"key": "withdraw", "kind": "ACTION", "has_side_effect": True},
        {"key": "withdraw_observe", "kind": "OBSERVE", "has_side_effect": False},
        {"key": "deposit_observe", "kind": "OBSERVE", "has_side_effect": False},
    ],
    "edges": [
        {"source": "withdraw", "target": "withdraw_observe"},
        {"source": "withdraw_observe", "target": "deposit_observe"},
    ],
}
ROUTE_TEMPLATES = OpenApiExample("A route template", value=CEX_TO_CEX_GRAPH, response_only=True)
TEMPLATES = OpenApiExample(
    "A template",
    value={
        **CEX_TO_CEX_GRAPH,
        "assets": None,
        "params": [
            {
                "name": "network",
                "type": "string",
                "required": False,
                "default": "ethereum",
                "choices": None,
            }
        ],
    },
    response_only=True,
)
VENUES = [
    OpenApiExample(
        "A listed venue",
        value={
            "name": "sandbox-exchange-a",
            "kind": "listed",
            "chain": None,
            "chain_kind": None,
            "exchange": None,
            "assets": None,
        },
        response_only=True,
    ),
    OpenApiExample(
        "A chain account",
        value={
            "name": "treasury",
            "kind": "chain_account",
            "chain": "ethereum",
            "chain_kind": "evm",
            "exchange": None,
            "assets": ["ETH", "USDC"],
        },
        response_only=True,
    ),
]

REQUEST_ID = "2f8d5c3e-7b1a-4e0f-9c6d-0a1b2c3d4e5f"
# What each problem code says, as the API says it (detail, details).
_PROBLEMS: dict[str, tuple[str, dict[str, Any]]] = {
    "invalid": ("the request is invalid", {"amount": ["This field is required."]}),
    "parse_error": ("JSON parse error - nested too deeply", {}),
    "not_authenticated": ("Authentication credentials were not provided.", {}),
    "authentication_failed": ("Invalid token.", {}),
    "permission_denied": (
        "four-eyes: you cannot approve a movement you created",
        {},
    ),
    "not_found": (f"movement {MOVEMENT_ID} does not exist", {}),
    "conflict": (
        "cannot approve: the movement is EXECUTING",
        {"current_state": "EXECUTING", "allowed_states": ["PENDING_APPROVAL"]},
    ),
    "acknowledgement_required": (
        "withdraw completed: the funds are in transit. Cancelling stops watching them and "
        "keeps the reservation HELD; set acknowledge_funds_in_transit to confirm",
        {
            "current_state": "EXECUTING",
            "completed_side_effects": ["withdraw"],
            "acknowledgement": "acknowledge_funds_in_transit",
        },
    ),
    "idempotency_in_progress": (
        "a request with this Idempotency-Key is still being processed: retry it shortly",
        {"idempotency_key": "order-1842"},
    ),
    "unsupported_media_type": ('Unsupported media type "text/plain" in request.', {}),
    "idempotency_key_reused": (
        "this Idempotency-Key was already used with a different request body",
        {"idempotency_key": "order-1842", "movement_id": MOVEMENT_ID},
    ),
    "payload_too_large": ("The request body is larger than 65536 bytes.", {}),
    "throttled": ("Request was throttled. Expected available in 3 seconds.", {}),
    "server_error": (
        "an unexpected error occurred: quote the request id when you report it",
        {"request_id": REQUEST_ID},
    ),
    "service_unavailable": (
        "the database is unavailable: retry later",
        {"request_id": REQUEST_ID},
    ),
}


def problem(status: int, code: str) -> OpenApiExample:
    """An example problem document for ``status`` with ``code``."""
    from http import HTTPStatus

    detail, details = _PROBLEMS.get(code, (code.replace("_", " "), {}))
    return OpenApiExample(
        f"Problem {status}",
        value={
            "type": f"urn:qtg:problem:{code}",
            "title": HTTPStatus(status).phrase,
            "status": status,
            "detail": detail,
            "code": code,
            "details": details,
        },
        response_only=True,
        status_codes=[str(status)],
    )
