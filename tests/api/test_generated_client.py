"""The contract as an integrator meets it: a client generated with openapi-python-client from
the live schema (no warnings), then a scripted integration with it against a live server:
discover templates and venues, subscribe to every event, create, replay, read, list by cursor,
withdraw, follow the feed, and verify the webhooks with the stock standardwebhooks package.
A schema change that breaks a generated client fails here."""

import importlib
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from django.utils import timezone
from standardwebhooks import Webhook

from tests.api.conftest import token_for
from tests.callbacks.conftest import eager_tasks, receiver  # noqa: F401 (fixtures)
from tests.conftest import make_user

GENERATOR = Path(sys.executable).parent / "openapi-python-client"

# Never skipped: openapi-python-client is a dev dependency (pyproject), so CI always has it, and
# it generates offline (no network: its formatter is the ruff of the same environment).
pytestmark = pytest.mark.django_db(transaction=True)


def generate_client(schema: dict, where: Path):
    """Generate the client package ``qtg_client`` under ``where`` and import it."""
    assert GENERATOR.exists(), f"{GENERATOR} is missing: `make install` installs the dev extras"
    spec = where / "schema.json"
    spec.write_text(json.dumps(schema))
    env = {**os.environ, "PATH": f"{GENERATOR.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = [str(GENERATOR), "generate", "--path", str(spec)]
    command += ["--output-path", str(where / "qtg_client"), "--meta", "none"]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Warning" not in output, output
    sys.path.insert(0, str(where))
    importlib.invalidate_caches()
    return importlib.import_module("qtg_client")


def wait_for(predicate, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.usefixtures("eager_tasks")
def test_a_generated_client_integrates_end_to_end(live_server, receiver, tmp_path):  # noqa: F811
    bot = make_user("treasury-bot")
    token = token_for(bot)
    schema = httpx.get(
        f"{live_server.url}/api/schema/",
        headers={
            "Accept": "application/vnd.oai.openapi+json",
            "Authorization": f"Token {token}",
        },
        timeout=30,
    ).json()
    generate_client(schema, tmp_path)
    from qtg_client import AuthenticatedClient
    from qtg_client.api.discovery import templates_list, venues_list
    from qtg_client.api.events import events_list
    from qtg_client.api.movements import (
        movements_create,
        movements_list,
        movements_retrieve,
        movements_withdraw,
    )
    from qtg_client.api.webhooks import webhooks_create
    from qtg_client.models import (
        EventTypesEnum,
        MovementCreateInput,
        Problem,
        ReasonInput,
        WebhookInput,
    )

    try:
        client = AuthenticatedClient(base_url=live_server.url, token=token, prefix="Token")

        # Discover what may be sent, at run time.
        templates = {t.key: t for t in templates_list.sync(client=client)}
        assert "network" in [p.name for p in templates["cex_to_cex"].params]
        venues = [v.name for v in venues_list.sync(client=client)]
        assert {"sandbox-exchange-a", "sandbox-exchange-b"} <= set(venues)

        hook = webhooks_create.sync(
            client=client, body=WebhookInput(url=receiver.url, event_types=[EventTypesEnum("*")])
        )
        assert hook.secret.startswith("whsec_")

        since = timezone.now() - timedelta(seconds=1)
        body = MovementCreateInput(
            template="cex_to_cex",
            asset="USDC",
            amount="12.5",
            source="sandbox-exchange-a",
            destination="sandbox-exchange-b",
        )
        key = f"gen-{uuid.uuid4().hex}"
        created = movements_create.sync_detailed(client=client, body=body, idempotency_key=key)
        assert created.status_code == 201, created.content
        movement = created.parsed
        assert movement.request_state == "PENDING_APPROVAL"
        assert movement.withdrawn_by is None

        replay = movements_create.sync_detailed(client=client, body=body, idempotency_key=key)
        assert replay.status_code == 200
        assert replay.headers["Idempotency-Replayed"] == "true"
        assert replay.parsed.id == movement.id

        read = movements_retrieve.sync(client=client, id=movement.id)
        assert (read.id, read.amount, read.approvals_required) == (movement.id, "12.5", 1)

        page = movements_list.sync(client=client, updated_after=since)
        assert [m.id for m in page.results] == [movement.id]
        after = movements_list.sync(client=client, updated_after=since, cursor=page.next_cursor)
        assert after.results == []

        withdrawn = movements_withdraw.sync(
            client=client, id=movement.id, body=ReasonInput(reason="wrong amount")
        )
        assert (withdrawn.request_state, withdrawn.withdrawn_by) == ("REJECTED", "treasury-bot")
        assert withdrawn.reservation.state == "RELEASED"
        again = movements_withdraw.sync(
            client=client, id=movement.id, body=ReasonInput(reason="wrong amount")
        )
        assert isinstance(again, Problem)
        assert again.status == 409
        assert again.details["current_state"] == "REJECTED"

        # Follow the feed from the start.
        feed = events_list.sync(client=client)
        types = [event.type_ for event in feed.results]
        assert types[:2] == ["request_created", "approval_pending"]
        assert types[-1] == "request_rejected"
        assert events_list.sync(client=client, after=feed.next_cursor).results == []
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == "qtg_client" or m.startswith("qtg_client.")]:
            del sys.modules[name]

    # Every event was delivered, signed as Standard Webhooks says.
    assert wait_for(lambda: len(receiver.received) >= len(types))
    verified = [
        Webhook(hook.secret).verify(got.body, got.headers)["type"] for got in receiver.received
    ]
    assert sorted(verified) == sorted(types)
