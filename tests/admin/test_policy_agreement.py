"""The console, the policies and the services agree: on real movements in each situation an
operator meets, an action's button is on the movement page exactly when its policy has no
refusal for the user, and exactly then does its service accept it (for a node-level action: the
nodes the form offers are exactly those the service accepts)."""

import re
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from movements.admin.actions import ACTIONS, MovementAction, Situation
from movements.models import MovementRequest
from movements.selectors import current_nodes
from movements.services import movement_reject
from movements.services.attention import detect_stuck_nodes
from qtg.core.actors import Actor
from qtg.core.errors import QTGError
from tests.admin.conftest import TO_COMPLETED, drive
from tests.admin.helpers import action_url, change_url

# What the console's form would post for each action (node_key added per node).
INPUT = {
    "approve": {},
    "reject": {"reason": "r"},
    "resume_gate": {"note": ""},
    "cancel": {"reason": "r", "acknowledge_funds_in_transit": True},
    "resolve_unknown": {"outcome": "SUBMITTED", "evidence": "seen on chain"},
    "intervention_resume": {"reason": "r"},
    "intervention_retry": {"reason": "r"},
    "force_complete": {"reason": "r"},
    "force_fail": {"reason": "r"},
    "snooze_attention": {"until": timezone.now() + timedelta(hours=1), "reason": "r"},
    "resolve_attention": {"note": "n"},
    "stop_watching": {"reason": "r"},
}


def _closed_window(fixture):
    movement = fixture("make_movement")()
    MovementRequest.objects.filter(pk=movement.pk).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )
    return movement


def _rejected(fixture):
    movement = fixture("make_movement")()
    return movement_reject(request=movement, actor=Actor.system("tests"), reason="duplicate")


def _completed(fixture):
    movement = drive(fixture("executing")(), "withdraw", *TO_COMPLETED)
    drive(movement, "withdraw_observe", "OBSERVING", "COMPLETED")
    return drive(movement, "deposit_observe", "OBSERVING", "COMPLETED")


# situation -> how to build it (``fixture`` returns a fixture's value by name)
def _deposit_stuck(fixture):
    movement = drive(fixture("executing")(), "withdraw", *TO_COMPLETED)
    drive(movement, "withdraw_observe", "OBSERVING", "COMPLETED")
    movement = drive(movement, "deposit_observe", "OBSERVING")
    detect_stuck_nodes(now=timezone.now() + timedelta(days=1))
    return movement


SITUATIONS = {
    "pending": lambda fixture: fixture("make_movement")(),
    "pending, created by the supervisor": lambda fixture: fixture("make_movement")(
        by=fixture("supervisor")
    ),
    "pending, the approval window closed": _closed_window,
    "rejected": _rejected,
    "executing": lambda fixture: fixture("executing")(),
    "executing, the withdrawal in flight": lambda fixture: drive(
        fixture("executing")(), "withdraw", "PREPARING", "SUBMITTING"
    ),
    "waiting at a manual gate": lambda fixture: fixture("waiting_at_gate")(),
    "manual intervention, a node UNKNOWN": lambda fixture: fixture("intervention_unknown")(),
    "manual intervention, a node FAILED": lambda fixture: fixture("intervention_failed")(),
    "manual intervention, reconciled": lambda fixture: fixture("intervention_reconciled")(),
    "executing, the deposit stuck": _deposit_stuck,
    "completed": _completed,
}


class _Undo(Exception):
    """Raised to roll back an action that the service accepted."""


def service_accepts(action: MovementAction, movement, user, node_key: str | None) -> bool:
    data = dict(INPUT[action.name])
    if node_key is not None:
        data["node_key"] = node_key
    try:
        with transaction.atomic():
            action.run(movement=movement, user=user, data=data)
            raise _Undo
    except _Undo:
        return True
    except QTGError:
        return False


def offered_on_page(client, movement) -> set[str]:
    html = client.get(change_url(movement)).content.decode()
    return set(re.findall(r'data-action="([a-z_]+)"', html))


def node_choices(client, movement, name: str) -> list[str]:
    form = client.get(action_url(movement, name)).context["form"]
    return [key for key, _ in form.fields["node_key"].choices]


@pytest.mark.parametrize("situation", SITUATIONS)
def test_a_button_is_offered_exactly_when_the_policy_and_the_service_allow_the_action(
    request, client, op, supervisor, situation
):
    pk = SITUATIONS[situation](request.getfixturevalue).pk
    for user in (op, supervisor):
        client.force_login(user)
        movement = MovementRequest.objects.get(pk=pk)
        nodes = current_nodes(movement)
        offered = offered_on_page(client, movement)
        asked = Situation.of(movement, nodes, user)
        for name, action in ACTIONS.items():
            targets = [n.node_key for n in nodes] if action.picks_node else [None]
            accepted = [key for key in targets if service_accepts(action, movement, user, key)]

            allowed = action.refusal(asked) is None
            assert (name in offered) == allowed == bool(accepted), (user.username, name)
            if action.picks_node and allowed:
                assert node_choices(client, movement, name) == accepted, (user.username, name)


def test_the_situations_cover_every_action_offered_and_refused(request, client, supervisor):
    # A guard on the table above: each action is offered somewhere and refused somewhere.
    client.force_login(supervisor)
    seen: dict[str, set[bool]] = {name: set() for name in ACTIONS}
    for build in SITUATIONS.values():
        movement = build(request.getfixturevalue)
        offered = offered_on_page(client, movement)
        for name in ACTIONS:
            seen[name].add(name in offered)

    assert seen == {name: {True, False} for name in ACTIONS}
