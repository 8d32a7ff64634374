"""Two-person overrides: force-complete, force-fail, cancel after a side effect (funds in
transit) and resolving an UNKNOWN node as "never happened" (FAILED) are proposed by one
supervisor and carried out when another confirms, before the proposal expires
(``QTG_OVERRIDE_PROPOSAL_TTL``). Both steps are events of the movement. The confirmation runs
the action's own service with the confirmer as actor, so its rules (state, nodes in flight,
...) are asked again at that moment.
"""

from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from movements import ports
from movements.audit import record_decision
from movements.models import MovementRequest, OverrideAction, OverrideProposal, OverrideStatus
from movements.policies import override_confirm_refusal, override_propose_refusal
from movements.selectors import current_nodes
from movements.services.guards import lock_request, require_reason
from movements.services.interventions import (
    intervention_force_complete,
    intervention_force_fail,
    movement_cancel,
    node_resolve_unknown,
)
from movements.services.state import record_event
from qtg.core.actors import Actor
from qtg.core.errors import InvalidInput, NotFound
from qtg.core.policies import enforce


def _record_override(proposal: OverrideProposal, action: str, actor: Actor, **extra: Any) -> None:
    """The proposal or confirmation in the evidence chain, with the proposal's content."""
    record_decision(
        subject=proposal,
        action=action,
        actor=actor,
        detail={
            "request": str(proposal.request_id),
            "action": proposal.action,
            "node_key": proposal.node_key,
            "reason": proposal.reason,
            "evidence": proposal.evidence,
            "status": proposal.status,
            "expires_at": proposal.expires_at,
            **extra,
        },
    )


@transaction.atomic
def override_propose(
    *,
    request: MovementRequest | Any,
    action: str,
    actor: Actor,
    reason: str,
    node_key: str = "",
    evidence: Any = None,
) -> OverrideProposal:
    """A supervisor proposes an override; another must confirm it before it expires."""
    if action not in OverrideAction.values:
        raise InvalidInput(
            f"unknown override {action!r}", details={"action": list(OverrideAction.values)}
        )
    reason = require_reason(reason, "propose an override")
    if action == OverrideAction.RESOLVE_NEVER_HAPPENED:
        if not node_key:
            raise InvalidInput("name the UNKNOWN node", details={"node_key": ["required"]})
        if not evidence or (isinstance(evidence, str) and not evidence.strip()):
            raise InvalidInput(
                "evidence is required to resolve an UNKNOWN node",
                details={"evidence": ["required"]},
            )
    request = lock_request(request)
    nodes = current_nodes(request, lock=True)
    enforce(
        override_propose_refusal(
            actor=actor, movement=request, nodes=nodes, action=action, node_key=node_key
        )
    )
    now = timezone.now()
    proposal = OverrideProposal.objects.create(
        request=request,
        action=action,
        node_key=node_key or "",
        reason=reason,
        evidence=evidence if evidence is not None else {},
        proposed_by=actor.user,
        proposed_at=now,
        expires_at=now + settings.QTG_OVERRIDE_PROPOSAL_TTL,
    )
    _record_override(proposal, "proposed", actor)
    record_event(
        request=request,
        actor=actor,
        detail={
            "override_proposed": action,
            "proposal": proposal.pk,
            "node_key": proposal.node_key,
            "reason": reason,
            "expires_at": proposal.expires_at.isoformat(),
        },
    )
    ports.notify(kind="override_proposal", request=request, actor=actor, proposal=proposal)
    return proposal


@transaction.atomic
def override_confirm(
    *, proposal: OverrideProposal | Any, actor: Actor, reason: str
) -> MovementRequest:
    """Another supervisor confirms a proposal with their own reason: the override is carried
    out now (its own rules asked again), recorded as the confirmation event followed by the
    action's events."""
    confirm_reason = require_reason(reason, "confirm an override")
    pk = proposal.pk if isinstance(proposal, OverrideProposal) else proposal
    # The movement first, then the proposal: the order every writer of a movement locks in.
    request_id = OverrideProposal.objects.filter(pk=pk).values_list("request_id", flat=True)
    if not request_id:
        raise NotFound(f"override proposal {pk} does not exist")
    request = lock_request(request_id[0])
    proposal = OverrideProposal.objects.select_for_update().get(pk=pk)
    enforce(override_confirm_refusal(actor=actor, proposal=proposal, now=timezone.now()))
    proposal.status = OverrideStatus.CONFIRMED
    proposal.confirmed_by = actor.user
    proposal.confirmed_at = timezone.now()
    proposal.save(update_fields=["status", "confirmed_by", "confirmed_at"])
    _record_override(proposal, "confirmed", actor, confirm_reason=confirm_reason)
    record_event(
        request=request,
        actor=actor,
        detail={
            "override_confirmed": proposal.action,
            "proposal": proposal.pk,
            "proposed_by": proposal.proposed_by.get_username(),
            "node_key": proposal.node_key,
            "reason": proposal.reason,
            "confirm_reason": confirm_reason,
        },
    )
    reason = (
        f"{proposal.reason} (proposed by {proposal.proposed_by.get_username()}; "
        f"confirmed: {confirm_reason})"
    )
    if proposal.action == OverrideAction.FORCE_COMPLETE:
        return intervention_force_complete(
            request=request, actor=actor, reason=reason, override=proposal
        )
    if proposal.action == OverrideAction.FORCE_FAIL:
        return intervention_force_fail(
            request=request, actor=actor, reason=reason, override=proposal
        )
    if proposal.action == OverrideAction.CANCEL_IN_TRANSIT:
        return movement_cancel(
            request=request,
            actor=actor,
            reason=reason,
            acknowledge_funds_in_transit=True,
            override=proposal,
        )
    return node_resolve_unknown(
        request=request,
        node_key=proposal.node_key,
        outcome="FAILED",
        evidence=proposal.evidence,
        actor=actor,
        override=proposal,
    )
