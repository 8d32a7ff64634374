"""The console's pages for approval policies, the address book and two-person overrides.

Rows change only through services: the add form of a policy or an address proposes it (one
person), an action of a second person activates, approves, rejects or removes it; an override
proposal is confirmed by an action of another supervisor. A refused row is reported with the
policy's reason (``movements.policies``) and the others go through.
"""

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from movements.models import (
    AddressBookEntry,
    ApprovalPolicy,
    MovementApproval,
    OverrideProposal,
)
from movements.policies import (
    CONFIRM_OVERRIDE_PERMISSION,
    DECIDE_ADDRESS_PERMISSION,
    DECIDE_POLICY_PERMISSION,
    PROPOSE_ADDRESS_PERMISSION,
    PROPOSE_POLICY_PERMISSION,
)
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
from qtg.core.actors import Actor
from qtg.core.admin import ReadOnlyInline
from qtg.core.errors import InvalidInput, QTGError

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


class ProposeOnlyAdmin(admin.ModelAdmin):
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
            return f"cool-down until {entry.usable_from:%Y-%m-%d %H:%M}"
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
class OverrideProposalAdmin(admin.ModelAdmin):
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
    actions = ("confirm_selected",)
    ordering = ("-proposed_at",)

    def has_add_permission(self, request):
        return False  # proposed from the movement's page

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_confirm_permission(self, request):
        return request.user.has_perm(CONFIRM_OVERRIDE_PERMISSION)

    @admin.display(description="movement")
    def movement(self, proposal: OverrideProposal) -> str:
        url = reverse("admin:movements_movementrequest_change", args=[proposal.request_id])
        return format_html('<a href="{}">{}</a>', url, proposal.request.short_id)

    @admin.display(description="status")
    def state(self, proposal: OverrideProposal) -> str:
        return proposal_status(proposal)

    @admin.action(
        description="Confirm selected overrides (another supervisor)", permissions=["confirm"]
    )
    def confirm_selected(self, request, queryset):
        _each(self, request, queryset, override_confirm, "proposal", "confirmed and carried out")


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
        return f"VOID at {approval.void_at:%Y-%m-%d %H:%M:%S}: {approval.void_reason}"


class OverrideInline(ReadOnlyInline):
    model = OverrideProposal
    view_permission = VIEW_MOVEMENTS
    verbose_name_plural = "two-person overrides"
    fields = ("action", "node_key", "state", "proposed_by", "expires_at", "confirmed_by", "reason")
    readonly_fields = fields

    @admin.display(description="status")
    def state(self, proposal: OverrideProposal) -> str:
        return proposal_status(proposal)
