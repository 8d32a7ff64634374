"""Approval policies and what each approval is bound to.

A policy version (``ApprovalPolicy``) covers movements by asset, amount range, template and
destination, and says how many distinct approvers they need (never the creator) and the groups
at least one approver must come from. A version takes effect only when a second person
activates it; where several active policies cover a movement, the strictest applies (most
approvers, then most groups). No policy: one approver, any group.

Each approval stores a hash over what was approved: the compiled plan, the amount, the asset,
the source and the destination. At dispatch the movement is hashed again; an approval that no
longer matches is void and the node fails (the movement cannot start on it).
"""

import hashlib
import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from movements.audit import record_decision
from movements.models import (
    ApprovalPolicy,
    MovementApproval,
    MovementPlanNode,
    MovementRequest,
    PolicyStatus,
)
from movements.policies import distinct_approvers, policy_decide_refusal
from movements.selectors import actor_groups
from movements.services.state import record_event, save_fields
from qtg.core.actors import Actor
from qtg.core.compiled import Compiled
from qtg.core.errors import InvalidInput
from qtg.core.money import format_amount
from qtg.core.policies import enforce, lacks_permission

# --- policies ----------------------------------------------------------------------------------


def _covers(policy: ApprovalPolicy, request: MovementRequest) -> bool:
    amount = Decimal(request.amount)
    return (
        (not policy.asset or policy.asset.upper() == request.asset.upper())
        and (not policy.template_key or policy.template_key == request.template_key)
        and (not policy.destination or policy.destination == request.destination)
        and (policy.amount_above is None or amount > policy.amount_above)
        and (policy.amount_up_to is None or amount <= policy.amount_up_to)
    )


_ACTIVE_POLICIES = Compiled(lambda: ApprovalPolicy.objects.filter(status=PolicyStatus.ACTIVE))


def approval_policy_for(request: MovementRequest) -> ApprovalPolicy | None:
    """The active policy that governs ``request``: the strictest of those covering it."""
    covering = [policy for policy in _ACTIVE_POLICIES() if _covers(policy, request)]
    return max(
        covering,
        key=lambda p: (p.approvals_required, len(p.required_groups), p.key),
        default=None,
    )


def policy_label(policy: ApprovalPolicy | None) -> str:
    return f"{policy.key} v{policy.version}" if policy else "default (one approver)"


def apply_approval_policy(request: MovementRequest) -> bool:
    """Set what approving ``request`` takes from the policy in force; True if it changed."""
    policy = approval_policy_for(request)
    required = max(1, policy.approvals_required) if policy else 1
    groups = sorted(set(policy.required_groups)) if policy else []
    changed = (request.approval_policy_id, request.approvals_required, request.approval_groups) != (
        policy.pk if policy else None,
        required,
        groups,
    )
    request.approval_policy = policy
    request.approvals_required = required
    request.approval_groups = groups
    return changed


def requirement_detail(request: MovementRequest) -> dict[str, Any]:
    return {
        "policy": policy_label(request.approval_policy),
        "approvals_required": request.approvals_required,
        "required_groups": list(request.approval_groups),
    }


def approval_policy_validate(fields: dict[str, Any]) -> None:
    """Refuse a policy version that could never be met or reads ambiguously."""
    errors: dict[str, list[str]] = {}
    if not fields.get("key"):
        errors["key"] = ["required"]
    if int(fields.get("approvals_required") or 0) < 1:
        errors["approvals_required"] = ["at least 1"]
    groups = fields.get("required_groups") or []
    if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
        errors["required_groups"] = ["a list of group names"]
    elif len(set(groups)) > int(fields.get("approvals_required") or 0):
        errors["required_groups"] = ["more groups than approvers"]
    above, up_to = fields.get("amount_above"), fields.get("amount_up_to")
    if above is not None and up_to is not None and Decimal(up_to) <= Decimal(above):
        errors["amount_up_to"] = ["must be above amount_above"]
    if errors:
        raise InvalidInput("the approval policy is invalid", details=errors)


@transaction.atomic
def approval_policy_propose(
    *,
    actor: Actor,
    key: str,
    approvals_required: int,
    required_groups: Sequence[str] = (),
    asset: str = "",
    template_key: str = "",
    destination: str = "",
    amount_above: Decimal | None = None,
    amount_up_to: Decimal | None = None,
    note: str = "",
) -> ApprovalPolicy:
    """A new version of policy ``key``, PROPOSED: it takes effect when a second person
    activates it."""
    enforce(lacks_permission(actor, "movements.propose_approvalpolicy"))
    fields = {
        "key": (key or "").strip(),
        "approvals_required": approvals_required,
        "required_groups": list(required_groups),
        "asset": (asset or "").strip().upper(),
        "template_key": (template_key or "").strip(),
        "destination": (destination or "").strip(),
        "amount_above": amount_above,
        "amount_up_to": amount_up_to,
        "note": note,
    }
    approval_policy_validate(fields)
    # Versions of one key are numbered under a lock on its existing rows.
    list(ApprovalPolicy.objects.select_for_update().filter(key=fields["key"]))
    last = ApprovalPolicy.objects.filter(key=fields["key"]).aggregate(v=Max("version"))["v"]
    policy = ApprovalPolicy.objects.create(
        **fields,
        version=(last or 0) + 1,
        status=PolicyStatus.PROPOSED,
        proposed_by=actor.user,
        proposed_at=timezone.now(),
    )
    _record_policy(policy, "proposed", actor)
    return policy


def _record_policy(policy: ApprovalPolicy, action: str, actor: Actor) -> None:
    """The policy decision in the evidence chain: the version as it is now, and who."""
    record_decision(
        subject=policy,
        action=action,
        actor=actor,
        detail={
            "key": policy.key,
            "version": policy.version,
            "status": policy.status,
            "approvals_required": policy.approvals_required,
            "required_groups": list(policy.required_groups),
            "asset": policy.asset,
            "template_key": policy.template_key,
            "destination": policy.destination,
            "amount_above": policy.amount_above,
            "amount_up_to": policy.amount_up_to,
        },
    )


def _lock_policy(policy: ApprovalPolicy | Any) -> ApprovalPolicy:
    pk = policy.pk if isinstance(policy, ApprovalPolicy) else policy
    return ApprovalPolicy.objects.select_for_update().get(pk=pk)


@transaction.atomic
def approval_policy_activate(*, policy: ApprovalPolicy | Any, actor: Actor) -> ApprovalPolicy:
    """A second person activates a proposed version; the active version of its key, if any,
    is superseded. Movements waiting for approval pick it up at their next approval."""
    policy = _lock_policy(policy)
    enforce(policy_decide_refusal(actor=actor, policy=policy))
    now = timezone.now()
    for previous in ApprovalPolicy.objects.select_for_update().filter(
        key=policy.key, status=PolicyStatus.ACTIVE
    ):
        previous.status = PolicyStatus.SUPERSEDED
        previous.superseded_at = now
        previous.save(update_fields=["status", "superseded_at"])
        _record_policy(previous, "superseded", actor)
    policy.status = PolicyStatus.ACTIVE
    policy.decided_by = actor.user
    policy.decided_at = now
    policy.save(update_fields=["status", "decided_by", "decided_at"])
    _record_policy(policy, "activated", actor)
    return policy


@transaction.atomic
def approval_policy_reject(*, policy: ApprovalPolicy | Any, actor: Actor) -> ApprovalPolicy:
    """A second person turns a proposed version down; nothing changes."""
    policy = _lock_policy(policy)
    enforce(policy_decide_refusal(actor=actor, policy=policy))
    policy.status = PolicyStatus.REJECTED
    policy.decided_by = actor.user
    policy.decided_at = timezone.now()
    policy.save(update_fields=["status", "decided_by", "decided_at"])
    _record_policy(policy, "rejected", actor)
    return policy


# --- what an approval is bound to --------------------------------------------------------------


PLAN_NODE_BOUND = (
    "key",
    "kind",
    "executor",
    "has_side_effect",
    "signing_required",
    "config",
    "condition",
)


def _binding_of(request: MovementRequest, nodes: list[list], edges: list[list]) -> str:
    canonical = {
        "asset": request.asset,
        "amount": format_amount(Decimal(request.amount)),
        "source": request.source,
        "destination": request.destination,
        "plan": sorted(nodes),
        "edges": sorted(edges),
    }
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def plan_read(request: MovementRequest) -> tuple[str, list[tuple[str, str]]]:
    """``approval_binding`` of ``request`` and its plan's edges (source key, target key, in
    the plan graph's order), read together in one query: each plan node with its outgoing
    edges."""
    return plans_read([request])[request.pk]


def _plans(*, requests: list[Any]):
    return (
        MovementPlanNode.objects.filter(request_id__in=requests)
        .order_by()
        .values_list(
            "request_id",
            *PLAN_NODE_BOUND,
            "out_edges__target__key",
            "out_edges__kind",
            "out_edges__target__position",
        )
    )


_PLANS = Compiled(_plans, requests=MovementPlanNode._meta.get_field("request"))


def plans_read(
    requests: Sequence[MovementRequest],
) -> dict[Any, tuple[str, list[tuple[str, str]]]]:
    """``plan_read`` of several movements in one query (the dispatch batch)."""
    rows = _PLANS(requests=[r.pk for r in requests])
    nodes: dict[Any, dict[str, list]] = {r.pk: {} for r in requests}
    edges: dict[Any, list] = {r.pk: [] for r in requests}
    bound = len(PLAN_NODE_BOUND)
    for request_id, *row in rows:
        nodes[request_id].setdefault(row[0], list(row[:bound]))
        target, kind, position = row[bound:]
        if target is not None:
            edges[request_id].append((position, target, row[0], kind))
    read = {}
    for request in requests:
        plan = edges[request.pk]
        binding = _binding_of(
            request,
            list(nodes[request.pk].values()),
            [[source, target, kind] for _, target, source, kind in plan],
        )
        read[request.pk] = (binding, [(source, target) for _, target, source, _ in sorted(plan)])
    return read


def approval_binding(request: MovementRequest) -> str:
    """The hash an approval of ``request`` is bound to (plan, amount, asset, source,
    destination), as the movement is in the database now (read as ``plan_read`` reads it)."""
    return plan_read(request)[0]


def bindings_of(requests: Sequence[MovementRequest]) -> dict[Any, str]:
    """``approval_binding`` of several movements in one query (the dispatch batch), read as
    an approval reads it (``plan_read``)."""
    return {pk: binding for pk, (binding, _) in plans_read(requests).items()}


def approval_add(
    *,
    request: MovementRequest,
    actor: Actor,
    approvals: list[MovementApproval],
    groups: list[str] | None = None,
    binding: str | None = None,
) -> MovementApproval:
    """Store ``actor``'s approval of the locked ``request``, bound to it as it is now, and
    append it to ``approvals``. The caller records it (``approval_detail``); a caller that
    read the actor's ``groups`` and the ``binding`` (``plan_read``) already passes them."""
    approval = MovementApproval.objects.create(
        request=request,
        approver=str(actor),
        approved_by=actor.user,
        approved_at=timezone.now(),
        groups=actor_groups(actor) if groups is None else groups,
        policy=request.approval_policy,
        binding_hash=approval_binding(request) if binding is None else binding,
    )
    approvals.append(approval)
    return approval


def approval_detail(
    request: MovementRequest, approval: MovementApproval, approvals: Sequence[MovementApproval]
) -> dict[str, Any]:
    """The evidence of one approval (n of m, by whom, bound to which hash)."""
    return {
        "approval": len(approvals),
        "of": request.approvals_required,
        "by": approval.approver,
        "groups": approval.groups,
        "binding_hash": approval.binding_hash,
        "approvals": [a.approver for a in approvals],
        **requirement_detail(request),
    }


def refresh_requirement(request: MovementRequest, *, actor: Actor) -> None:
    """Re-read the policy in force for the locked ``request`` (it may have changed since the
    movement was created); a change is recorded."""
    before = policy_label(request.approval_policy)
    if apply_approval_policy(request):
        save_fields(request, ["approval_policy", "approvals_required", "approval_groups"])
        record_event(
            request=request,
            actor=actor,
            detail={"approval_policy_changed_from": before, **requirement_detail(request)},
        )


APPROVAL_MISSING = "approval missing or altered"


def _requirement_events(*, requests: list[Any]):
    from movements.models import MovementEvent

    return MovementEvent.objects.filter(
        request_id__in=requests, detail__has_key="approvals_required"
    ).order_by("request_id", "pk")


_REQUIREMENT_EVENTS = Compiled(
    _requirement_events,
    requests=MovementRequest._meta.pk,
)


def _recorded_requirements(requests: Sequence[MovementRequest]) -> dict[Any, tuple[Any, str]]:
    """Per movement, what approving it takes as the audit chain recorded it (the latest linked
    event carrying ``approvals_required``: the VALIDATED event at create, or a policy change
    at approval), or why it cannot be read. One query for the batch."""
    from qtg.core.chain import link_problem

    found: dict[Any, tuple[Any, str]] = {}
    for event in _REQUIREMENT_EVENTS(requests=[r.pk for r in requests]):
        problem = link_problem(event)
        if problem:
            found[event.request_id] = (None, f"the recorded quorum (event {event.pk}): {problem}")
        else:
            found[event.request_id] = (event, "")
    return found


def _approval_problem(
    request: MovementRequest,
    approvals: Sequence[MovementApproval],
    requirement: tuple[Any, str] | None,
    binding: str,
) -> str | None:
    """Why the approvals of ``request`` do not carry it now (None: they do): the quorum and
    groups recorded when it was created, every approval's own link intact, each bound to the
    plan as it is now."""
    from qtg.core.audit_keys import LEGACY
    from qtg.core.chain import link_problem

    if requirement is None:
        return "no quorum was recorded for this movement"
    event, why = requirement
    if event is None:
        return why
    required = int(event.detail.get("approvals_required") or 1)
    groups = list(event.detail.get("required_groups") or [])
    for approval in approvals:
        if approval.chain_key == LEGACY and event.chain_key != LEGACY:
            return f"approval {approval.pk} carries no link but the movement is newer than links"
        if problem := link_problem(approval):
            return f"approval {approval.pk} by {approval.approver}: {problem}"
    valid = [a for a in approvals if a.void_at is None and a.binding_hash == binding]
    approvers = distinct_approvers(valid)
    if approvers < required:
        return f"{approvers} valid approval(s) bound to the plan as it is now, {required} required"
    covered = {group for a in valid for group in a.groups}
    if missing := [g for g in groups if g not in covered]:
        return f"no valid approval from {', '.join(missing)}"
    return None


_APPROVALS_OF = Compiled(
    lambda *, requests: MovementApproval.objects.filter(request_id__in=requests),
    requests=MovementRequest._meta.pk,
)


def void_changed_approvals(
    requests: Sequence[MovementRequest], *, actor: Actor, writer: Any = None
) -> dict[Any, str]:
    """At dispatch: re-check what was approved. The approvals of ``requests`` whose binding no
    longer matches become void (recorded as an event); then each movement needs approvals
    meeting the quorum the audit chain recorded, each approval's link intact and bound to
    the current plan hash. Returns, for each movement that fails this, why ("approval missing
    or altered: ..."): dispatch fails its node and sends nothing. Only movements created
    before links were keyed, with neither approvals nor a recorded quorum, are not judged."""
    if not requests:
        return {}
    by_request: dict[Any, list[MovementApproval]] = {r.pk: [] for r in requests}
    for approval in _APPROVALS_OF(requests=list(by_request)):
        by_request[approval.request_id].append(approval)
    requirements = _recorded_requirements(requests)
    judged = [r for r in requests if by_request[r.pk] or r.pk in requirements or _keyed(r)]
    bindings = bindings_of(judged)
    refused: dict[Any, str] = {}
    now = timezone.now()
    for request in judged:
        approvals = by_request[request.pk]
        changed = [
            a for a in approvals if a.void_at is None and a.binding_hash != bindings[request.pk]
        ]
        for approval in changed:
            approval.void_at = now
            approval.void_reason = (
                "the movement changed after approval (plan, amount, asset, source or destination)"
            )
            approval.save(update_fields=["void_at", "void_reason"])
        if changed:
            record_event(
                request=request,
                actor=actor,
                detail={
                    "approvals_void": [a.approver for a in changed],
                    "reason": changed[0].void_reason,
                    "approved_hash": changed[0].binding_hash,
                    "current_hash": bindings[request.pk],
                },
                writer=writer,
            )
        problem = _approval_problem(
            request, approvals, requirements.get(request.pk), bindings[request.pk]
        )
        if problem:
            refused[request.pk] = f"{APPROVAL_MISSING}: {problem}"
    return refused


def _keyed(request: MovementRequest) -> bool:
    """Whether ``request`` was created after links were keyed (its first event is keyed)."""
    from movements.models import MovementEvent
    from qtg.core.audit_keys import LEGACY

    first = MovementEvent.objects.filter(request=request).order_by("pk").first()
    return first is None or first.chain_key != LEGACY
