"""The operator's actions on one movement, as the console offers them.

Each action names its policy (``movements.policies``: permission, four-eyes, the state it needs),
the form it needs, and the service it calls. The console offers an action exactly when its
policy has no refusal for the user and explains a refusal with it; the service called by
``perform`` asks the same policy again on the locked rows and refuses a stale action.
"""

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from django import forms
from django.conf import settings
from django.utils import timezone

from movements import policies, selectors
from movements.models import MovementRequest, MovementRequestNode, OverrideAction
from movements.policies import Action
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
from movements.services.approvals import approval_policy_for
from movements.services.attention import (
    attention_resolve,
    attention_snooze,
    attention_stop_watching,
)
from movements.services.interventions import UNKNOWN_OUTCOMES
from movements.services.overrides import override_propose
from movements.states import IN_FLIGHT_NODE_STATES
from qtg.core.actors import Actor
from qtg.core.policies import Refusal

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


class CancelForm(ReasonForm):
    acknowledge_funds_in_transit = forms.BooleanField(
        required=False,
        label="I understand the funds in transit are no longer watched",
        help_text="Needed once a step that moves money has completed (supervisors only): the "
        "movement ends CANCELLED, nobody watches the funds that left, and the reservation stays "
        "HELD until someone settles it.",
    )


class SnoozeForm(ActionForm):
    node_key = forms.ChoiceField(label="Node")
    hours = forms.IntegerField(
        min_value=1,
        max_value=168,
        initial=4,
        help_text="Nobody is asked about it for this many hours (at most a week).",
    )
    reason = forms.CharField(
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 70}),
        help_text="Why it can wait. Recorded in the audit trail.",
    )

    def clean(self):
        cleaned = super().clean()
        if "hours" in cleaned:
            cleaned["until"] = timezone.now() + timedelta(hours=cleaned.pop("hours"))
        return cleaned


class ResolveAttentionForm(ActionForm):
    node_key = forms.ChoiceField(label="Node")
    note = forms.CharField(
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 70}),
        help_text="What you found or did. Recorded in the audit trail.",
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
        "FAILED: it did not happen. Each node lists what it can be resolved as.",
    )
    external_ref = forms.CharField(
        required=False,
        max_length=200,
        label="Venue reference",
        help_text="The withdrawal id or transaction hash, when the node says it needs one: the "
        "steps after it look the money up by it.",
    )
    evidence = forms.CharField(
        max_length=4000,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 70}),
        help_text="What proves the outcome: txid, venue withdrawal status, a ticket reference.",
    )


# --- the two-person rule in the console -------------------------------------------------------
# While QTG_TWO_PERSON_OVERRIDES is on, the console's force-complete, force-fail, cancel after
# a side effect and resolve-as-FAILED propose the override; another supervisor confirms it on
# the Override proposals page. The movement returned carries the proposal
# (``proposed_override``) so the page says what happened.

TWO_PERSON_NOTE = (
    "Under the two-person rule (on) this proposes it: another supervisor confirms it on the "
    "Override proposals page before it expires; nothing changes until then."
)
ONE_PERSON_NOTE = "The two-person rule is off: this happens at once, on your word alone."


def two_person_note() -> str:
    """What confirming a two-person override does under the rule in force now."""
    return TWO_PERSON_NOTE if settings.QTG_TWO_PERSON_OVERRIDES else ONE_PERSON_NOTE


def reservation_note(nodes: "Nodes", *, completing: bool) -> str:
    """What happens to the reservation when the movement ends this way (the README's rule:
    consumed on completion, released on failure only when no money left a venue)."""
    if completing:
        return "Its reservation is CONSUMED."
    left = policies.funds_in_transit(nodes)
    if left:
        return (
            f"Money already left a venue ({', '.join(left)}): its reservation stays HELD "
            "until someone settles it in Reservations."
        )
    return "No money left a venue: its reservation is RELEASED."


def approval_note(situation: "Situation") -> str:
    """What this approval does under the approval policy in force now (re-read at approval, as
    the service does): approves the movement, or is one of several it still needs."""
    policy = approval_policy_for(situation.movement)
    required = max(1, policy.approvals_required) if policy else 1
    groups = sorted(set(policy.required_groups)) if policy else []
    approvals = situation.approvals
    received = policies.distinct_approvers(approvals) + 1
    covered = {group for approval in approvals for group in approval.groups} | set(situation.groups)
    missing = [group for group in groups if group not in covered]
    if received >= required and not missing:
        return (
            f"It is the last approval needed ({received} of {required}): the movement is "
            "APPROVED and its first steps become ready to run."
        )
    more = max(required - received, 1 if missing else 0)
    from_groups = f", one of them from {' or '.join(missing)}" if missing else ""
    return (
        f"This is approval {received} of {required}: the movement stays PENDING_APPROVAL until "
        f"{more} more approver(s){from_groups} approve; nothing runs until then."
    )


def stop_watching_note(nodes: "Nodes") -> str:
    """Where the movement goes once the observe step FAILS, by what its money did."""
    moving = [
        n.node_key for n in nodes if n.has_side_effect and n.node_state in IN_FLIGHT_NODE_STATES
    ]
    if moving:
        return (
            f"{', '.join(moving)} may still be moving money: nothing is concluded until it settles."
        )
    left = policies.funds_in_transit(nodes)
    if left:
        return (
            f"Money already left a venue ({', '.join(left)}): the movement goes to "
            "MANUAL_INTERVENTION, where it can be retried, resumed or forced, and its "
            "reservation stays HELD."
        )
    return "No money left a venue: the movement ends FAILED and its reservation is RELEASED."


def _proposed(request: Any, proposal: Any) -> MovementRequest:
    movement = MovementRequest.objects.get(pk=request)
    movement.proposed_override = proposal
    return movement


def _force(override: OverrideAction, direct: Callable[..., MovementRequest]):
    def perform(*, request: Any, actor: Actor, reason: str) -> MovementRequest:
        if not settings.QTG_TWO_PERSON_OVERRIDES:
            return direct(request=request, actor=actor, reason=reason)
        proposal = override_propose(request=request, action=override, actor=actor, reason=reason)
        return _proposed(request, proposal)

    return perform


def _cancel(
    *, request: Any, actor: Actor, reason: str, acknowledge_funds_in_transit: bool = False
) -> MovementRequest:
    in_transit = policies.funds_in_transit(
        MovementRequestNode.objects.current().filter(request_id=request)
    )
    if settings.QTG_TWO_PERSON_OVERRIDES and in_transit and acknowledge_funds_in_transit:
        proposal = override_propose(
            request=request, action=OverrideAction.CANCEL_IN_TRANSIT, actor=actor, reason=reason
        )
        return _proposed(request, proposal)
    return movement_cancel(
        request=request,
        actor=actor,
        reason=reason,
        acknowledge_funds_in_transit=acknowledge_funds_in_transit,
    )


def _resolve(
    *,
    request: Any,
    actor: Actor,
    node_key: str,
    outcome: str,
    evidence: str,
    external_ref: str = "",
) -> MovementRequest:
    if settings.QTG_TWO_PERSON_OVERRIDES and outcome == "FAILED":
        proposal = override_propose(
            request=request,
            action=OverrideAction.RESOLVE_NEVER_HAPPENED,
            actor=actor,
            node_key=node_key,
            evidence=evidence,
            reason=f"{node_key} never happened",
        )
        return _proposed(request, proposal)
    return node_resolve_unknown(
        request=request,
        actor=actor,
        node_key=node_key,
        outcome=outcome,
        evidence=evidence,
        external_ref=external_ref,
    )


@dataclass(frozen=True)
class PageActor(Actor):
    """The signed-in user's actor for one page that asks every row's policies (the list, the
    home page's queue): each permission is asked of Django once and its answer kept for the
    page, as Django keeps the user's permissions themselves (``_perm_cache``), instead of
    walking the authentication backends for every action of every row."""

    answers: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)

    def has_perm(self, perm: str) -> bool:
        if perm not in self.answers:
            self.answers[perm] = super().has_perm(perm)
        return self.answers[perm]


@dataclass(frozen=True)
class Situation:
    """What the console knows when it asks an action's policy: who asks, the movement, its live
    nodes, the time, and (when the operator picks one) the node; the other facts a policy
    takes are read on first use (``movements.selectors``)."""

    actor: Actor
    movement: MovementRequest
    nodes: Nodes
    now: datetime
    node_key: str | None = None
    # The asking user's groups, when the caller read them once for many movements (a list).
    known_groups: tuple[str, ...] | None = None

    @classmethod
    def of(
        cls,
        movement: MovementRequest,
        nodes: Nodes,
        user: Any,
        *,
        groups: tuple[str, ...] | None = None,
        actor: Actor | None = None,
    ) -> "Situation":
        actor = actor or Actor.for_user(user)
        return cls(actor, movement, nodes, timezone.now(), known_groups=groups)

    @cached_property
    def approvals(self) -> list[Any]:
        return selectors.valid_approvals(self.movement)

    @cached_property
    def groups(self) -> tuple[str, ...]:
        if self.known_groups is not None:
            return self.known_groups
        return tuple(selectors.actor_groups(self.actor))

    @cached_property
    def open_attention_keys(self) -> list[str]:
        return selectors.open_attention_keys(self.movement)


@dataclass(frozen=True)
class MovementAction:
    name: str
    label: str
    what_happens: str
    # Why the action is not offered in a situation, None when it is: its policy
    # (movements.policies), asked with what the console knows.
    refusal: Callable[[Situation], Refusal | None]
    perform: Callable[..., MovementRequest]
    form_class: type[ActionForm] | None = None
    # The operator picks the node the action acts on, among those the policy allows.
    picks_node: bool = False
    dangerous: bool = False
    # The parts of the text that depend on the situation and the rules in force.
    consequences: Callable[[Situation], list[str]] = lambda s: []

    def describe(self, situation: Situation) -> str:
        """The confirmation text: what the action does, as the rules in force now say."""
        return " ".join([self.what_happens, *self.consequences(situation)])

    def form(self, data: Any, situation: Situation, *, posted: bool) -> ActionForm | None:
        """The input form. A posted form accepts any current node: whether that node can be
        acted on now is the service's call, so a stale choice is refused there, with a reason."""
        if self.form_class is None:
            return None
        candidates = situation.nodes
        if self.picks_node and not posted:
            candidates = [
                n
                for n in situation.nodes
                if self.refusal(replace(situation, node_key=n.node_key)) is None
            ]
        choices = [(n.node_key, self.node_label(n)) for n in candidates]
        return self.form_class(data, node_choices=choices)

    def node_label(self, node: MovementRequestNode) -> str:
        if self.name != Action.RESOLVE_UNKNOWN or node.node_state != "UNKNOWN":
            return f"{node.node_key} ({node.node_state})"
        outcomes = " or ".join(policies.resolvable_outcomes(node))
        needed = policies.external_ref_needed(node, "COMPLETED")
        needs = f"; COMPLETED needs its {needed}" if needed else ""
        return f"{node.node_key} (UNKNOWN: {outcomes}{needs})"

    def run(self, *, movement: MovementRequest, user: Any, data: dict[str, Any]) -> MovementRequest:
        return self.perform(request=movement.pk, actor=Actor.for_user(user), **data)


ACTIONS: dict[str, MovementAction] = {
    action.name: action
    for action in [
        MovementAction(
            name=Action.APPROVE,
            label="Approve",
            what_happens="Your approval is recorded, bound to the movement as it is now (plan, "
            "amount, asset, source, destination).",
            consequences=lambda s: [approval_note(s)],
            refusal=lambda s: policies.approve_refusal(
                actor=s.actor,
                movement=s.movement,
                now=s.now,
                approvals=s.approvals,
                approver_groups=s.groups,
            ),
            perform=movement_approve,
        ),
        MovementAction(
            name=Action.REJECT,
            label="Reject",
            what_happens="The movement is rejected, nothing runs, and its reservation is released.",
            refusal=lambda s: policies.reject_refusal(actor=s.actor, movement=s.movement),
            perform=movement_reject,
            form_class=ReasonForm,
            dangerous=True,
        ),
        MovementAction(
            name=Action.RESUME_GATE,
            label="Resume manual gate",
            what_happens="The manual gate completes and the movement continues past it.",
            refusal=lambda s: policies.resume_gate_refusal(
                actor=s.actor, movement=s.movement, nodes=s.nodes, node_key=s.node_key
            ),
            perform=manual_gate_resume,
            form_class=ManualGateForm,
            picks_node=True,
        ),
        MovementAction(
            name=Action.CANCEL,
            label="Cancel",
            what_happens="Steps that have not started are cancelled and the movement ends as "
            "CANCELLED. Refused while money may be in flight.",
            consequences=lambda s: (
                [
                    reservation_note(s.nodes, completing=False),
                    "Nobody watches the funds in transit any more: a two-person override.",
                    two_person_note(),
                ]
                if policies.funds_in_transit(s.nodes)
                else [reservation_note(s.nodes, completing=False)]
            ),
            refusal=lambda s: policies.cancel_refusal(
                actor=s.actor, movement=s.movement, nodes=s.nodes
            ),
            perform=_cancel,
            form_class=CancelForm,
            dangerous=True,
        ),
        MovementAction(
            name=Action.RESOLVE_UNKNOWN,
            label="Resolve UNKNOWN node",
            what_happens="The node takes the outcome you give, with your evidence recorded, and "
            "the movement carries on from there.",
            consequences=lambda s: [
                "FAILED (never happened) is a two-person override. " + TWO_PERSON_NOTE
                if settings.QTG_TWO_PERSON_OVERRIDES
                else "The two-person rule is off: every outcome, FAILED included, takes "
                "effect at once."
            ],
            refusal=lambda s: policies.resolve_unknown_refusal(
                actor=s.actor, movement=s.movement, nodes=s.nodes, node_key=s.node_key
            ),
            perform=_resolve,
            form_class=ResolveUnknownForm,
            picks_node=True,
        ),
        MovementAction(
            name=Action.INTERVENTION_RESUME,
            label="Resume",
            what_happens="The movement goes back to EXECUTING and waiting steps wake up.",
            refusal=lambda s: policies.intervention_resume_refusal(
                actor=s.actor, movement=s.movement, nodes=s.nodes
            ),
            perform=intervention_resume,
            form_class=ReasonForm,
        ),
        MovementAction(
            name=Action.INTERVENTION_RETRY,
            label="Retry node",
            what_happens="A new attempt of the failed node becomes ready; the failed attempt "
            "stays in the history.",
            refusal=lambda s: policies.retry_refusal(
                actor=s.actor, movement=s.movement, nodes=s.nodes, node_key=s.node_key
            ),
            perform=intervention_retry,
            form_class=NodeReasonForm,
            picks_node=True,
        ),
        MovementAction(
            name=Action.SNOOZE_ATTENTION,
            label="Snooze attention",
            what_happens="Nobody is asked about this node until the time you give; the movement "
            "leaves Needs me until then.",
            refusal=lambda s: policies.attention_refusal(
                actor=s.actor,
                movement=s.movement,
                open_attention_keys=s.open_attention_keys,
                node_key=s.node_key,
            ),
            perform=attention_snooze,
            form_class=SnoozeForm,
            picks_node=True,
        ),
        MovementAction(
            name=Action.RESOLVE_ATTENTION,
            label="Resolve attention",
            what_happens="The entry is closed with your note. If the node is still waiting, it "
            "is raised again only after another full wait.",
            refusal=lambda s: policies.attention_refusal(
                actor=s.actor,
                movement=s.movement,
                open_attention_keys=s.open_attention_keys,
                node_key=s.node_key,
            ),
            perform=attention_resolve,
            form_class=ResolveAttentionForm,
            picks_node=True,
        ),
        MovementAction(
            name=Action.STOP_WATCHING,
            label="Stop watching",
            what_happens="The observe step gives up and FAILS with your reason.",
            consequences=lambda s: [stop_watching_note(s.nodes)],
            refusal=lambda s: policies.stop_watching_refusal(
                actor=s.actor, movement=s.movement, nodes=s.nodes, node_key=s.node_key
            ),
            perform=attention_stop_watching,
            form_class=NodeReasonForm,
            picks_node=True,
            dangerous=True,
        ),
        MovementAction(
            name=Action.FORCE_COMPLETE,
            label="Force complete",
            what_happens="The movement is marked COMPLETED on your word. Steps that have not "
            "started are cancelled.",
            consequences=lambda s: [reservation_note(s.nodes, completing=True), two_person_note()],
            refusal=lambda s: policies.force_complete_refusal(
                actor=s.actor, movement=s.movement, nodes=s.nodes
            ),
            perform=_force(OverrideAction.FORCE_COMPLETE, intervention_force_complete),
            form_class=ReasonForm,
            dangerous=True,
        ),
        MovementAction(
            name=Action.FORCE_FAIL,
            label="Force fail",
            what_happens="The movement is marked FAILED on your word. Steps that have not "
            "started are cancelled.",
            consequences=lambda s: [
                reservation_note(s.nodes, completing=False),
                two_person_note(),
            ],
            refusal=lambda s: policies.force_fail_refusal(
                actor=s.actor, movement=s.movement, nodes=s.nodes
            ),
            perform=_force(OverrideAction.FORCE_FAIL, intervention_force_fail),
            form_class=ReasonForm,
            dangerous=True,
        ),
    ]
}


def available_actions(situation: Situation) -> list[MovementAction]:
    """The actions offered in ``situation`` (the user may take them now), in display order."""
    return [action for action in ACTIONS.values() if action.refusal(situation) is None]
