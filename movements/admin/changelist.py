"""The movements list of the operator console: its columns (state badges, approvals, the
actions each row's operator may take), filters, search, and bulk approve / reject.

Nothing here writes state: each row action opens the movement's action page
(``movements.admin.movement``), and the bulk actions call the services after a confirmation
page, reporting each refusal in the console's words.
"""

import csv
import uuid
from datetime import UTC
from decimal import Decimal

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import quote
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import StreamingHttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.timesince import timesince
from django.utils.translation import gettext

from movements import policies, selectors
from movements.admin.actions import PageActor, ReasonForm, Situation, available_actions
from movements.admin.filters import (
    NEEDS_ME,
    AssetFilter,
    CreatedRangeFilter,
    CreatorFilter,
    NeedsMePaginator,
    StateFilter,
    TemplateFilter,
    VenueFilter,
    needs_me_count,
)
from movements.admin.graph import NODE_COLOURS, REQUEST_COLOURS
from movements.models import (
    MovementRequest,
    MovementRequestNode,
)
from movements.policies import Action, Rule
from movements.selectors import current_nodes
from movements.services import movement_approve, movement_reject
from movements.states import RequestState
from qtg.core import money
from qtg.core.actors import Actor
from qtg.core.admin import ReadOnlyModelAdmin, bulk_confirmation_context
from qtg.core.errors import QTGError
from qtg.core.policies import Refusal

# The list fetches itself this often and swaps its rows in (not while rows are ticked).
LIST_REFRESH_SECONDS = 15
# A bulk action acts on at most this many movements at once (each is its own transaction).
BULK_LIMIT = 500


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


def format_amount(amount: Decimal, asset: str) -> str:
    """An amount as the console shows it (the asset's decimals, thousands separators)."""
    return money.display_amount(amount, asset)


class MovementChangeList(ChangeList):
    def apply_select_related(self, qs):
        # The row actions need each movement's live nodes: one query for the whole page.
        return selectors.with_decision_facts(super().apply_select_related(qs))


class MovementChangelistAdmin(ReadOnlyModelAdmin):
    """The list half of the movement admin (``MovementRequestAdmin`` adds the page)."""

    list_display_links = ("short_id",)
    list_filter = (
        StateFilter,
        TemplateFilter,
        AssetFilter,
        VenueFilter,
        CreatorFilter,
        CreatedRangeFilter,
    )
    list_select_related = ("created_by",)
    list_per_page = 50
    show_full_result_count = False
    search_fields = ("idempotency_key",)
    search_help_text = (
        "Movement id (or its first 8 characters), idempotency key, a node's external "
        "reference (txid / withdrawal id), an asset, a venue or address (source or "
        "destination), or the creator's username."
    )
    ordering = ("-created_at",)
    actions = ("approve_selected", "reject_selected")

    def get_changelist(self, request, **kwargs):
        return MovementChangeList

    def get_paginator(self, request, queryset, per_page, orphans=0, allow_empty_first_page=True):
        if request.GET.get(StateFilter.parameter_name) == NEEDS_ME:
            return NeedsMePaginator(queryset, per_page, orphans, allow_empty_first_page)
        return super().get_paginator(request, queryset, per_page, orphans, allow_empty_first_page)

    def get_list_display(self, request):
        user = request.user
        # Read once for the page: the approve action of every row asks for them.
        groups = tuple(selectors.actor_groups(Actor.for_user(user)))
        actor = PageActor.for_user(user)

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
                    for a in available_actions(
                        Situation.of(movement, nodes, user, groups=groups, actor=actor)
                    )
                ),
            )

        return (
            "short_id",
            "state_badge",
            row_actions,
            "amount_display",
            "route",
            "created_by",
            "in_state",
            "reason",
            "frontier",
        )

    def action_checkbox(self, obj):
        """The row's checkbox, exactly as Django's ``action_checkbox`` renders it, written out
        instead of rendered through the form widget's template once per row."""
        return format_html(
            '<input type="checkbox" name="{}" value="{}" class="action-select" aria-label="{}">',
            helpers.ACTION_CHECKBOX_NAME,
            str(obj.pk),
            format_html(gettext("Select this object for an action - {}"), str(obj)),
        )

    @admin.display(description="id", ordering="id")
    def short_id(self, obj):
        return obj.short_id

    @admin.display(description="approvals")
    def approval_progress(self, obj) -> str:
        """n of m approvals, and the groups still missing (the policy's quorum)."""
        approvals = selectors.valid_approvals(obj)
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
        return format_html(
            '<span class="qtg-num">{}</span> {}', format_amount(obj.amount, obj.asset), obj.asset
        )

    @admin.display(description="from → to")
    def route(self, obj):
        return format_html(
            '{} → {}<div class="qtg-note">{}</div>', obj.source, obj.destination, obj.template_key
        )

    @admin.display(description="in state", ordering="state_changed_at")
    def in_state(self, obj):
        return timesince(obj.state_changed_at, timezone.now()).split(",")[0]

    @admin.display(description="reason")
    def reason(self, obj):
        """Why it ended or waits: the failure reason, else the oldest open attention."""
        if obj.failure_reason:
            text = obj.failure_reason
        else:
            entries = sorted(getattr(obj, "open_attentions_list", []), key=lambda e: e.since)
            text = entries[0].message if entries else ""
        if not text:
            return "—"
        short = text if len(text) <= 80 else text[:79] + "…"
        return format_html('<span title="{}">{}</span>', text, short)

    @admin.display(description="frontier")
    def frontier(self, obj):
        return ", ".join(obj.current_frontier or []) or "—"

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        match = (
            Q(idempotency_key=term)
            | Q(pk__in=MovementRequestNode.objects.filter(external_ref=term).values("request_id"))
            | Q(asset=term.upper())
            | Q(source=term)
            | Q(destination=term)
            # The creator by id, not through a join with the users: a join under the OR would
            # read every movement (and so would the paginator's count).
            | Q(created_by__in=get_user_model().objects.filter(username=term).values("pk"))
        )
        try:
            match |= Q(pk=uuid.UUID(term))
        except ValueError:
            compact = term.replace("-", "")
            if 8 <= len(compact) < 32 and all(c in "0123456789abcdefABCDEF" for c in compact):
                match |= Q(pk__istartswith=term)
        return queryset.filter(match), False

    # --- CSV export of the filtered list ---------------------------------------------------

    CSV_COLUMNS = (
        "id",
        "state",
        "asset",
        "amount",
        "source",
        "destination",
        "template",
        "created_by",
        "created_at_utc",
        "state_changed_at_utc",
        "failure_reason",
    )
    # Rows read from the database per round trip while streaming.
    CSV_CHUNK = 2000

    def get_urls(self):
        return [
            path(
                "export.csv",
                self.admin_site.admin_view(self.export_csv_view),
                name="movements_movementrequest_export",
            ),
            *super().get_urls(),
        ]

    def export_csv_view(self, request):
        """GET export.csv?<the list's query>: every movement the list shows with these filters
        and this search (not only the page), streamed as CSV, times in UTC."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        changelist = self.get_changelist_instance(request)
        rows = (
            changelist.queryset.order_by("-created_at", "pk")
            .values_list(
                "pk",
                "request_state",
                "asset",
                "amount",
                "source",
                "destination",
                "template_key",
                "created_by__username",
                "created_at",
                "state_changed_at",
                "failure_reason",
            )
            .iterator(chunk_size=self.CSV_CHUNK)
        )

        class Echo:
            def write(self, value):
                return value

        writer = csv.writer(Echo())

        def lines():
            yield writer.writerow(self.CSV_COLUMNS)
            for row in rows:
                (pk, state, asset, amount, source, dest, tpl, who, created, changed, why) = row
                yield writer.writerow(
                    [
                        pk,
                        state,
                        asset,
                        money.format_amount(amount),
                        source,
                        dest,
                        tpl,
                        who or "",
                        created.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"),
                        changed.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"),
                        why,
                    ]
                )

        stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
        response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="movements-{stamp}.csv"'
        return response

    def changelist_view(self, request, extra_context=None):
        query = request.GET.urlencode()
        extra_context = {
            **(extra_context or {}),
            "live_seconds": LIST_REFRESH_SECONDS,
            "export_url": reverse(f"{self.admin_site.name}:movements_movementrequest_export")
            + (f"?{query}" if query else ""),
            "needs_me_count": needs_me_count(),
            "needs_me_query": "?state=needs_me",
        }
        return super().changelist_view(request, extra_context)

    def _action_url(self, movement, name: str) -> str:
        return reverse(
            f"{self.admin_site.name}:movements_movementrequest_action",
            args=[quote(movement.pk), name],
        )

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
        groups = selectors.actor_groups(actor)
        eligible, skipped = [], []
        for row in rows:
            if kind == "approve":
                refusal = policies.approve_refusal(
                    actor=actor,
                    movement=row,
                    now=now,
                    approvals=selectors.valid_approvals(row),
                    approver_groups=groups,
                )
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
            eligible=[(row, format_amount(row.amount, row.asset)) for row in eligible],
            skipped=[(row, format_amount(row.amount, row.asset), why) for row, why in skipped],
            totals=[
                (asset, format_amount(total, asset)) for asset, total in sorted(totals.items())
            ],
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
