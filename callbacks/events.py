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

# Sent by ``POST /api/v1/webhooks/{id}/test/`` only; no subscription asks for it.
TEST_EVENT_TYPE = "webhook_test"
