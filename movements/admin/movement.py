"""The operator console: movement requests in the Django admin.

Nothing here writes state. The movement page and the list are read-only; every change is an
action (``movements.admin.actions``) that calls a service, after a confirmation page, and the
service authorises and refuses. What the console shows, hides and explains comes from the same
policies the services enforce (``movements.policies``).
"""

import json
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ObjectDoesNotExist, PermissionDenied
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import CharField, OuterRef, Subquery
from django.db.models.functions import Cast
from django.forms.models import _get_foreign_key
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from movements import audit, policies, public, selectors
from movements.admin.actions import ACTIONS, Situation
from movements.admin.changelist import (
    MovementChangelistAdmin,
    format_amount,
    node_state_badge,
    request_state_badge,
)
from movements.admin.controls import ApprovalInline, OverrideInline
from movements.admin.graph import plan_graph
from movements.models import (
    MovementEvent,
    MovementRequest,
    MovementRequestNode,
    RouteTemplate,
)
from movements.policies import PERMISSIONS, Action, Rule
from movements.selectors import current_nodes
from movements.states import IN_FLIGHT_NODE_STATES, TERMINAL_REQUEST_STATES, RequestState
from qtg.core.actors import Actor
from qtg.core.admin import ReadOnlyInline as BaseReadOnlyInline
from qtg.core.admin import ReadOnlyModelAdmin
from qtg.core.errors import QTGError
from qtg.core.policies import Refusal
from qtg.core.times import console_time

# How often a movement page reloads itself while something is in flight.
QTG_PAGE_REFRESH_SECONDS = 5


def in_flight(movement: MovementRequest, nodes: list) -> bool:
    """Work is under way that the workers will move on by themselves: the movement is
    approved or executing, or a node waits on a venue (running or UNKNOWN)."""
    return movement.request_state in (RequestState.APPROVED, RequestState.EXECUTING) or any(
        node.node_state in IN_FLIGHT_NODE_STATES for node in nodes
    )


class ReadOnlyInline(BaseReadOnlyInline):
    """An audit inline of a movement: visible to whoever may view the movement."""

    view_permission = "movements.view_movementrequest"


class NodeInline(ReadOnlyInline):
    model = MovementRequestNode
    verbose_name = "node attempt"
    verbose_name_plural = "Nodes (every attempt, in plan order)"
    fields = readonly_fields = (
        "node_key",
        "kind",
        "state",
        "attempt",
        "is_current",
        "external_ref",
        "last_error",
        "tries",
        "lease",
        "next_attempt_at",
        "state_changed_at",
    )

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .select_related("plan_node")
            .order_by("plan_node__position", "attempt")
        )

    @admin.display(description="state")
    def state(self, obj):
        return node_state_badge(obj.node_state)

    @admin.display(description="lease")
    def lease(self, obj):
        if not obj.lease_owner:
            return "—"
        return (
            f"{obj.lease_owner} until {console_time(obj.lease_expires_at)} "
            f"(epoch {obj.lease_epoch})"
        )

    @admin.display(description="dispatches / venue errors")
    def tries(self, obj):
        # Claims (lost ones included) beside the venue's own refusals: only these count
        # against QTG_MAX_DISPATCHES.
        return f"{obj.dispatch_count} / {obj.venue_errors}"


class EventInline(ReadOnlyInline):
    model = MovementEvent
    verbose_name = "event"
    verbose_name_plural = "Events (newest first)"
    fields = readonly_fields = ("created_at", "subject", "transition", "kind", "actor", "evidence")

    def get_queryset(self, request):
        usernames = (
            get_user_model()
            .objects.annotate(pk_text=Cast("pk", CharField()))
            .filter(pk_text=OuterRef("actor_id"))
            .values("username")[:1]
        )
        return (
            super()
            .get_queryset(request)
            .annotate(actor_username=Subquery(usernames))
            .order_by("-created_at", "-id")
        )

    @admin.display(description="subject")
    def subject(self, obj):
        return obj.node_key or "request"

    @admin.display(description="transition")
    def transition(self, obj):
        if not obj.new_state:
            return "—"
        return format_html("{} → <b>{}</b>", obj.old_state or "·", obj.new_state)

    @admin.display(description="actor")
    def actor(self, obj):
        if obj.actor_type == "user" and obj.actor_username:
            return f"user:{obj.actor_username}"
        return f"{obj.actor_type}:{obj.actor_id}"

    @admin.display(description="detail / evidence")
    def evidence(self, obj):
        """Folded: what it holds in one line, the JSON when opened (the events filter reads
        it folded too)."""
        if not obj.detail:
            return "—"
        text = json.dumps(obj.detail, indent=1, sort_keys=True, cls=DjangoJSONEncoder)
        keys = ", ".join(sorted(obj.detail)) if isinstance(obj.detail, dict) else "value"
        summary = keys if len(keys) <= 60 else keys[:59] + "…"
        return format_html(
            '<details class="qtg-evidence-box"><summary>{}</summary>'
            '<pre class="qtg-evidence">{}</pre></details>',
            summary,
            text,
        )


def next_steps(movement: MovementRequest, nodes: list) -> list[dict[str, Any]]:
    """What a person may do next on the movement, and who: each action its policies allow
    someone now (asked as the system, which holds every permission and every approver
    group), with the groups holding the action's permission."""
    if movement.request_state in TERMINAL_REQUEST_STATES:
        return []
    groups = tuple(Group.objects.order_by("name").values_list("name", flat=True))
    anyone = Situation(Actor.system("console"), movement, nodes, timezone.now(), None, groups)
    possible = [action for action in ACTIONS.values() if action.refusal(anyone) is None]
    holders = selectors.permission_holders([PERMISSIONS[Action(a.name)] for a in possible])
    steps = []
    for action in possible:
        who = ", ".join(holders[PERMISSIONS[Action(action.name)]]) or "no group holds it"
        if action.name == Action.APPROVE and movement.created_by is not None:
            who += f" (not {movement.created_by.get_username()}: four-eyes)"
        steps.append({"name": action.name, "label": action.label, "who": who})
    return steps


def reservation_of(movement: MovementRequest) -> Any:
    """The movement's reservation (none when validation refused it before the hold)."""
    try:
        return movement.reservation
    except ObjectDoesNotExist:
        return None


@admin.register(MovementRequest)
class MovementRequestAdmin(MovementChangelistAdmin):
    # The page reads: header (the template), plan graph, nodes, events; then the approvals,
    # overrides and deliveries a movement has (an empty one is left out).
    inlines = (NodeInline, EventInline, ApprovalInline, OverrideInline)

    # --- the movement page ------------------------------------------------------------------

    def get_fieldsets(self, request, obj=None):
        # Everything the fields said is in the header, once: no fieldsets repeating it.
        return []

    def get_inlines(self, request, obj):
        # Sections other apps add to the movement page (e.g. callback deliveries).
        return (*self.inlines, *public.movement_page_inlines())

    def get_inline_instances(self, request, obj=None):
        """The nodes and the events always; the other sections only when they have rows (an
        empty table of approvals, overrides or deliveries is height without news)."""
        instances = super().get_inline_instances(request, obj)
        if obj is None:
            return instances
        return [
            inline
            for inline in instances
            if isinstance(inline, NodeInline | EventInline)
            or inline.get_queryset(request)
            .filter(**{_get_foreign_key(self.model, inline.model, inline.fk_name).name: obj})
            .exists()
        ]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        movement = self.get_object(request, unquote(object_id))
        if movement is not None and self.has_view_permission(request, movement):
            extra_context = {**(extra_context or {}), **self._page_context(request, movement)}
        return super().change_view(request, object_id, form_url, extra_context)

    def _page_context(self, request, movement: MovementRequest) -> dict[str, Any]:
        situation = Situation.of(movement, current_nodes(movement), request.user)
        refusals = {name: action.refusal(situation) for name, action in ACTIONS.items()}
        actions = [
            {"action": action, "url": self._action_url(movement, name)}
            for name, action in ACTIONS.items()
            if refusals[name] is None
        ]
        approve = refusals[Action.APPROVE]
        reservation = reservation_of(movement)
        return {
            "attention": [
                {
                    "node_key": entry.node_key,
                    "reason": entry.get_reason_display(),
                    "message": entry.message,
                    "since": entry.since,
                    "snoozed_until": entry.snoozed_until
                    if entry.snoozed_until and not entry.needs_someone(situation.now)
                    else None,
                    "snooze_reason": entry.snooze_reason,
                }
                for entry in movement.attentions.filter(resolved_at__isnull=True).order_by(
                    "since", "pk"
                )
            ],
            "reservation": reservation
            and {
                "state": reservation.state,
                "amount": format_amount(reservation.amount, reservation.asset),
                "asset": reservation.asset,
            },
            "subtitle": f"{movement.short_id} · {movement.template_key} · "
            f"{format_amount(movement.amount, movement.asset)} {movement.asset}",
            "movement": movement,
            "state_badge": request_state_badge(movement.request_state),
            "amount_display": format_amount(movement.amount, movement.asset),
            "movement_actions": actions,
            # An approval is pending and four-eyes keeps this user from giving it.
            "four_eyes_blocked": (
                approve is not None
                and approve.code == Rule.FOUR_EYES
                and policies.awaiting_approval(movement)
            ),
            "approval_open": policies.approval_open(movement, situation.now),
            # The window matters only while the movement waits for its approval.
            "awaiting_approval": policies.awaiting_approval(movement),
            "approval_progress": self.approval_progress(movement),
            "graph": plan_graph(movement, situation.nodes),
            "next_steps": next_steps(movement, situation.nodes),
            "audit_chain": audit.movement_chain_status(movement.pk),
            "params_json": json.dumps(
                movement.params, indent=1, sort_keys=True, cls=DjangoJSONEncoder
            ),
            "terminal": movement.request_state in TERMINAL_REQUEST_STATES,
            # The page reloads itself while the workers may still change it.
            "auto_refresh_seconds": QTG_PAGE_REFRESH_SECONDS
            if in_flight(movement, situation.nodes)
            else None,
            "node_count": len(situation.nodes),
        }

    def _change_url(self, movement) -> str:
        return reverse(
            f"{self.admin_site.name}:movements_movementrequest_change",
            args=[quote(movement.pk)],
        )

    # --- one action on one movement ---------------------------------------------------------

    def get_urls(self):
        return [
            path(
                "<path:object_id>/action/<slug:action_name>/",
                self.admin_site.admin_view(self.action_view),
                name="movements_movementrequest_action",
            ),
            *super().get_urls(),
        ]

    def action_view(self, request, object_id, action_name):
        """GET: the confirmation page (with a form when input is needed). POST: call the
        service; its refusal (permission, four-eyes, stale or illegal) becomes an error
        message and nothing changes."""
        action = ACTIONS.get(action_name)
        if action is None:
            raise Http404(f"no action {action_name!r}")
        movement = self.get_object(request, unquote(object_id))
        if movement is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        if not self.has_view_permission(request, movement):
            raise PermissionDenied
        situation = Situation.of(movement, current_nodes(movement), request.user)
        if request.method == "POST":
            form = action.form(request.POST, situation, posted=True)
            if form is None or form.is_valid():
                data = form.cleaned_data if form is not None else {}
                try:
                    updated = action.run(movement=movement, user=request.user, data=data)
                except QTGError as exc:
                    self.message_user(
                        request, f"{action.label} refused: {exc.message}", messages.ERROR
                    )
                else:
                    proposal = getattr(updated, "proposed_override", None)
                    if proposal is not None:
                        self.message_user(
                            request,
                            format_html(
                                '{} proposed: another supervisor confirms it on the <a href="{}">'
                                "Override proposals</a> page before {}.",
                                action.label,
                                reverse("admin:movements_overrideproposal_changelist"),
                                console_time(proposal.expires_at),
                            ),
                            messages.WARNING,
                        )
                    else:
                        self.message_user(
                            request,
                            f"{action.label}: movement {movement.short_id} is now "
                            f"{updated.request_state}.",
                            messages.SUCCESS,
                        )
                return HttpResponseRedirect(self._change_url(movement))
        else:
            refusal = action.refusal(situation)
            if refusal is not None:
                self.message_user(
                    request, self._unavailable(action, refusal, movement), messages.ERROR
                )
                return HttpResponseRedirect(self._change_url(movement))
            form = action.form(None, situation, posted=False)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"{action.label}: are you sure?",
            "movement": movement,
            "action": action,
            "what_happens": action.describe(situation),
            "form": form,
            "state_badge": request_state_badge(movement.request_state),
            "amount_display": format_amount(movement.amount, movement.asset),
            "change_url": self._change_url(movement),
        }
        return TemplateResponse(
            request, "admin/movements/movementrequest/action_confirm.html", context
        )

    @staticmethod
    def _unavailable(action, refusal: Refusal, movement: MovementRequest) -> str:
        """Why the console does not offer ``action``, in the console's words."""
        if refusal.code == Rule.PERMISSION:
            return (
                f"{action.label}: you do not have the permission {refusal.details['permission']}."
            )
        if refusal.code == Rule.FOUR_EYES:
            return f"{action.label}: four-eyes — you created this movement."
        return f"{action.label} is not possible now: the movement is {movement.request_state}."


@admin.register(RouteTemplate)
class RouteTemplateAdmin(ReadOnlyModelAdmin):
    list_display = ("key", "version", "name", "is_active", "loaded_at", "checksum")
    list_filter = ("key", "is_active")
    readonly_fields = (
        "key",
        "version",
        "checksum",
        "name",
        "description",
        "definition",
        "source_path",
        "is_active",
        "loaded_at",
    )
