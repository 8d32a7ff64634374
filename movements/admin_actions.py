"""The operator's actions on one movement, as the console offers them.

Each action names its permission, says when it is legal (from the request and its current
nodes), the form it needs, and the service it calls. The console uses ``is_legal`` and the
permission only to decide what to SHOW; the service called by ``perform`` is what authorises
(permission, four-eyes) and refuses a stale or illegal action.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django import forms
from django.utils import timezone

from movements.models import MovementRequest, MovementRequestNode, NodeKind
from movements.services import (
    intervention_force_complete,
    intervention_force_fail,
    intervention_resume,
    intervention_retry,
    manual_gate_resume,
    movement_approve,
    movement_cancel,
    movement_reject,
    node_resolve_unknown,
)
from movements.services.lifecycle import UNKNOWN_OUTCOMES
from movements.states import (
    IN_FLIGHT_NODE_STATES,
    TERMINAL_REQUEST_STATES,
    NodeState,
    RequestState,
)
from qtg.core.actors import Actor

RS = RequestState
Nodes = list[MovementRequestNode]


class ActionForm(forms.Form):
    """The input of an action; its cleaned data are the service's keyword arguments."""

    def __init__(self, *args: Any, node_choices: list[tuple[str, str]] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        if "node_key" in self.fields:
            self.fields["node_key"].choices = node_choices or []


class ReasonForm(ActionForm):
    reason = forms.CharField(
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 70}),
        help_text="Recorded in the audit trail.",
    )


class NodeReasonForm(ReasonForm):
    node_key = forms.ChoiceField(label="Node")
    field_order = ["node_key", "reason"]


class ManualGateForm(ActionForm):
    node_key = forms.ChoiceField(label="Gate")
    note = forms.CharField(
        required=False,
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 70}),
        help_text="Optional: what you checked before releasing the gate.",
    )


class ResolveUnknownForm(ActionForm):
    node_key = forms.ChoiceField(label="Node")
    outcome = forms.ChoiceField(
        choices=[(str(s), str(s)) for s in UNKNOWN_OUTCOMES],
        widget=forms.RadioSelect,
        help_text="SUBMITTED: it happened, keep observing. COMPLETED: it happened and settled. "
        "FAILED: it did not happen.",
    )
    evidence = forms.CharField(
        max_length=4000,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 70}),
        help_text="What proves the outcome: txid, venue withdrawal status, a ticket reference.",
    )


def _in(request: MovementRequest, *states: RequestState) -> bool:
    return request.request_state in states


def _nodes_in(nodes: Nodes, *states: NodeState) -> Nodes:
    return [n for n in nodes if n.node_state in states]


def _waiting_gates(nodes: Nodes) -> Nodes:
    return [n for n in nodes if n.kind == NodeKind.MANUAL_GATE and n.node_state == NodeState.READY]


def _approval_open(request: MovementRequest) -> bool:
    return request.expires_at is None or request.expires_at > timezone.now()


@dataclass(frozen=True)
class MovementAction:
    name: str
    label: str
    permission: str
    what_happens: str
    is_legal: Callable[[MovementRequest, Nodes], bool]
    perform: Callable[..., MovementRequest]
    form_class: type[ActionForm] | None = None
    # The nodes an operator picks from, when the action acts on one node.
    eligible_nodes: Callable[[Nodes], Nodes] | None = None
    dangerous: bool = False

    @property
    def perm(self) -> str:
        return f"movements.{self.permission}"

    def is_available(self, request: MovementRequest, nodes: Nodes, user: Any) -> bool:
        """Shown to this user now: legal, permitted, and (approve) not their own movement."""
        if not self.is_legal(request, nodes) or not user.has_perm(self.perm):
            return False
        return not (self.name == "approve" and request.created_by_id == user.pk)

    def form(self, data: Any, nodes: Nodes, *, posted: bool) -> ActionForm | None:
        """The input form. A posted form accepts any current node: whether that node can be
        acted on now is the service's call, so a stale choice is refused there, with a reason."""
        if self.form_class is None:
            return None
        candidates = nodes if posted or self.eligible_nodes is None else self.eligible_nodes(nodes)
        choices = [(n.node_key, f"{n.node_key} ({n.node_state})") for n in candidates]
        return self.form_class(data, node_choices=choices)

    def run(self, *, request: MovementRequest, user: Any, data: dict[str, Any]) -> MovementRequest:
        return self.perform(request=request.pk, actor=Actor.for_user(user), **data)


ACTIONS: dict[str, MovementAction] = {
    action.name: action
    for action in [
        MovementAction(
            name="approve",
            label="Approve",
            permission="approve_movement",
            what_happens="The movement is approved and its first steps become ready to run.",
            is_legal=lambda r, nodes: _in(r, RS.PENDING_APPROVAL) and _approval_open(r),
            perform=movement_approve,
        ),
        MovementAction(
            name="reject",
            label="Reject",
            permission="reject_movement",
            what_happens="The movement is rejected, nothing runs, and its reservation is released.",
            is_legal=lambda r, nodes: _in(r, RS.PENDING_APPROVAL),
            perform=movement_reject,
            form_class=ReasonForm,
            dangerous=True,
        ),
        MovementAction(
            name="resume_gate",
            label="Resume manual gate",
            permission="resume_manual_gate",
            what_happens="The manual gate completes and the movement continues past it.",
            is_legal=lambda r, nodes: (
                _in(r, RS.WAITING_MANUAL_ACTION, RS.EXECUTING) and bool(_waiting_gates(nodes))
            ),
            perform=manual_gate_resume,
            form_class=ManualGateForm,
            eligible_nodes=_waiting_gates,
        ),
        MovementAction(
            name="cancel",
            label="Cancel",
            permission="cancel_movement",
            what_happens="Steps that have not started are cancelled and the movement ends as "
            "CANCELLED. Refused while money may be in flight.",
            is_legal=lambda r, nodes: (
                _in(r, RS.EXECUTING, RS.WAITING_MANUAL_ACTION)
                and not _nodes_in(nodes, *IN_FLIGHT_NODE_STATES)
            ),
            perform=movement_cancel,
            form_class=ReasonForm,
            dangerous=True,
        ),
        MovementAction(
            name="resolve_unknown",
            label="Resolve UNKNOWN node",
            permission="resolve_unknown_node",
            what_happens="The node takes the outcome you give, with your evidence recorded, and "
            "the movement carries on from there.",
            is_legal=lambda r, nodes: (
                r.request_state not in TERMINAL_REQUEST_STATES
                and bool(_nodes_in(nodes, NodeState.UNKNOWN))
            ),
            perform=node_resolve_unknown,
            form_class=ResolveUnknownForm,
            eligible_nodes=lambda nodes: _nodes_in(nodes, NodeState.UNKNOWN),
        ),
        MovementAction(
            name="intervention_resume",
            label="Resume",
            permission="resume_intervention",
            what_happens="The movement goes back to EXECUTING and waiting steps wake up.",
            is_legal=lambda r, nodes: (
                _in(r, RS.MANUAL_INTERVENTION)
                and not _nodes_in(nodes, NodeState.FAILED, NodeState.UNKNOWN)
            ),
            perform=intervention_resume,
            form_class=ReasonForm,
        ),
        MovementAction(
            name="intervention_retry",
            label="Retry node",
            permission="retry_node",
            what_happens="A new attempt of the failed node becomes ready; the failed attempt "
            "stays in the history.",
            is_legal=lambda r, nodes: (
                _in(r, RS.MANUAL_INTERVENTION) and bool(_nodes_in(nodes, NodeState.FAILED))
            ),
            perform=intervention_retry,
            form_class=NodeReasonForm,
            eligible_nodes=lambda nodes: _nodes_in(nodes, NodeState.FAILED),
        ),
        MovementAction(
            name="force_complete",
            label="Force complete",
            permission="force_complete_movement",
            what_happens="The movement is marked COMPLETED on your word and its reservation is "
            "consumed. Steps that have not started are cancelled.",
            is_legal=lambda r, nodes: (
                _in(r, RS.MANUAL_INTERVENTION) and not _nodes_in(nodes, *IN_FLIGHT_NODE_STATES)
            ),
            perform=intervention_force_complete,
            form_class=ReasonForm,
            dangerous=True,
        ),
        MovementAction(
            name="force_fail",
            label="Force fail",
            permission="force_fail_movement",
            what_happens="The movement is marked FAILED on your word. Steps that have not "
            "started are cancelled.",
            is_legal=lambda r, nodes: (
                _in(r, RS.MANUAL_INTERVENTION) and not _nodes_in(nodes, *IN_FLIGHT_NODE_STATES)
            ),
            perform=intervention_force_fail,
            form_class=ReasonForm,
            dangerous=True,
        ),
    ]
}


def available_actions(request: MovementRequest, nodes: Nodes, user: Any) -> list[MovementAction]:
    """The actions this user may take on this movement now, in display order."""
    return [action for action in ACTIONS.values() if action.is_available(request, nodes, user)]
