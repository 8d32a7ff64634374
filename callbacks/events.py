"""The callback event types a subscription can ask for."""

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
