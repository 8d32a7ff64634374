"""Examples published in the OpenAPI schema, one set per operation (illustrative values)."""

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
        }
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
    value=[
        {
            "node_key": None,
            "kind": "transition",
            "old_state": "PENDING_APPROVAL",
            "new_state": "APPROVED",
            "actor_type": "user",
            "actor_id": "alice",
            "detail": {},
            "created_at": "2026-12-01T10:02:10Z",
        }
    ],
    response_only=True,
)
ROUTE_TEMPLATES = OpenApiExample(
    "Route templates",
    value=[
        {
            "key": "cex_to_cex",
            "version": 1,
            "name": "Exchange to exchange",
            "description": "Withdraw from one exchange, observe the deposit at the other.",
            "nodes": [
                {"key": "withdraw", "kind": "ACTION", "has_side_effect": True},
                {"key": "observe_deposit", "kind": "OBSERVE", "has_side_effect": False},
            ],
            "edges": [{"source": "withdraw", "target": "observe_deposit"}],
        }
    ],
    response_only=True,
)

TEMPLATES = OpenApiExample(
    "Templates",
    value=[
        {
            "key": "cex_to_cex",
            "version": 1,
            "name": "Exchange to exchange",
            "description": "Withdraw from the source exchange, watch the withdrawal settle, "
            "then watch the deposit arrive at the destination exchange.",
            "nodes": [
                {"key": "withdraw", "kind": "ACTION", "has_side_effect": True},
                {"key": "withdraw_observe", "kind": "OBSERVE", "has_side_effect": False},
                {"key": "deposit_observe", "kind": "OBSERVE", "has_side_effect": False},
            ],
            "edges": [
                {"source": "withdraw", "target": "withdraw_observe"},
                {"source": "withdraw_observe", "target": "deposit_observe"},
            ],
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
        }
    ],
    response_only=True,
)
VENUES = OpenApiExample(
    "Venues",
    value=[
        {
            "name": "sandbox-exchange-a",
            "kind": "listed",
            "chain": None,
            "chain_kind": None,
            "exchange": None,
            "assets": None,
        },
        {
            "name": "treasury",
            "kind": "chain_account",
            "chain": "ethereum",
            "chain_kind": "evm",
            "exchange": None,
            "assets": ["ETH", "USDC"],
        },
    ],
    response_only=True,
)

_PROBLEMS: dict[int, tuple[str, str, dict[str, Any]]] = {
    400: ("invalid", "the request is invalid", {"amount": ["This field is required."]}),
    401: ("not_authenticated", "Authentication credentials were not provided.", {}),
    403: ("permission_denied", "alice may not approve a movement she created", {}),
    404: ("not_found", f"movement {MOVEMENT_ID} does not exist", {}),
    409: ("conflict", "a node is in flight", {"current_state": "EXECUTING"}),
    415: ("unsupported_media_type", 'Unsupported media type "text/plain" in request.', {}),
    422: (
        "idempotency_key_reused",
        "this Idempotency-Key was already used with a different request body",
        {"idempotency_key": "order-1842", "movement_id": MOVEMENT_ID},
    ),
    413: ("payload_too_large", "The request body is larger than 65536 bytes.", {}),
    429: ("throttled", "Request was throttled. Expected available in 3 seconds.", {}),
    500: (
        "server_error",
        "an unexpected error occurred: quote the request id when you report it",
        {"request_id": "2f8d5c3e-7b1a-4e0f-9c6d-0a1b2c3d4e5f"},
    ),
    503: (
        "service_unavailable",
        "the database is unavailable: retry later",
        {"request_id": "2f8d5c3e-7b1a-4e0f-9c6d-0a1b2c3d4e5f"},
    ),
}


def problem(status: int) -> OpenApiExample:
    """An example problem document for ``status``."""
    from http import HTTPStatus

    code, detail, details = _PROBLEMS[status]
    return OpenApiExample(
        f"Problem {status}",
        value={
            "type": f"urn:qtg:problem:{code}",
            "title": HTTPStatus(status).phrase,
            "status": status,
            "detail": detail,
            "code": code,
            "details": details,
            "message": detail,
        },
        response_only=True,
        status_codes=[str(status)],
    )
