"""Webhook callbacks. The movement lifecycle calls ``callback_enqueue`` (the seam) inside the
transaction of the state change that caused the event."""

from typing import Any

EVENT_TYPES = (
    "frontier_advanced",
    "request_completed",
    "request_failed",
    "request_attention",
    "request_approved",
    "request_rejected",
    "request_expired",
    "request_cancelled",
)


def callback_enqueue(*, request: Any, event_type: str, data: dict[str, Any] | None = None) -> None:
    """Record the event for every subscription that wants it (delivered after commit)."""
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown callback event type {event_type!r}")
