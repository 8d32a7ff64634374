"""The operator console: movement requests in the Django admin.

Nothing here writes state. The movement page and the list are read-only; every change is an
action (``movements.admin_actions``) that calls a service, after a confirmation page, and the
service authorises and refuses. What the console shows, hides and explains comes from the same
policies the services enforce (``movements.policies``).
"""

import json
import uuid
from decimal import Decimal
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth import get_user_model
from django.core.exceptions import ObjectDoesNotExist, PermissionDenied
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import CharField, OuterRef, Prefetch, Q, Subquery
from django.db.models.functions import Cast
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.timesince import timesince

from movements import audit, policies, public
from movements.admin_actions import ACTIONS, ReasonForm, Situation, available_actions
from movements.admin_controls import ApprovalInline, OverrideInline
from movements.admin_filters import (
    AssetFilter,
    CreatedRangeFilter,
    StateFilter,
    TemplateFilter,
    needs_me_q,
)
from movements.admin_graph import NODE_COLOURS, REQUEST_COLOURS, plan_graph
from movements.models import (
    MovementApproval,
    MovementAttention,
    MovementEvent,
    MovementRequest,
    MovementRequestNode,
    RouteTemplate,
)
from movements.policies import Action, Rule
from movements.selectors import current_nodes
from movements.services import movement_approve, movement_reject
from movements.states import IN_FLIGHT_NODE_STATES, RequestState
from qtg.core import money
from qtg.core.actors import Actor
from qtg.core.admin import ReadOnlyInline as BaseReadOnlyInline
from qtg.core.admin import ReadOnlyModelAdmin, bulk_confirmation_context
from qtg.core.errors import QTGError
from qtg.core.policies import Refusal

# A bulk action acts on at most this many movements at once (each is its own transaction).
BULK_LIMIT = 500
# How often a movement page reloads itself while something is in flight.
QTG_PAGE_REFRESH_SECONDS = 5


def in_flight(movement: MovementRequest, nodes: list) -> bool:
    """Work is under way that the workers will move on by themselves: the movement is
    approved or executing, or a node waits on a venue (running or UNKNOWN)."""
    return movement.request_state in (RequestState.APPROVED, RequestState.EXECUTING) or any(
        node.node_state in IN_FLIGHT_NODE_STATES for node in nodes
    )


def _badge(state: str, colours: dict[str, tuple[str, str]]) -> str:
    background, colour = colours.get(state, ("#f1f5f9", "#334155"))
    return format_html(
        '<span class="qtg-badge" style="background:{};color:{};border-color:{}">{}</span>',
        background,
        colour,
        colour,
        state,
    )


def request_state_badge(state: str) -> str:
    return _badge(state, REQUEST_COLOURS)


def node_state_badge(state: str) -> str:
    return _badge(state, NODE_COLOURS)


def format_amount(amount: Decimal) -> str:
    return money.format_amount(amount, grouping=True) or ""


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
            f"{obj.lease_owner} until {obj.lease_expires_at:%Y-%m-%d %H:%M:%S} "
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
        if not obj.detail:
            return "—"
        text = json.dumps(obj.detail, indent=1, sort_keys=True, cls=DjangoJSONEncoder)
        return format_html('<pre class="qtg-evidence">{}</pre>', text)


def reservation_of(movement: MovementRequest) -> Any:
    """The movement's reservation (none when validation refused it before the hold)."""
    try:
        return movement.reservation
    except ObjectDoesNotExist:
        return None


class MovementChangeList(ChangeList):
    def apply_select_related(self, qs):
        # The row actions need each movement's live nodes: one query for the whole page.
        return (
            super()
            .apply_select_related(qs)
            .prefetch_related(
                Prefetch(
                    "nodes",
                    queryset=MovementRequestNode.objects.current().order_by("pk"),
                    to_attr="live_nodes",
                ),
                Prefetch(
                    "attentions",
                    queryset=MovementAttention.objects.filter(resolved_at__isnull=True),
                    to_attr="open_attentions_list",
                ),
                Prefetch(
                    "approvals",
                    queryset=MovementApproval.objects.filter(void_at__isnull=True),
                    to_attr="valid_approvals_list",
                ),
            )
        )


@admin.register(MovementRequest)
class MovementRequestAdmin(ReadOnlyModelAdmin):
    list_display_links = ("short_id",)
    list_filter = (StateFilter, TemplateFilter, AssetFilter, CreatedRangeFilter)
    list_select_related = ("created_by",)
    list_per_page = 50
    show_full_result_count = False
    search_fields = ("idempotency_key",)
    search_help_text = (
        "Movement id (or its first 8 characters), idempotency key, or a node's external "
        "reference (txid / withdrawal id)."
    )
    ordering = ("-created_at",)
    actions = ("approve_selected", "reject_selected")
    inlines = (NodeInline, ApprovalInline, OverrideInline, EventInline)
    readonly_fields = ("amount_display", "approval_progress", "audit_chain")
    fieldsets = (
        (
            "Movement",
            {
                "fields": (
                    "id",
                    "template_key",
                    "template_version",
                    "asset",
                    "amount_display",
                    "source",
                    "destination",
                    "params",
                    "idempotency_key",
                )
            },
        ),
        (
            "Approval",
            {
                "fields": (
                    "created_by",
                    "created_at",
                    "approval_progress",
                    "approval_policy",
                    "approved_by",
                    "approved_at",
                    "expires_at",
                )
            },
        ),
        (
            "State",
            {
                "fields": (
                    "request_state",
                    "state_changed_at",
                    "current_frontier",
                    "failure_reason",
                    "updated_at",
                    "audit_chain",
                )
            },
        ),
    )

    # --- the list ---------------------------------------------------------------------------

    def get_inlines(self, request, obj):
        # Sections other apps add to the movement page (e.g. callback deliveries).
        return (*self.inlines, *public.movement_page_inlines())

    def get_changelist(self, request, **kwargs):
        return MovementChangeList

    def get_list_display(self, request):
        user = request.user

        @admin.display(description="actions")
        def row_actions(movement):
            nodes = getattr(movement, "live_nodes", None)
            if nodes is None:
                nodes = current_nodes(movement)
            return format_html_join(
                " ",
                '<a class="button qtg-action{}" href="{}">{}</a>',
                (
                    (
                        " qtg-danger" if a.dangerous else "",
                        self._action_url(movement, a.name),
                        a.label,
                    )
                    for a in available_actions(Situation.of(movement, nodes, user))
                ),
            )

        return (
            "short_id",
            "state_badge",
            row_actions,
            "amount_display",
            "asset",
            "template_key",
            "created_by",
            "age",
            "frontier",
        )

    @admin.display(description="id", ordering="id")
    def short_id(self, obj):
        return obj.short_id

    @admin.display(description="audit chain")
    def audit_chain(self, obj) -> str:
        """Its events and approvals verified with the audit key and the checkpoints, or
        where the chain breaks (movements/audit.py)."""
        return audit.movement_chain_status(obj.pk)

    @admin.display(description="approvals")
    def approval_progress(self, obj) -> str:
        """n of m approvals, and the groups still missing (the policy's quorum)."""
        approvals = policies.valid_approvals(obj)
        text = f"{len(approvals)} of {obj.approvals_required} approvals"
        if missing := policies.missing_groups(obj, approvals):
            text += f"; still needs someone from {', '.join(missing)}"
        return text

    @admin.display(description="state", ordering="request_state")
    def state_badge(self, obj):
        now = timezone.now()
        entries = [
            entry for entry in getattr(obj, "open_attentions_list", []) if entry.needs_someone(now)
        ]
        badge = request_state_badge(obj.request_state)
        if obj.request_state == RequestState.PENDING_APPROVAL and obj.approvals_required > 1:
            badge = format_html(
                '{}<div class="qtg-progress">{}</div>', badge, self.approval_progress(obj)
            )
        if not entries:
            return badge
        flags = format_html_join(
            "",
            '<div class="qtg-warn" title="{}">⚑ {}: {}</div>',
            ((e.message, e.get_reason_display(), e.node_key) for e in entries),
        )
        return format_html("{}{}", badge, flags)

    @admin.display(description="amount", ordering="amount")
    def amount_display(self, obj):
        return format_amount(obj.amount)

    @admin.display(description="age", ordering="-created_at")
    def age(self, obj):
        return timesince(obj.created_at, timezone.now()).split(",")[0]

    @admin.display(description="frontier")
    def frontier(self, obj):
        return ", ".join(obj.current_frontier or []) or "—"

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        match = Q(idempotency_key=term) | Q(
            pk__in=MovementRequestNode.objects.filter(external_ref=term).values("request_id")
        )
        try:
            match |= Q(pk=uuid.UUID(term))
        except ValueError:
            compact = term.replace("-", "")
            if 8 <= len(compact) < 32 and all(c in "0123456789abcdefABCDEF" for c in compact):
                match |= Q(pk__istartswith=term)
        return queryset.filter(match), False

    def changelist_view(self, request, extra_context=None):
        extra_context = {
            **(extra_context or {}),
            "needs_me_count": MovementRequest.objects.filter(needs_me_q()).count(),
            "needs_me_query": "?state=needs_me",
        }
        return super().changelist_view(request, extra_context)

    # --- the movement page ------------------------------------------------------------------

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
                "amount": format_amount(reservation.amount),
                "asset": reservation.asset,
            },
            "subtitle": f"{movement.short_id} · {movement.template_key} · "
            f"{format_amount(movement.amount)} {movement.asset}",
            "movement": movement,
            "state_badge": request_state_badge(movement.request_state),
            "amount_display": format_amount(movement.amount),
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
            # The page reloads itself while the workers may still change it.
            "auto_refresh_seconds": QTG_PAGE_REFRESH_SECONDS
            if in_flight(movement, situation.nodes)
            else None,
            "node_count": len(situation.nodes),
        }

    def _action_url(self, movement, name: str) -> str:
        return reverse(
            f"{self.admin_site.name}:movements_movementrequest_action",
            args=[quote(movement.pk), name],
        )

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
                            f"{action.label} proposed: another supervisor confirms it on the "
                            f"Override proposals page before "
                            f"{proposal.expires_at:%Y-%m-%d %H:%M} UTC.",
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
            "amount_display": format_amount(movement.amount),
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

    # --- bulk approve / reject from the list --------------------------------------------------

    def has_approve_permission(self, request):
        return policies.permission_refusal(Actor.for_user(request.user), Action.APPROVE) is None

    def has_reject_permission(self, request):
        return policies.permission_refusal(Actor.for_user(request.user), Action.REJECT) is None

    @admin.action(description="Approve selected movements…", permissions=["approve"])
    def approve_selected(self, request, queryset):
        return self._bulk(request, queryset, kind="approve")

    @admin.action(description="Reject selected movements…", permissions=["reject"])
    def reject_selected(self, request, queryset):
        return self._bulk(request, queryset, kind="reject")

    def _bulk(self, request, queryset, *, kind: str):
        pks = list(queryset.order_by().values_list("pk", flat=True)[: BULK_LIMIT + 1])
        if len(pks) > BULK_LIMIT:
            self.message_user(
                request,
                f"Select at most {BULK_LIMIT} movements for a bulk {kind}.",
                messages.ERROR,
            )
            return None
        confirmed = request.POST.get("post") == "yes"
        form = ReasonForm(request.POST if confirmed else None)
        if confirmed and kind == "approve":
            return self._bulk_perform(request, pks, kind=kind, reason="")
        if confirmed and form.is_valid():
            return self._bulk_perform(request, pks, kind=kind, reason=form.cleaned_data["reason"])
        rows = list(
            MovementRequest.objects.filter(pk__in=pks)
            .select_related("created_by")
            .order_by("-created_at")
        )
        actor, now = Actor.for_user(request.user), timezone.now()
        eligible, skipped = [], []
        for row in rows:
            if kind == "approve":
                refusal = policies.approve_refusal(actor=actor, movement=row, now=now)
            else:
                refusal = policies.reject_refusal(actor=actor, movement=row)
            if refusal is None:
                eligible.append(row)
            else:
                skipped.append((row, self._skip_reason(refusal, row)))
        totals: dict[str, Decimal] = {}
        for row in eligible:
            totals[row.asset] = totals.get(row.asset, Decimal(0)) + row.amount
        context = bulk_confirmation_context(
            self,
            request,
            title=f"{kind.capitalize()} {len(eligible)} movements: are you sure?",
            # The page always offers the form: the service refuses what cannot be done now.
            has_items=True,
            dangerous=kind == "reject",
            kind=kind,
            action=f"{kind}_selected",
            selected=pks,
            eligible=[(row, format_amount(row.amount)) for row in eligible],
            skipped=[(row, format_amount(row.amount), why) for row, why in skipped],
            totals=[(asset, format_amount(total)) for asset, total in sorted(totals.items())],
            form=form if kind == "reject" else None,
        )
        return TemplateResponse(
            request, "admin/movements/movementrequest/bulk_confirm.html", context
        )

    @staticmethod
    def _skip_reason(refusal: Refusal, movement: MovementRequest) -> str:
        """Why a selected movement is left out of a bulk action, in the console's words."""
        if refusal.code == Rule.FOUR_EYES:
            return "four-eyes: you created it"
        if refusal.code == Rule.STATE:
            return f"it is {movement.request_state}"
        return refusal.message

    def _bulk_perform(self, request, pks: list, *, kind: str, reason: str) -> None:
        actor = Actor.for_user(request.user)
        done, refused = 0, []
        for pk in pks:
            try:
                if kind == "approve":
                    movement_approve(request=pk, actor=actor)
                else:
                    movement_reject(request=pk, actor=actor, reason=reason)
                done += 1
            except QTGError as exc:
                refused.append(f"{str(pk)[:8]}: {exc.message}")
        verb = "Approved" if kind == "approve" else "Rejected"
        if done:
            self.message_user(request, f"{verb} {done} movement(s).", messages.SUCCESS)
        if refused:
            shown = "; ".join(refused[:10]) + (" …" if len(refused) > 10 else "")
            self.message_user(request, f"{len(refused)} refused — {shown}", messages.ERROR)
        return None


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
