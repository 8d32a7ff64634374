"""A FAILED or MANUAL_INTERVENTION movement says which node put it there, and with what error."""

import pytest

from tests.execution.conftest import settle

pytestmark = pytest.mark.django_db


def test_a_refused_withdrawal_names_its_node_and_the_venue_error(make_movement):
    movement = settle(make_movement(approve=True, params={"sandbox": {"withdraw": "fail"}}))

    assert movement.request_state == "FAILED"
    assert movement.failure_reason.startswith("withdraw failed: ")
    assert "sandbox fault 'fail'" in movement.failure_reason


def test_a_rejected_deposit_after_the_withdrawal_names_the_deposit(make_movement):
    movement = settle(
        make_movement(approve=True, params={"sandbox": {"deposit_observe": "observe_fail"}})
    )

    assert movement.request_state == "MANUAL_INTERVENTION"
    assert movement.failure_reason.startswith("deposit_observe failed: ")


def test_a_withdrawal_recovery_proved_never_happened_says_so_with_its_evidence(make_movement):
    movement = settle(
        make_movement(approve=True, params={"sandbox": {"withdraw": "submit_timeout_lost"}})
    )

    assert movement.request_state == "FAILED"
    reason = movement.failure_reason
    assert reason.startswith("withdraw failed: recovery: the venue has no withdrawal with this key")
    assert "idempotency_key=qtg-" in reason
    assert "after 2 reads over" in reason
    assert "no error recorded" not in reason


def test_a_lease_expiry_replaces_an_earlier_attempts_error_as_the_nodes_reason(make_movement):
    from datetime import timedelta

    from django.utils import timezone

    from movements.models import MovementRequestNode
    from movements.services import execution

    make_movement(approve=True)
    claim = execution.claim_ready_node(owner="dying-worker")
    # An earlier dispatch's venue error is still on the node when this worker dies.
    MovementRequestNode.objects.filter(pk=claim.node_id).update(
        last_error="TransientError: exchange busy",
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )

    assert execution.reap_expired_leases() == 1

    reaped = MovementRequestNode.objects.get(pk=claim.node_id)
    assert reaped.node_state == "READY"
    assert reaped.last_error.startswith("the lease of worker dying-worker expired at ")
    assert "exchange busy" not in reaped.last_error


def test_an_operator_resolution_replaces_the_reason_on_the_movement(
    make_movement, django_user_model
):
    from movements.services import intervention_force_complete
    from qtg.core.actors import Actor
    from tests.execution.conftest import settle as settle_again

    movement = settle(
        make_movement(approve=True, params={"sandbox": {"deposit_observe": "observe_fail"}})
    )
    assert movement.request_state == "MANUAL_INTERVENTION"
    supervisor = django_user_model.objects.create_superuser("sup", "s@example.com", "pw")

    intervention_force_complete(
        request=movement, actor=Actor.for_user(supervisor), reason="deposit seen on the explorer"
    )

    movement = settle_again(movement)
    assert movement.request_state == "COMPLETED"
    assert movement.failure_reason == (
        "resolved by force-complete by sup: deposit seen on the explorer"
    )
