"""No client can tie a hardcap up with movements nobody approved: a limit on how many of its
movements await approval and on the share of each hardcap they hold (settings, overridden per
user or group), shown to operators per client."""

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from movements.services import movement_approve
from movements.states import RequestState
from qtg.core.actors import Actor
from reservations.models import ClientLimit, Hardcap
from reservations.services import hardcap_ensure
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

EURC = "EURC"


@pytest.fixture
def limits(settings):
    settings.QTG_CLIENT_MAX_PENDING_COUNT = 2
    settings.QTG_CLIENT_MAX_PENDING_SHARE = "0.25"
    return hardcap_ensure(asset=EURC, max_in_flight="1000")


def test_a_client_cannot_hold_more_than_its_share_of_a_cap_awaiting_approval(limits, make_movement):
    first = make_movement(asset=EURC, amount="200")
    refused = make_movement(asset=EURC, amount="100")

    assert first.request_state == RequestState.PENDING_APPROVAL
    assert refused.request_state == RequestState.FAILED
    assert "awaiting approval may hold at most 25" in refused.failure_reason


def test_the_whole_cap_for_a_year_is_refused_to_a_client_without_permissions(limits, make_movement):
    refused = make_movement(asset=EURC, amount="1000")

    assert refused.request_state == RequestState.FAILED
    other = make_movement(asset=EURC, amount="200", by=make_user("someone-else"))
    assert other.request_state == RequestState.PENDING_APPROVAL


def test_approved_movements_no_longer_count_against_the_client(limits, make_movement):
    first = make_movement(asset=EURC, amount="250")
    movement_approve(request=first, actor=Actor.system("tests-approver"))

    assert make_movement(asset=EURC, amount="250").request_state == RequestState.PENDING_APPROVAL


def test_a_client_may_have_only_so_many_movements_awaiting_approval(limits, make_movement):
    make_movement(asset=EURC, amount="1")
    make_movement(asset=EURC, amount="1")

    refused = make_movement(asset=EURC, amount="1")

    assert refused.request_state == RequestState.FAILED
    assert "2 movements of yours already await approval" in refused.failure_reason


def test_a_user_s_own_limit_overrides_the_settings(limits, make_movement, creator):
    ClientLimit.objects.create(user=creator, max_pending_count=5, max_pending_share="1")

    for _ in range(3):
        movement = make_movement(asset=EURC, amount="300")

    assert movement.request_state == RequestState.PENDING_APPROVAL


def test_the_most_generous_group_limit_applies(limits, make_movement, creator):
    small, large = Group.objects.create(name="small"), Group.objects.create(name="large")
    ClientLimit.objects.create(group=small, max_pending_share="0.1")
    ClientLimit.objects.create(group=large, max_pending_share="0.5")
    creator.groups.add(small, large)

    assert make_movement(asset=EURC, amount="500").request_state == RequestState.PENDING_APPROVAL
    assert make_movement(asset=EURC, amount="1").request_state == RequestState.FAILED


def test_operators_see_the_pending_holds_per_client_on_the_hardcap(
    limits, make_movement, client, admin_user
):
    make_movement(asset=EURC, amount="120")
    make_movement(asset=EURC, amount="80", by=make_user("bot-2"))
    client.force_login(admin_user)

    page = client.get(
        reverse("admin:reservations_hardcap_change", args=[Hardcap.objects.get(asset=EURC).pk])
    ).content.decode()

    assert "creator: 1 movement(s), 120" in page
    assert "bot-2: 1 movement(s), 80" in page
