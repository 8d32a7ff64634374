"""The request lifecycle services end to end on the database."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from movements.models import MovementEvent, MovementRequest, MovementRequestNode
from movements.services import (
    expire_overdue_approvals,
    intervention_force_complete,
    intervention_force_fail,
    intervention_resume,
    intervention_retry,
    manual_gate_resume,
    movement_approve,
    movement_cancel,
    movement_create,
    movement_expire,
    movement_reject,
    node_resolve_unknown,
)
from movements.states import NodeState, RequestState
from qtg.core.actors import Actor
from qtg.core.errors import (
    AcknowledgementRequired,
    ActionRefused,
    IdempotencyConflict,
    InvalidInput,
    NotPermitted,
)
from tests.conftest import ALL_MOVEMENT_PERMS, make_user
from tests.movements.drive import node, run_node, states

NS = NodeState
RS = RequestState
pytestmark = pytest.mark.django_db


def request_events(request):
    return list(
        MovementEvent.objects.filter(request=request, node__isnull=True)
        .order_by("id")
        .values_list("old_state", "new_state")
    )


# --- create -----------------------------------------------------------------------------


def test_a_valid_request_is_received_validated_and_waits_for_approval(make_movement):
    request = make_movement("cex_to_cex", amount="1234.56789012345")

    assert request.request_state == RS.PENDING_APPROVAL
    assert request.amount == Decimal("1234.56789012345")
    assert request_events(request) == [
        ("", "RECEIVED"),
        ("RECEIVED", "VALIDATED"),
        ("VALIDATED", "PENDING_APPROVAL"),
    ]
    assert request.template.key == "cex_to_cex"
    assert request.params == {"network": "ethereum"}
    withdraw = request.plan_nodes.get(key="withdraw")
    assert withdraw.config["to"] == "sandbox-exchange-b"
    assert node(request, "withdraw").has_side_effect is True
    assert request.expires_at > timezone.now()


def test_an_unknown_template_fails_the_request_with_the_reason_recorded(make_movement):
    request = make_movement("teleport")

    assert request.request_state == RS.FAILED
    assert "unknown route template 'teleport'" in request.failure_reason
    assert request_events(request) == [("", "RECEIVED"), ("RECEIVED", "FAILED")]
    assert not request.nodes.exists()


def test_params_the_template_refuses_fail_the_request_without_a_plan(make_movement):
    request = make_movement("cex_to_cex", params={"network": 42})

    assert request.request_state == RS.FAILED
    assert "param 'network' must be a string" in request.failure_reason
    assert not request.plan_nodes.exists()


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"amount": "abc"}, "amount"),
        ({"amount": "-5"}, "amount"),
        ({"amount": 0.1}, "amount"),
        ({"amount": "0.0000000000000000001"}, "amount"),
        ({"asset": ""}, "asset"),
        ({"destination": "  "}, "destination"),
        ({"params": ["not", "an", "object"]}, "params"),
    ],
)
def test_malformed_input_is_refused_and_nothing_is_written(make_movement, overrides, field):
    with pytest.raises(InvalidInput) as caught:
        make_movement("cex_to_cex", **overrides)

    assert field in caught.value.details
    assert not MovementRequest.objects.exists()
    assert not MovementEvent.objects.exists()


def test_the_same_idempotency_key_and_body_returns_the_original(creator):
    actor = Actor.for_user(creator)
    body = dict(template="cex_to_cex", asset="USDC", amount="10", source="a", destination="b")

    first = movement_create(actor=actor, idempotency_key="k-1", **body)
    again = movement_create(actor=actor, idempotency_key="k-1", **body)

    assert again.pk == first.pk
    assert (first.replayed, again.replayed) == (False, True)
    assert MovementRequest.objects.count() == 1


def test_the_same_idempotency_key_with_another_body_is_a_conflict(creator):
    actor = Actor.for_user(creator)
    body = dict(template="cex_to_cex", asset="USDC", amount="10", source="a", destination="b")
    movement_create(actor=actor, idempotency_key="k-1", **body)

    with pytest.raises(IdempotencyConflict):
        movement_create(actor=actor, idempotency_key="k-1", **{**body, "amount": "11"})
    assert MovementRequest.objects.count() == 1


def test_idempotency_keys_are_scoped_to_the_client(creator, operator):
    body = dict(template="cex_to_cex", asset="USDC", amount="10", source="a", destination="b")

    a = movement_create(actor=Actor.for_user(creator), idempotency_key="k", **body)
    b = movement_create(actor=Actor.for_user(operator), idempotency_key="k", **body)

    assert a.pk != b.pk


# --- approve, reject, expire ---------------------------------------------------------------


def test_approving_wakes_the_roots_and_records_the_approver(make_movement, operator):
    request = make_movement()

    movement_approve(request=request, actor=Actor.for_user(operator))

    request.refresh_from_db()
    assert request.request_state == RS.APPROVED
    assert request.approved_by == operator
    assert states(request)["withdraw"] == NS.READY


def test_nobody_approves_a_movement_they_created(make_movement, operator):
    request = make_movement(by=operator)

    with pytest.raises(NotPermitted, match="four-eyes"):
        movement_approve(request=request, actor=Actor.for_user(operator))
    request.refresh_from_db()
    assert request.request_state == RS.PENDING_APPROVAL


def test_approving_twice_is_refused_the_second_time(make_movement, operator):
    request = make_movement()
    movement_approve(request=request, actor=Actor.for_user(operator))

    with pytest.raises(ActionRefused, match="APPROVED"):
        movement_approve(request=request, actor=Actor.for_user(operator))
    assert request.events.filter(new_state="APPROVED").count() == 1


def test_an_approval_past_its_window_is_refused(make_movement, operator):
    request = make_movement(expires_in=timedelta(seconds=1))
    MovementRequest.objects.filter(pk=request.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )

    with pytest.raises(ActionRefused, match="approval window closed"):
        movement_approve(request=request, actor=Actor.for_user(operator))


def test_rejecting_needs_a_reason_and_cancels_the_waiting_nodes(make_movement, operator):
    request = make_movement()
    with pytest.raises(InvalidInput):
        movement_reject(request=request, actor=Actor.for_user(operator), reason=" ")

    movement_reject(request=request, actor=Actor.for_user(operator), reason="wrong venue")

    request.refresh_from_db()
    assert request.request_state == RS.REJECTED
    assert request.failure_reason == "wrong venue"
    assert set(states(request).values()) == {NS.CANCELLED}


def test_expiry_waits_for_the_window_then_expires(make_movement, system):
    request = make_movement()
    with pytest.raises(ActionRefused, match="still open"):
        movement_expire(request=request, actor=system)

    MovementRequest.objects.filter(pk=request.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert expire_overdue_approvals(actor=system) == 1

    request.refresh_from_db()
    assert request.request_state == RS.EXPIRED


# --- cancel ------------------------------------------------------------------------------------


def test_cancel_is_refused_while_money_may_be_in_flight(make_movement, operator):
    request = make_movement("split_join", approve=True)
    run_node(request, "withdraw", NS.COMPLETED)
    run_node(request, "withdraw_observe", NS.OBSERVING)

    with pytest.raises(ActionRefused, match="in flight at withdraw_observe"):
        movement_cancel(request=request, actor=Actor.for_user(operator), reason="stop")
    request.refresh_from_db()
    assert request.request_state == RS.EXECUTING


def test_cancel_while_waiting_at_a_gate_cancels_blocked_and_ready_nodes(make_movement, operator):
    request = make_movement("cex_to_cex_gated", approve=True)
    run_node(request, "withdraw", NS.COMPLETED)

    # The withdrawal completed: the funds are in transit, so cancelling needs the
    # acknowledgement that nobody will watch them any more.
    with pytest.raises(AcknowledgementRequired):
        movement_cancel(request=request, actor=Actor.for_user(operator), reason="client asked")
    request.refresh_from_db()
    assert request.request_state == RS.WAITING_MANUAL_ACTION

    movement_cancel(
        request=request,
        actor=Actor.for_user(operator),
        reason="client asked",
        acknowledge_funds_in_transit=True,
    )

    request.refresh_from_db()
    assert request.request_state == RS.CANCELLED
    assert request.reservation.state == "HELD"
    assert states(request) == {
        "withdraw": NS.COMPLETED,
        "manual_release": NS.CANCELLED,
        "deposit_observe": NS.CANCELLED,
    }
    assert request.current_frontier == []


def test_a_pending_movement_cannot_be_cancelled_only_rejected(make_movement, operator):
    request = make_movement()

    with pytest.raises(ActionRefused, match="PENDING_APPROVAL"):
        movement_cancel(request=request, actor=Actor.for_user(operator), reason="stop")


# --- manual gate ----------------------------------------------------------------------------


def test_resuming_a_manual_gate_moves_the_frontier_past_it(make_movement, operator):
    request = make_movement("cex_to_cex_gated", approve=True)
    run_node(request, "withdraw", NS.COMPLETED)

    manual_gate_resume(request=request, actor=Actor.for_user(operator), note="checked")

    request.refresh_from_db()
    assert request.request_state == RS.EXECUTING
    assert states(request)["manual_release"] == NS.COMPLETED
    assert request.current_frontier == ["deposit_observe"]
    request = run_node(request, "deposit_observe", NS.COMPLETED)
    assert request.request_state == RS.COMPLETED


def test_the_creator_of_a_movement_cannot_release_its_manual_gate(make_movement):
    creator = make_user("gate-creator", *ALL_MOVEMENT_PERMS)
    request = make_movement("cex_to_cex_gated", approve=True, by=creator)
    run_node(request, "withdraw", NS.COMPLETED)

    with pytest.raises(NotPermitted, match="four-eyes"):
        manual_gate_resume(request=request, actor=Actor.for_user(creator), note="mine")

    assert states(request)["manual_release"] == NS.READY


def test_resuming_when_no_gate_waits_is_refused(make_movement, operator):
    request = make_movement("cex_to_cex", approve=True)
    run_node(request, "withdraw", NS.COMPLETED)

    with pytest.raises(ActionRefused, match="no manual gate"):
        manual_gate_resume(request=request, actor=Actor.for_user(operator))


# --- UNKNOWN and MANUAL_INTERVENTION ---------------------------------------------------------


def test_an_unknown_withdraw_resolved_as_completed_moves_on(make_movement, operator):
    request = make_movement("cex_to_cex", approve=True)
    request = run_node(request, "withdraw", NS.UNKNOWN)
    assert request.request_state == RS.EXECUTING  # only UNKNOWN, nothing completed: no change

    node_resolve_unknown(
        request=request,
        node_key="withdraw",
        outcome="COMPLETED",
        evidence={"txid": "0xabc"},
        external_ref="wd-42",
        actor=Actor.for_user(operator),
    )

    request.refresh_from_db()
    assert states(request)["withdraw"] == NS.COMPLETED
    assert node(request, "withdraw").external_ref == "wd-42"  # what the observer asks about
    assert request.current_frontier == ["withdraw_observe"]
    resolution = node(request, "withdraw").events.last()
    assert resolution.detail["evidence"] == {"txid": "0xabc"}
    assert resolution.actor_id == str(operator.pk)


def test_an_unknown_withdraw_is_resolved_only_as_what_its_executor_continues_from(
    make_movement, operator
):
    request = make_movement("cex_to_cex", approve=True)
    request = run_node(request, "withdraw", NS.UNKNOWN)
    actor = Actor.for_user(operator)

    # An exchange withdrawal is not watched after its submit: SUBMITTED would go nowhere.
    with pytest.raises(InvalidInput, match="COMPLETED, FAILED only"):
        node_resolve_unknown(
            request=request,
            node_key="withdraw",
            outcome="SUBMITTED",
            evidence="venue ticket 9",
            external_ref="wd-42",
            actor=actor,
        )
    # The observer after it looks the withdrawal up by its id.
    with pytest.raises(InvalidInput, match="needs its withdrawal id"):
        node_resolve_unknown(
            request=request, node_key="withdraw", outcome="COMPLETED", evidence="x", actor=actor
        )
    assert states(request)["withdraw"] == NS.UNKNOWN


def test_resolving_needs_evidence_and_an_unknown_node(make_movement, operator):
    request = make_movement("cex_to_cex", approve=True)
    run_node(request, "withdraw", NS.UNKNOWN)
    actor = Actor.for_user(operator)

    with pytest.raises(InvalidInput, match="evidence"):
        node_resolve_unknown(
            request=request, node_key="withdraw", outcome="FAILED", evidence="", actor=actor
        )
    with pytest.raises(InvalidInput, match="outcome"):
        node_resolve_unknown(
            request=request, node_key="withdraw", outcome="READY", evidence="x", actor=actor
        )
    with pytest.raises(ActionRefused, match="not UNKNOWN"):
        node_resolve_unknown(
            request=request,
            node_key="withdraw_observe",
            outcome="FAILED",
            evidence="x",
            actor=actor,
        )


@pytest.fixture
def intervention(make_movement):
    """A CEX movement whose withdraw completed and whose deposit observation failed."""
    request = make_movement("cex_to_cex", approve=True)
    run_node(request, "withdraw", NS.COMPLETED)
    run_node(request, "withdraw_observe", NS.COMPLETED)
    request = run_node(request, "deposit_observe", NS.FAILED)
    assert request.request_state == RS.MANUAL_INTERVENTION
    return request


def test_an_unknown_after_money_left_resolved_by_hand_returns_to_executing(make_movement, operator):
    request = make_movement("cex_to_cex", approve=True)
    run_node(request, "withdraw", NS.COMPLETED)
    request = run_node(request, "withdraw_observe", NS.UNKNOWN)
    assert request.request_state == RS.MANUAL_INTERVENTION

    node_resolve_unknown(
        request=request,
        node_key="withdraw_observe",
        outcome="SUBMITTED",
        evidence="exchange shows the withdrawal",
        actor=Actor.for_user(operator),
    )

    request.refresh_from_db()
    assert request.request_state == RS.EXECUTING


def test_resume_is_refused_while_a_node_is_still_failed(intervention, operator):
    with pytest.raises(ActionRefused, match="deposit_observe is FAILED"):
        intervention_resume(request=intervention, actor=Actor.for_user(operator), reason="go")


def test_retry_starts_a_new_attempt_and_keeps_the_failed_one_as_history(intervention, operator):
    intervention_retry(
        request=intervention,
        node_key="deposit_observe",
        actor=Actor.for_user(operator),
        reason="deposit was late",
    )

    intervention.refresh_from_db()
    assert intervention.request_state == RS.EXECUTING
    attempts = MovementRequestNode.objects.filter(request=intervention, node_key="deposit_observe")
    assert sorted(attempts.values_list("attempt", "node_state", "is_current")) == [
        (1, NS.FAILED, False),
        (2, NS.READY, True),
    ]
    assert intervention.current_frontier == ["deposit_observe"]

    request = run_node(intervention, "deposit_observe", NS.COMPLETED)
    assert request.request_state == RS.COMPLETED


def test_retry_only_takes_a_failed_node(intervention, operator):
    with pytest.raises(ActionRefused, match="only a FAILED node"):
        intervention_retry(
            request=intervention,
            node_key="withdraw",
            actor=Actor.for_user(operator),
            reason="again",
        )


def test_force_complete_ends_completed_with_the_reason(intervention, operator):
    intervention_force_complete(
        request=intervention,
        actor=Actor.for_user(operator),
        reason="deposit credited, confirmed by phone",
    )

    intervention.refresh_from_db()
    assert intervention.request_state == RS.COMPLETED
    event = intervention.events.filter(node__isnull=True, new_state="COMPLETED").get()
    assert event.detail["reason"] == "deposit credited, confirmed by phone"
    assert event.detail["forced"] is True
    # The operator's resolution replaces the venue's reason that brought it to them.
    assert intervention.failure_reason.startswith("resolved by force-complete by ")
    assert intervention.failure_reason.endswith(": deposit credited, confirmed by phone")


def test_force_fail_ends_failed(intervention, operator):
    intervention_force_fail(
        request=intervention, actor=Actor.for_user(operator), reason="funds returned by exchange"
    )

    intervention.refresh_from_db()
    assert intervention.request_state == RS.FAILED
    assert intervention.failure_reason == (
        f"resolved by force-fail by {operator.get_username()}: funds returned by exchange"
    )


def test_force_is_refused_while_a_node_is_running(make_movement, operator):
    request = make_movement("split_join", approve=True)
    run_node(request, "withdraw", NS.COMPLETED)
    run_node(request, "chain_observe", NS.OBSERVING)
    request = run_node(request, "withdraw_observe", NS.FAILED)
    assert request.request_state == RS.MANUAL_INTERVENTION

    with pytest.raises(ActionRefused, match="chain_observe is still running"):
        intervention_force_complete(request=request, actor=Actor.for_user(operator), reason="x")


# --- authorisation -------------------------------------------------------------------------

OPERATOR_ACTIONS = [
    ("approve_movement", lambda r, a: movement_approve(request=r, actor=a)),
    ("reject_movement", lambda r, a: movement_reject(request=r, actor=a, reason="r")),
    ("cancel_movement", lambda r, a: movement_cancel(request=r, actor=a, reason="r")),
    ("resume_manual_gate", lambda r, a: manual_gate_resume(request=r, actor=a)),
    (
        "resolve_unknown_node",
        lambda r, a: node_resolve_unknown(
            request=r, node_key="withdraw", outcome="FAILED", evidence="e", actor=a
        ),
    ),
    ("resume_intervention", lambda r, a: intervention_resume(request=r, actor=a, reason="r")),
    (
        "retry_node",
        lambda r, a: intervention_retry(request=r, node_key="withdraw", actor=a, reason="r"),
    ),
    (
        "force_complete_movement",
        lambda r, a: intervention_force_complete(request=r, actor=a, reason="r"),
    ),
    ("force_fail_movement", lambda r, a: intervention_force_fail(request=r, actor=a, reason="r")),
]


@pytest.mark.parametrize(
    ("permission", "action"), OPERATOR_ACTIONS, ids=[p for p, _ in OPERATOR_ACTIONS]
)
def test_every_operator_action_needs_its_permission(make_movement, permission, action):
    request = make_movement()
    outsider = make_user("outsider", "view_movementrequest")

    with pytest.raises(NotPermitted, match=permission):
        action(request, Actor.for_user(outsider))
    request.refresh_from_db()
    assert request.request_state == RS.PENDING_APPROVAL


def test_an_inactive_user_holds_no_permission(make_movement):
    request = make_movement()
    inactive = make_user("gone", "approve_movement", is_active=False)

    with pytest.raises(NotPermitted):
        movement_approve(request=request, actor=Actor.for_user(inactive))


def test_a_hardcap_refusal_keeps_its_figures_as_evidence_on_the_failed_request(make_movement):
    from reservations.services import hardcap_ensure

    hardcap_ensure(asset="EURC", max_in_flight="50")

    request = make_movement("cex_to_cex", asset="EURC", amount="80")

    assert request.request_state == RS.FAILED
    failed = request.events.get(new_state="FAILED")
    assert (failed.detail["code"], failed.detail["operator"]["cap"], failed.detail["asked"]) == (
        "reservation_refused",
        "50",
        "80",
    )


def test_an_amount_sqlite_would_round_is_refused_there_and_kept_exactly_on_postgres(
    make_movement, settings
):
    precise = "1234567890.1234567"  # 17 significant digits
    if settings.DB_IS_POSTGRES:
        assert make_movement(amount=precise).amount == Decimal(precise)
    else:
        with pytest.raises(InvalidInput, match="stores 15 exactly"):
            make_movement(amount=precise)
        assert not MovementRequest.objects.exists()


def test_force_is_refused_while_a_node_is_unknown(make_movement, operator):
    request = make_movement("cex_to_cex", approve=True)
    run_node(request, "withdraw", NS.COMPLETED)
    request = run_node(request, "withdraw_observe", NS.UNKNOWN)
    assert request.request_state == RS.MANUAL_INTERVENTION

    with pytest.raises(ActionRefused, match="withdraw_observe is UNKNOWN"):
        intervention_force_fail(request=request, actor=Actor.for_user(operator), reason="x")
    request.refresh_from_db()
    assert request.request_state == RS.MANUAL_INTERVENTION
