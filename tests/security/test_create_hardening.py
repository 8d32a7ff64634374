"""What a client can send at create: a bounded body and params, known venues in one spelling
(so a hardcap scoped to a venue cannot be dodged), no sandbox faults while the sandbox is off,
an approval window no longer than the setting, and refusals that do not reveal how much money
the platform has in flight."""

import time
from datetime import timedelta

import pytest

from movements.models import MovementRequest
from movements.services import execution
from movements.states import NodeState, RequestState
from qtg.core.errors import InvalidInput
from reservations.models import Reservation
from reservations.services import hardcap_ensure
from sandbox.faults import UnknownFault, parse_fault
from tests.admin.helpers import change_url
from tests.api.conftest import MOVEMENTS, assert_error, create_body, post_create, post_json
from tests.conftest import make_user
from tests.movements.drive import node

pytestmark = pytest.mark.django_db

EURC = "EURC"  # no suite-wide hardcap: these tests set their own


# --- 6: body and params limits ---------------------------------------------------------------


def test_a_body_over_the_limit_is_a_413_read_no_further(integration_client, settings):
    settings.QTG_API_MAX_BODY_BYTES = 1024
    body = create_body(params={"note": "x" * 2000})

    response = post_json(integration_client, MOVEMENTS, body, HTTP_IDEMPOTENCY_KEY="big")

    assert_error(response, 413, "payload_too_large")


def test_a_body_under_the_limit_is_read(integration_client, settings):
    settings.QTG_API_MAX_BODY_BYTES = 1024

    assert post_create(integration_client).status_code == 201


def test_params_over_their_limit_are_refused(integration_client, settings):
    settings.QTG_API_MAX_PARAMS_BYTES = 100

    response = post_create(integration_client, create_body(params={"note": "x" * 200}))

    body = assert_error(response, 400, "invalid")
    assert "larger than 100 bytes" in str(body["details"]["params"])


# --- 7: sandbox faults -----------------------------------------------------------------------


def test_sandbox_faults_are_refused_at_create_when_the_sandbox_is_off(make_movement, settings):
    settings.QTG_SANDBOX_ENABLED = False

    with pytest.raises(InvalidInput) as refused:
        make_movement(params={"sandbox": {"withdraw": "fail"}})

    assert "sandbox is switched off" in str(refused.value.details["params"])


@pytest.mark.parametrize("raw", ["delay:inf", "delay:nan", "delay:1e9", "delay:-1", "delay:3601"])
def test_a_delay_must_be_finite_and_bounded(raw):
    with pytest.raises(UnknownFault):
        parse_fault(raw)


def test_a_delay_on_a_submit_never_makes_the_worker_sleep(make_movement):
    movement = make_movement(approve=True, params={"sandbox": {"withdraw": "delay:30"}})

    started = time.monotonic()
    execution.dispatch_ready_nodes(owner="w", limit=1)

    assert time.monotonic() - started < 10
    assert node(movement, "withdraw").node_state == NodeState.COMPLETED


# --- 8: venue names --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spelling", ["SANDBOX-EXCHANGE-A", "sandbox-exchange-a.", " Sandbox-Exchange-A "]
)
def test_another_spelling_of_a_venue_meets_the_hardcap_scoped_to_it(make_movement, spelling):
    hardcap_ensure(asset=EURC, max_in_flight="1000000")
    hardcap_ensure(asset=EURC, source="sandbox-exchange-a", max_in_flight="100")

    movement = make_movement(asset=EURC, amount="500", source=spelling)

    assert movement.source == "sandbox-exchange-a"
    assert movement.request_state == RequestState.FAILED
    assert "hardcap EURC from sandbox-exchange-a" in movement.failure_reason
    assert not Reservation.objects.filter(request=movement).exists()


def test_a_hardcap_scope_is_stored_in_the_canonical_spelling():
    cap = hardcap_ensure(asset=EURC, source="SANDBOX-EXCHANGE-A.", max_in_flight="1")

    assert cap.source == "sandbox-exchange-a"


@pytest.mark.parametrize("field", ["source", "destination"])
def test_an_unknown_venue_is_refused_at_create(make_movement, field):
    with pytest.raises(InvalidInput) as refused:
        make_movement(**{field: "nowhere-exchange"})

    assert "unknown venue 'nowhere-exchange'" in str(refused.value.details[field])


def test_the_api_refuses_an_unknown_venue_and_takes_any_spelling_of_a_known_one(
    integration_client,
):
    unknown = post_create(integration_client, create_body(source="nowhere-exchange"))
    known = post_create(integration_client, create_body(destination="SANDBOX-EXCHANGE-B."))

    assert_error(unknown, 400, "invalid")
    assert known.status_code == 201
    assert known.json()["destination"] == "sandbox-exchange-b"


# --- 1 (window): the approval window is bounded ------------------------------------------------


def test_an_approval_window_longer_than_the_maximum_is_refused(make_movement, settings):
    settings.QTG_MAX_APPROVAL_TTL = timedelta(hours=24)

    with pytest.raises(InvalidInput) as refused:
        make_movement(expires_in=timedelta(hours=24, seconds=1))

    assert "at most 86400 seconds" in str(refused.value.details["expires_in"])
    assert make_movement(expires_in=timedelta(hours=24)).request_state == "PENDING_APPROVAL"


def test_the_api_refuses_a_year_long_approval_window(integration_client):
    response = post_create(integration_client, create_body(expires_in_seconds=365 * 24 * 3600))

    assert_error(response, 400, "invalid")


# --- 12: hardcap refusals do not reveal the amount in flight ---------------------------------


def test_a_client_refused_by_the_hardcap_does_not_learn_the_amount_in_flight(
    integration_client, make_movement, client
):
    hardcap_ensure(asset=EURC, max_in_flight="1000")
    # With a decimal point: a bare "777" turns up in timestamps' microseconds.
    make_movement(asset=EURC, amount="777.5")

    response = post_create(integration_client, create_body(asset=EURC, amount="500"))
    movement_id = response.json()["id"]
    events = integration_client.get(f"{MOVEMENTS}{movement_id}/events/")

    assert response.json()["request_state"] == "FAILED"
    assert "no room" in response.json()["failure_reason"]
    for text in (response.content.decode(), events.content.decode()):
        assert "777.5" not in text
        assert "in_flight" not in text

    # ... while an operator reads the figures on the movement page.
    client.force_login(make_user("olivia", "view_movementrequest", is_staff=True))
    page = client.get(change_url(MovementRequest.objects.get(pk=movement_id)))
    assert page.status_code == 200
    assert "777.5 already in flight" in page.content.decode()


def test_the_api_takes_a_chain_address_as_a_destination_in_the_spelling_its_chain_compares(
    integration_client,
):
    evm = post_create(
        integration_client,
        create_body(destination="0x52908400098527886E0F7030069857D2E4169EE7"),
    )
    solana = post_create(
        integration_client,
        create_body(destination="7EcDhSYGxXyscszYEp35KHN8vvw3svAuLKTzXwCFLtV"),
    )
    almost = post_create(integration_client, create_body(destination="0x5290840009852788"))

    assert evm.status_code == 201, evm.content
    assert evm.json()["destination"] == "0x52908400098527886e0f7030069857d2e4169ee7"
    assert solana.json()["destination"] == "7EcDhSYGxXyscszYEp35KHN8vvw3svAuLKTzXwCFLtV"
    assert_error(almost, 400, "invalid")
