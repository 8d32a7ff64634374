"""A QTG integrator in a few lines: discover what may be sent, verify a webhook with the stock
Standard Webhooks library, follow the event feed with a cursor (for polling, or to catch up
after downtime), withdraw a movement still waiting for approval, and wait as `Retry-After`
says on a 429 or 503.

    pip install standardwebhooks httpx
    export QTG_URL=http://127.0.0.1:8000 QTG_TOKEN=... QTG_WEBHOOK_SECRET=whsec_...
    python integrator_example.py
"""

import json
import os
import time

import httpx
from standardwebhooks import Webhook, WebhookVerificationError

QTG_URL = os.environ.get("QTG_URL", "http://127.0.0.1:8000")
HEADERS = {"Authorization": f"Token {os.environ.get('QTG_TOKEN', '')}"}
seen: dict[str, int] = {}  # movement id -> highest sequence handled


def handle(event: dict) -> None:
    """Apply an event once and in order per movement (webhooks may repeat or arrive late)."""
    movement = event["data"]
    if movement.get("sequence", 0) <= seen.get(movement.get("id", ""), 0):
        return  # a duplicate or an older event: the newer state is already known
    seen[movement["id"]] = movement["sequence"]
    print(event["type"], movement["id"], movement["request_state"])


def receive_webhook(body: bytes, headers: dict[str, str]) -> int:
    """What your webhook endpoint does with a POST from QTG; returns the HTTP status."""
    try:
        event = Webhook(os.environ["QTG_WEBHOOK_SECRET"]).verify(body, headers)
    except WebhookVerificationError:
        return 400  # not from QTG, tampered with, or replayed (timestamp too old)
    if event["type"] != "webhook_test":
        handle(event)
    return 204


def call(method: str, path: str, **kwargs) -> httpx.Response:
    """One API call; throttled (429) or unavailable (503), it waits `Retry-After` and retries."""
    while True:
        response = httpx.request(method, f"{QTG_URL}{path}", headers=HEADERS, **kwargs)
        if response.status_code not in (429, 503):
            return response
        time.sleep(int(response.headers.get("Retry-After", "1")))


def discover() -> dict[str, list[str]]:
    """What `template`, `source` and `destination` may be now (read at run time, never baked
    into the client): the templates with the params each takes, and the venues."""
    templates = call("GET", "/api/v1/templates/").json()
    venues = call("GET", "/api/v1/venues/").json()
    return {
        "templates": [t["key"] for t in templates],
        "venues": [v["name"] for v in venues],
    }


def withdraw(movement_id: str, reason: str) -> dict:
    """Take back a movement still waiting for approval: the movement (now REJECTED), or the
    problem document (409 with `details.current_state` once it left PENDING_APPROVAL)."""
    return call(
        "POST", f"/api/v1/movements/{movement_id}/withdraw/", json={"reason": reason}
    ).json()


def follow_feed(cursor: str | None = None) -> None:
    """Read every event in order, then poll; keep the cursor to resume after a restart."""
    while True:
        params = {"after": cursor} if cursor else {}
        page = call("GET", "/api/v1/events/", params=params).json()
        for event in page["results"]:
            handle(event)
        cursor = page["next_cursor"] or cursor
        if not page["has_more"]:
            time.sleep(5)


if __name__ == "__main__":
    print(json.dumps({"following": f"{QTG_URL}/api/v1/events/"}))
    follow_feed()
