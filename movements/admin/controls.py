"""The console's pages for approval policies, the address book and two-person overrides.

Rows change only through services: the add form of a policy or an address proposes it (one
person), an action of a second person activates, approves, rejects or removes it; an override
proposal is confirmed by another supervisor on its own page, with a reason. A refused row is
reported with the policy's reason (``movements.policies``) and the others go through.
"""

import json
from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from movements.admin.actions import reservation_note
from movements.models import (
    AddressBookEntry,
    ApprovalPolicy,
    MovementApproval,
    OverrideAction,
    OverrideProposal,
)
from movements.policies import (
    DECIDE_ADDRESS_PERMISSION,
    DECIDE_POLICY_PERMISSION,
    PROPOSE_ADDRESS_PERMISSION,
    PROPOSE_POLICY_PERMISSION,
    override_confirm_refusal,
)
from movements.selectors import current_nodes
from movements.services.address_book import (
    address_approve,
    address_propose,
    address_reject,
    address_remove,
)
from movements.services.approvals import (
    approval_policy_activate,
    approval_policy_propose,
    approval_policy_reject,
    approval_policy_validate,
)
from movements.services.overrides import override_confirm
from qtg.core import money
from qtg.core.actors import Actor
from qtg.core.admin import PeopleByName, ReadOnlyInline
from qtg.core.errors import InvalidInput, QTGError
from qtg.core.times import console_time

VIEW_MOVEMENTS = "movements.view_movementrequest"


def _each(
    model_admin: admin.ModelAdmin,
    request,
    queryset: QuerySet,
    service: Callable[..., Any],
    keyword: str,
    done: str,
) -> None:
    """Run ``service`` on each selected row as the user; report what went through and what
    was refused (with the reason)."""
    actor = Actor.for_user(request.user)
    ok, refused = 0, []
    for row in queryset:
        try:
            service(**{keyword: row.pk, "actor": actor})
            ok += 1
        except QTGError as exc:
            refused.append(f"{row}: {exc.message}")
    if ok:
        model_admin.message_user(request, f"{ok} {done}", messages.SUCCESS)
    for line in refused:
        model_admin.message_user(request, line, messages.ERROR)


class ProposeOnlyAdmin(PeopleByName, admin.ModelAdmin):
    """Rows are proposed through the add form and never edited afterwards."""

    propose_permission = ""
    decide_permission = ""

    def has_add_permission(self, request):
        return request.user.has_perm(self.propose_permission)

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_decide_permission(self, request):
        return request.user.has_perm(self.decide_permission)

    def _replace(self, obj, created) -> None:
        # The admin's add view goes on with ``obj`` (its redirect, its log entry).
        obj.__dict__.update({k: v for k, v in created.__dict__.items() if k != "_state"})
        obj._state.adding = False


class ApprovalPolicyForm(forms.ModelForm):
    class Meta:
        model = ApprovalPolicy
        fields = [
            "key",
            "asset",
            "template_key",
            "destination",
            "amount_above",
            "amount_up_to",
            "approvals_required",
            "required_groups",
            "note",
        ]

    def clean(self):
        cleaned = super().clean()
        try:
            approval_policy_validate(cleaned)
        except InvalidInput as exc:
            for field, problems in exc.details.items():
                self.add_error(field if field in self.fields else None, "; ".join(problems))
        return cleaned


@admin.register(ApprovalPolicy)
class ApprovalPolicyAdmin(ProposeOnlyAdmin):
    form = ApprovalPolicyForm
    propose_permission = PROPOSE_POLICY_PERMISSION
    decide_permission = DECIDE_POLICY_PERMISSION
    list_display = (
        "key",
        "version",
        "status",
        "covers",
        "approvals_required",
        "required_groups",
        "proposed_by",
        "decided_by",
        "decided_at",
    )
    list_filter = ("status", "key")
    list_select_related = ("proposed_by", "decided_by")
    actions = ("activate_selected", "reject_selected")
    readonly_fields = ("status", "proposed_by", "proposed_at", "decided_by", "decided_at")

    @admin.display(description="covers")
    def covers(self, policy: ApprovalPolicy) -> str:
        parts = [
            policy.asset or "any asset",
            policy.template_key or "any template",
            f"to {policy.destination}" if policy.destination else "any destination",
        ]
        if policy.amount_above is not None:
            parts.append(f"> {policy.amount_above}")
        if policy.amount_up_to is not None:
            parts.append(f"<= {policy.amount_up_to}")
        return ", ".join(parts)

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        created = approval_policy_propose(
            actor=Actor.for_user(request.user),
            key=data["key"],
            approvals_required=data["approvals_required"],
            required_groups=data.get("required_groups") or [],
            asset=data.get("asset") or "",
            template_key=data.get("template_key") or "",
            destination=data.get("destination") or "",
            amount_above=data.get("amount_above"),
            amount_up_to=data.get("amount_up_to"),
            note=data.get("note") or "",
        )
        self._replace(obj, created)
        self.message_user(
            request,
            f"{created} proposed: it takes effect when someone else activates it",
            messages.INFO,
        )

    @admin.action(description="Activate selected versions (second person)", permissions=["decide"])
    def activate_selected(self, request, queryset):
        _each(self, request, queryset, approval_policy_activate, "policy", "activated")

    @admin.action(description="Reject selected proposals", permissions=["decide"])
    def reject_selected(self, request, queryset):
        _each(self, request, queryset, approval_policy_reject, "policy", "rejected")


class AddressBookEntryForm(forms.ModelForm):
    class Meta:
        model = AddressBookEntry
        fields = ["asset", "network", "address", "label"]


@admin.register(AddressBookEntry)
class AddressBookEntryAdmin(ProposeOnlyAdmin):
    form = AddressBookEntryForm
    propose_permission = PROPOSE_ADDRESS_PERMISSION
    decide_permission = DECIDE_ADDRESS_PERMISSION
    list_display = (
        "label",
        "address",
        "asset",
        "network",
        "status",
        "usable",
        "proposed_by",
        "decided_by",
    )
    list_filter = ("status", "asset", "network")
    search_fields = ("label", "address")
    list_select_related = ("proposed_by", "decided_by")
    actions = ("approve_selected", "reject_selected", "remove_selected")
    readonly_fields = (
        "status",
        "proposed_by",
        "proposed_at",
        "decided_by",
        "decided_at",
        "usable_from",
        "removed_at",
    )

    @admin.display(description="usable")
    def usable(self, entry: AddressBookEntry) -> str:
        if entry.status != "ACTIVE":
            return "—"
        if entry.usable_from and entry.usable_from > timezone.now():
            return f"cool-down until {console_time(entry.usable_from)}"
        return "yes"

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        created = address_propose(
            actor=Actor.for_user(request.user),
            asset=data["asset"],
            network=data.get("network") or "",
            address=data["address"],
            label=data["label"],
        )
        self._replace(obj, created)
        self.message_user(
            request,
            f"{created} proposed: someone else approves it, then the cool-down runs",
            messages.INFO,
        )

    @admin.action(description="Approve selected addresses (second person)", permissions=["decide"])
    def approve_selected(self, request, queryset):
        _each(self, request, queryset, address_approve, "entry", "approved")

    @admin.action(description="Reject selected proposals", permissions=["decide"])
    def reject_selected(self, request, queryset):
        _each(self, request, queryset, address_reject, "entry", "rejected")

    @admin.action(description="Remove selected addresses from the book", permissions=["decide"])
    def remove_selected(self, request, queryset):
        _each(self, request, queryset, address_remove, "entry", "removed")


def proposal_status(proposal: OverrideProposal) -> str:
    return "EXPIRED" if proposal.is_expired() else proposal.status


@admin.register(OverrideProposal)
class OverrideProposalAdmin(PeopleByName, admin.ModelAdmin):
    list_display = (
        "proposed_at",
        "movement",
        "action",
        "node_key",
        "state",
        "proposed_by",
        "expires_at",
        "confirmed_by",
        "reason",
    )
    list_filter = ("action", "status")
    list_select_related = ("request", "proposed_by", "confirmed_by")
    # Confirming is never a one-click bulk action: each has its own page with the proposal,
    # its evidence and the confirmer's reason.
    actions = None
    ordering = ("-proposed_at",)
    fields = (
        "request",
        "action",
        "node_key",
        "reason",
        "evidence",
        "status",
        "proposed_by",
        "proposed_at",
        "expires_at",
        "confirmed_by",
        "confirmed_at",
    )

    def has_add_permission(self, request):
        return False  # proposed from the movement's page

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_list_display(self, request):
        actor, now = Actor.for_user(request.user), timezone.now()

        @admin.display(description="confirm")
        def confirm(proposal: OverrideProposal) -> str:
            if override_confirm_refusal(actor=actor, proposal=proposal, now=now) is not None:
                return "—"
            return format_html(
                '<a class="button" href="{}" data-confirm="{}">Confirm…</a>',
                self._confirm_url(proposal.pk),
                proposal.pk,
            )

        return (*self.list_display, confirm)

    def _confirm_url(self, pk) -> str:
        return reverse(
            f"{self.admin_site.name}:movements_overrideproposal_confirm", args=[quote(pk)]
        )

    @admin.display(description="movement")
    def movement(self, proposal: OverrideProposal) -> str:
        url = reverse("admin:movements_movementrequest_change", args=[proposal.request_id])
        return format_html('<a href="{}">{}</a>', url, proposal.request.short_id)

    @admin.display(description="status")
    def state(self, proposal: OverrideProposal) -> str:
        return proposal_status(proposal)

    def get_urls(self):
        return [
            path(
                "<path:object_id>/confirm/",
                self.admin_site.admin_view(self.confirm_view),
                name="movements_overrideproposal_confirm",
            ),
            *super().get_urls(),
        ]

    def confirm_view(self, request, object_id):
        """GET: the proposal, its evidence and what confirming it does now, with a reason to
        give. POST: ``override_confirm`` (which asks every rule again); a refusal is an error
        message and changes nothing."""
        proposal = self.get_object(request, unquote(object_id))
        if proposal is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        if not self.has_view_permission(request, proposal):
            raise PermissionDenied
        changelist = reverse(f"{self.admin_site.name}:movements_overrideproposal_changelist")
        movement_url = reverse(
            f"{self.admin_site.name}:movements_movementrequest_change",
            args=[quote(proposal.request_id)],
        )
        refusal = override_confirm_refusal(
            actor=Actor.for_user(request.user), proposal=proposal, now=timezone.now()
        )
        form = ConfirmOverrideForm(request.POST if request.method == "POST" else None)
        if request.method == "POST" and form.is_valid():
            try:
                movement = override_confirm(
                    proposal=proposal.pk,
                    actor=Actor.for_user(request.user),
                    reason=form.cleaned_data["reason"],
                )
            except QTGError as exc:
                self.message_user(request, f"Confirm refused: {exc.message}", messages.ERROR)
                return HttpResponseRedirect(changelist)
            self.message_user(
                request,
                f"{proposal.get_action_display()} confirmed and carried out: movement "
                f"{movement.short_id} is now {movement.request_state}.",
                messages.SUCCESS,
            )
            return HttpResponseRedirect(movement_url)
        if request.method == "GET" and refusal is not None:
            self.message_user(request, f"Confirm: {refusal.message}", messages.ERROR)
            return HttpResponseRedirect(changelist)
        movement = proposal.request
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Confirm {proposal.get_action_display()}: are you sure?",
            "proposal": proposal,
            "proposal_status": proposal_status(proposal),
            "movement": movement,
            "movement_url": movement_url,
            "changelist_url": changelist,
            "amount_display": money.display_amount(movement.amount, movement.asset),
            "what_happens": override_consequences(proposal, current_nodes(movement)),
            "evidence": json.dumps(proposal.evidence, indent=2, sort_keys=True, default=str)
            if proposal.evidence
            else "",
            "form": form,
        }
        return TemplateResponse(request, "admin/movements/overrideproposal/confirm.html", context)


class ConfirmOverrideForm(forms.Form):
    reason = forms.CharField(
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 70}),
        help_text="What you checked yourself before confirming. Recorded in the audit trail.",
    )


def override_consequences(proposal: OverrideProposal, nodes) -> str:
    """What carrying the proposal out does to the movement and its reservation, now."""
    if proposal.action == OverrideAction.FORCE_COMPLETE:
        parts = ["The movement is marked COMPLETED.", reservation_note(nodes, completing=True)]
    elif proposal.action == OverrideAction.FORCE_FAIL:
        parts = ["The movement is marked FAILED.", reservation_note(nodes, completing=False)]
    elif proposal.action == OverrideAction.CANCEL_IN_TRANSIT:
        parts = [
            "The movement is CANCELLED and nobody watches the funds in transit any more.",
            reservation_note(nodes, completing=False),
        ]
    else:
        parts = [
            f"{proposal.node_key} is resolved as FAILED (it never happened), with the "
            "proposal's evidence, and the movement carries on from there."
        ]
    return " ".join(
        [*parts, "It happens as soon as you confirm; the action's own rules are asked again."]
    )


class ApprovalInline(ReadOnlyInline):
    model = MovementApproval
    view_permission = VIEW_MOVEMENTS
    verbose_name_plural = "approvals (each bound to a hash of what was approved)"
    fields = ("approver", "approved_at", "groups", "policy", "binding", "void")
    readonly_fields = fields

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("policy")

    @admin.display(description="binding hash")
    def binding(self, approval: MovementApproval) -> str:
        return approval.binding_hash[:16]

    @admin.display(description="void")
    def void(self, approval: MovementApproval) -> str:
        if approval.void_at is None:
            return "—"
        return f"VOID at {console_time(approval.void_at)}: {approval.void_reason}"


class OverrideInline(ReadOnlyInline):
    model = OverrideProposal
    view_permission = VIEW_MOVEMENTS
    verbose_name_plural = "two-person overrides"
    fields = ("action", "node_key", "state", "proposed_by", "expires_at", "confirmed_by", "reason")
    readonly_fields = fields

    @admin.display(description="status")
    def state(self, proposal: OverrideProposal) -> str:
        return proposal_status(proposal)
