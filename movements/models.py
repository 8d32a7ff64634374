"""Route templates, movement requests, their compiled plan, node attempts and the audit trail."""

import uuid
from functools import cache
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django_fsm import ConcurrentTransitionMixin, FSMFieldMixin

from movements.choices import (
    EntryStatus,
    NodeKind,
    OverrideAction,
    OverrideStatus,
    PolicyStatus,
)
from movements.fsm import state_machine_base
from movements.states import (
    NODE_TRANSITIONS,
    REQUEST_TRANSITIONS,
    NodeState,
    RequestState,
)
from qtg.core.chain import ChainedModel, linked_constraint
from qtg.core.models import AuditEventModel, reviewed_model
from qtg.core.money import MONEY, display_amount
from qtg.core.times import console_time

RequestStateMachine = state_machine_base(
    name="RequestStateMachine",
    field_name="request_state",
    states=RequestState,
    table=REQUEST_TRANSITIONS,
    initial=RequestState.RECEIVED,
    module=__name__,
)

NodeStateMachine = state_machine_base(
    name="NodeStateMachine",
    field_name="node_state",
    states=NodeState,
    table=NODE_TRANSITIONS,
    initial=NodeState.BLOCKED,
    module=__name__,
)


class RouteTemplate(models.Model):
    """One reviewed version of a route template file, as loaded from the repository."""

    key = models.SlugField(max_length=64)
    version = models.PositiveIntegerField()
    checksum = models.CharField(max_length=64, help_text="sha256 of the reviewed YAML file")
    name = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    definition = models.JSONField(help_text="The validated template, as parsed from YAML")
    source_path = models.CharField(max_length=300, blank=True)
    is_active = models.BooleanField(default=True)
    loaded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["key", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["key", "version"], name="route_template_key_version"),
        ]

    def __str__(self) -> str:
        return f"{self.key} v{self.version}"


@cache
def _fsm_fields(model: type[models.Model]) -> tuple[models.Field, ...]:
    """The FSM fields of a model class, read once: django-fsm-2's ``state_fields`` filters
    every field of the model for them on each instance it builds (to remember its initial
    state), which a page of movements and their nodes pays hundreds of times."""
    return tuple(f for f in model._meta.fields if isinstance(f, FSMFieldMixin))


class MovementRequest(ConcurrentTransitionMixin, RequestStateMachine):
    """A request to move an amount of an asset from a source to a destination."""

    @property
    def state_fields(self):
        return _fsm_fields(type(self))

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    template = models.ForeignKey(
        RouteTemplate, null=True, blank=True, on_delete=models.PROTECT, related_name="requests"
    )
    template_key = models.CharField(max_length=64, db_index=True)
    template_version = models.PositiveIntegerField(null=True, blank=True)
    asset = models.CharField(max_length=32, db_index=True)
    amount = models.DecimalField(**MONEY)
    source = models.CharField(max_length=200)
    destination = models.CharField(max_length=200)
    params = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    # NULL, not "", for "no key": the per-client uniqueness constraint ignores NULLs.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    request_fingerprint = models.CharField(max_length=64, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="movements_created",
    )
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="movements_approved",
    )
    approved_at = models.DateTimeField(null=True, blank=True)
    # Who withdrew the movement while it waited for approval (its creator, or a supervisor):
    # it is then REJECTED with the reason in ``failure_reason``.
    withdrawn_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="movements_withdrawn",
    )
    # What approving this movement takes (``movements.services.approvals``): set from the
    # approval policy in force at creation, re-read at each approval; the policy version the
    # quorum was reached under stays here once APPROVED.
    approval_policy = models.ForeignKey(
        "ApprovalPolicy",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="movements",
    )
    approvals_required = models.PositiveSmallIntegerField(default=1)
    approval_groups = models.JSONField(default=list, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, db_index=True)
    current_frontier = models.JSONField(default=list, blank=True)
    failure_reason = models.TextField(blank=True)
    state_changed_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["created_by", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="movement_idempotency_key_per_client",
            ),
        ]
        indexes = [
            models.Index(fields=["request_state", "created_at"]),
            # The home page: what waits longest in a state (the queue), what completed lately
            # (the charts).
            models.Index(
                fields=["request_state", "state_changed_at"], name="movement_state_since_idx"
            ),
            # Operators search by a client's key without knowing the client.
            models.Index(fields=["idempotency_key"], name="movement_idempotency_key_idx"),
        ]
        permissions = [
            ("approve_movement", "Can approve a movement"),
            ("reject_movement", "Can reject a movement"),
            ("resume_manual_gate", "Can resume a manual gate"),
            ("cancel_movement", "Can cancel a movement"),
            ("resolve_unknown_node", "Can resolve an UNKNOWN node by hand"),
            ("resume_intervention", "Can resume a movement in manual intervention"),
            ("retry_node", "Can retry a failed node of a movement in manual intervention"),
            ("force_complete_movement", "Can force-complete a movement in manual intervention"),
            ("force_fail_movement", "Can force-fail a movement in manual intervention"),
            (
                "cancel_in_transit",
                "Can cancel a movement after a side effect completed (funds in transit)",
            ),
            (
                "handle_attention",
                "Can snooze, resolve or stop watching a movement that needs attention",
            ),
            (
                "propose_override",
                "Can propose a two-person override (force-complete, force-fail, cancel in "
                "transit, resolve UNKNOWN as never happened)",
            ),
            ("confirm_override", "Can confirm another supervisor's override proposal"),
            (
                "withdraw_movement",
                "Can withdraw a movement someone else created while it waits for approval",
            ),
        ]

    def __str__(self) -> str:
        amount = display_amount(self.amount, self.asset)
        return f"{self.template_key} {amount} {self.asset} ({self.request_state})"

    @property
    def short_id(self) -> str:
        return str(self.id)[:8]


class MovementPlanNode(models.Model):
    """A node of the plan compiled for one request (an immutable snapshot)."""

    request = models.ForeignKey(
        MovementRequest, on_delete=models.CASCADE, related_name="plan_nodes"
    )
    key = models.CharField(max_length=64)
    kind = models.CharField(max_length=16, choices=NodeKind.choices)
    executor = models.CharField(max_length=64)
    has_side_effect = models.BooleanField(default=False)
    signing_required = models.BooleanField(default=False)
    config = models.JSONField(default=dict, blank=True)
    condition = models.JSONField(null=True, blank=True)
    position = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["request", "position"]
        constraints = [
            models.UniqueConstraint(fields=["request", "key"], name="plan_node_key_per_request"),
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.kind})"


class EdgeKind(models.TextChoices):
    ON_SUCCESS = "on_success", "On success"


class MovementPlanEdge(models.Model):
    request = models.ForeignKey(
        MovementRequest, on_delete=models.CASCADE, related_name="plan_edges"
    )
    source = models.ForeignKey(MovementPlanNode, on_delete=models.CASCADE, related_name="out_edges")
    target = models.ForeignKey(MovementPlanNode, on_delete=models.CASCADE, related_name="in_edges")
    kind = models.CharField(max_length=16, choices=EdgeKind.choices, default=EdgeKind.ON_SUCCESS)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "target", "kind"], name="plan_edge_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.source.key} -> {self.target.key}"


class MovementRequestNodeQuerySet(models.QuerySet):
    def current(self) -> "MovementRequestNodeQuerySet":
        """The live attempt of each plan node (a retried node's failed attempt is history)."""
        return self.filter(is_current=True)


class MovementRequestNode(ConcurrentTransitionMixin, NodeStateMachine):
    """One attempt at executing one plan node of a request."""

    @property
    def state_fields(self):
        return _fsm_fields(type(self))

    request = models.ForeignKey(MovementRequest, on_delete=models.CASCADE, related_name="nodes")
    plan_node = models.ForeignKey(
        MovementPlanNode, on_delete=models.PROTECT, related_name="attempts"
    )
    node_key = models.CharField(max_length=64)
    kind = models.CharField(max_length=16, choices=NodeKind.choices)
    executor = models.CharField(max_length=64)
    has_side_effect = models.BooleanField(default=False)
    signing_required = models.BooleanField(default=False)
    attempt = models.PositiveIntegerField(default=1)
    is_current = models.BooleanField(default=True)
    # Execution bookkeeping, owned by the workers.
    lease_owner = models.CharField(max_length=128, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    # Claims of this attempt (every dispatch, including those lost to worker deaths, lease
    # expiries and waits the venue asked for): shown, never a reason to give up.
    dispatch_count = models.PositiveIntegerField(default=0)
    # Answers in which the venue itself refused or failed the attempt before anything was
    # sent (deterministic or transient errors from prepare/sign): QTG_MAX_DISPATCHES counts these.
    venue_errors = models.PositiveIntegerField(default=0)
    # Fencing token: grows by one each time a worker takes the lease. A side-effecting call
    # leaves the process only after a statement proved the caller's epoch is still the node's
    # (``execution.fence``), and a result is applied only under the epoch it was claimed with.
    lease_epoch = models.PositiveBigIntegerField(default=0)
    # The last fenced side-effecting call: when it was allowed to leave, and the deadline it
    # was given (its timeout). Recovery may conclude it never happened only after
    # ``fenced_until`` plus the executor's request lifetime.
    fenced_at = models.DateTimeField(null=True, blank=True)
    fenced_until = models.DateTimeField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=128, blank=True)
    signed_payload = models.TextField(blank=True)
    external_ref = models.CharField(max_length=200, blank=True, db_index=True)
    last_error = models.TextField(blank=True)
    # Venue errors in a row while watching or recovering this attempt (reset by an answer):
    # the backoff between tries grows with it, up to QTG_RETRY_MAX_SECONDS.
    error_streak = models.PositiveIntegerField(default=0)
    # When this attempt's submit began (it entered SUBMITTING): the visibility window of its
    # venue counts from here before "not found" may mean "never happened".
    submit_started_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    state_changed_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    objects = MovementRequestNodeQuerySet.as_manager()

    class Meta:
        ordering = ["request", "plan_node__position", "attempt"]
        constraints = [
            models.UniqueConstraint(
                fields=["request", "node_key"],
                condition=Q(is_current=True),
                name="one_current_attempt_per_node",
            ),
            models.UniqueConstraint(
                fields=["request", "node_key", "attempt"], name="node_attempt_unique"
            ),
        ]
        indexes = [
            models.Index(fields=["node_state", "next_attempt_at"]),
            models.Index(fields=["node_state", "lease_expires_at"]),
        ]

    def __str__(self) -> str:
        suffix = f" #{self.attempt}" if self.attempt > 1 else ""
        return f"{self.node_key}{suffix} ({self.node_state})"

    @property
    def is_manual_gate(self) -> bool:
        return self.kind == NodeKind.MANUAL_GATE

    @classmethod
    def attempt_of(
        cls, plan_node: "MovementPlanNode", *, attempt: int = 1, request: Any = None
    ) -> "MovementRequestNode":
        """A new, unsaved attempt (BLOCKED) at ``plan_node``, with what every attempt copies
        from its plan node. Movement creation, a retry and the benchmark all build nodes here."""
        return cls(
            request=request or plan_node.request,
            plan_node=plan_node,
            node_key=plan_node.key,
            kind=plan_node.kind,
            executor=plan_node.executor,
            has_side_effect=plan_node.has_side_effect,
            signing_required=plan_node.signing_required,
            attempt=attempt,
        )


# The key of an event's detail that only operators read (the admin); the API leaves it out.
OPERATOR_DETAIL = "operator"


class MovementEvent(AuditEventModel):
    """One audit record: a state transition, or evidence recorded without a state change."""

    class Kind(models.TextChoices):
        CREATED = "created", "Created"
        TRANSITION = "transition", "Transition"
        RECORD = "record", "Record"

    request = models.ForeignKey(MovementRequest, on_delete=models.PROTECT, related_name="events")
    node = models.ForeignKey(
        MovementRequestNode,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="events",
    )
    node_key = models.CharField(max_length=64, blank=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.TRANSITION)
    old_state = models.CharField(max_length=32, blank=True)
    new_state = models.CharField(max_length=32, blank=True)
    detail = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    # One evidence chain per movement (qtg/core/chain.py).
    chain_stream = "request_id"
    chain_subject_has_rows = True  # created with its CREATED event

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [linked_constraint("movementevent")]

    def __str__(self) -> str:
        subject = self.node_key or "request"
        return f"{subject}: {self.old_state or '-'} -> {self.new_state or '-'}"


class AttentionReason(models.TextChoices):
    STUCK = "stuck", "Stuck longer than expected"
    LATE_RESULT = "late_result", "A late result contradicts a concluded outcome"
    RECOVERY_BLOCKED = "recovery_blocked", "Recovery cannot ask the venue"
    NO_EXECUTOR = "no_executor", "No executor serves this node"
    # Raised by real venues' executors (movements.executors.base.EXECUTOR_ATTENTION_REASONS).
    REORG = "reorg", "A transaction left the canonical chain"
    FEE_CAP = "fee_cap", "Fee bumping reached the chain's fee cap"
    DROPPED = "dropped", "A transaction was dropped by the network"
    REPLACED_MINED = "replaced_mined", "Another transaction took this one's nonce"
    BROADCAST_REFUSED = "broadcast_refused", "The network refuses the signed transaction"
    EXPIRED = "expired", "A transaction expired before it landed"
    VENUE = "venue", "The venue needs a person"
    FINAL_REORG = "final_reorg", "A finalized transaction left the chain"
    # Raised by the worker.
    UNPROVABLE = "unprovable", "The venue cannot prove the side effect never happened"
    WAITING_LONG = "waiting_long", "The venue has kept the node waiting a long time"


class MovementAttention(models.Model):
    """Something about a movement an operator must look at, raised once (not once per poll):
    a node stuck longer than its executor expects, or a venue answer that contradicts what was
    concluded. Open until resolved; a snoozed one needs nobody until ``snoozed_until``."""

    request = models.ForeignKey(
        MovementRequest, on_delete=models.PROTECT, related_name="attentions"
    )
    node = models.ForeignKey(
        MovementRequestNode,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="attentions",
    )
    node_key = models.CharField(max_length=64, blank=True)
    reason = models.CharField(max_length=32, choices=AttentionReason.choices)
    message = models.TextField()
    evidence = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    since = models.DateTimeField(help_text="When the condition began.")
    raised_at = models.DateTimeField(default=timezone.now)
    snoozed_until = models.DateTimeField(null=True, blank=True)
    snooze_reason = models.TextField(blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolution = models.TextField(blank=True)
    handled_by = models.CharField(max_length=160, blank=True)

    class Meta:
        ordering = ["raised_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["node", "reason"],
                condition=Q(resolved_at__isnull=True),
                name="one_open_attention_per_node_and_reason",
            ),
        ]
        indexes = [models.Index(fields=["resolved_at", "snoozed_until"])]

    def __str__(self) -> str:
        return f"{self.node_key or 'movement'}: {self.get_reason_display()}"

    def needs_someone(self, now: Any = None) -> bool:
        if self.resolved_at is not None:
            return False
        return self.snoozed_until is None or self.snoozed_until <= (now or timezone.now())


class ApprovalPolicy(reviewed_model("approval_policies")):
    """One version of an approval rule: which movements it covers (asset, amount range,
    template, destination; blank = any) and what approving them takes (distinct approvers,
    never the creator, and the groups at least one of them must come from). A version is
    proposed by one person and takes effect only when a second person activates it; it then
    supersedes the active version of the same key. Versions are never edited once proposed."""

    key = models.SlugField(max_length=64)
    version = models.PositiveIntegerField()
    status = models.CharField(
        max_length=16, choices=PolicyStatus.choices, default=PolicyStatus.PROPOSED
    )
    asset = models.CharField(max_length=32, blank=True, help_text="Blank: any asset.")
    template_key = models.CharField(max_length=64, blank=True, help_text="Blank: any template.")
    destination = models.CharField(max_length=200, blank=True, help_text="Blank: any destination.")
    amount_above = models.DecimalField(
        **MONEY, null=True, blank=True, help_text="Applies to amounts strictly above this."
    )
    amount_up_to = models.DecimalField(
        **MONEY, null=True, blank=True, help_text="Applies to amounts up to this (inclusive)."
    )
    approvals_required = models.PositiveSmallIntegerField(default=1)
    required_groups = models.JSONField(
        default=list,
        blank=True,
        help_text='Group names, e.g. ["supervisors"]: at least one approver from each.',
    )
    note = models.TextField(blank=True)
    superseded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["key", "-version"]
        verbose_name_plural = "approval policies"
        constraints = [
            models.UniqueConstraint(fields=["key", "version"], name="approval_policy_version"),
            models.UniqueConstraint(
                fields=["key"],
                condition=Q(status="ACTIVE"),
                name="one_active_approval_policy_per_key",
            ),
        ]
        permissions = [
            ("propose_approvalpolicy", "Can propose an approval policy version"),
            ("decide_approvalpolicy", "Can activate or reject an approval policy version"),
        ]

    def __str__(self) -> str:
        return f"{self.key} v{self.version} ({self.status})"


class MovementApproval(ChainedModel):
    """One person's approval of a movement, bound to what they approved: ``binding_hash`` is
    taken over the compiled plan, amount, asset, source and destination. If the movement no
    longer hashes the same at dispatch, the approval is void (``void_at``, ``void_reason``)."""

    request = models.ForeignKey(MovementRequest, on_delete=models.PROTECT, related_name="approvals")
    approver = models.CharField(max_length=160, help_text="The actor, as recorded in events.")
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="movement_approvals",
    )
    approved_at = models.DateTimeField(default=timezone.now)
    groups = models.JSONField(default=list, blank=True, help_text="The approver's groups then.")
    policy = models.ForeignKey(
        ApprovalPolicy, null=True, blank=True, on_delete=models.PROTECT, related_name="approvals"
    )
    binding_hash = models.CharField(max_length=64)
    void_at = models.DateTimeField(null=True, blank=True)
    void_reason = models.TextField(blank=True)

    # Linked into the movement's approval chain; voiding (once, by dispatch) is the one change
    # the database lets through (movements/migrations), so it stays outside the content.
    chain_stream = "request_id"
    chain_time = "approved_at"
    chain_exclude = ("void_at", "void_reason")

    class Meta:
        ordering = ["approved_at", "id"]
        constraints = [
            linked_constraint("movementapproval"),
            # A system actor is its recorded name; a person is their user id (below): a user
            # renamed between two approvals is still one, and two people who held one name in
            # turn are two.
            models.UniqueConstraint(
                fields=["request", "approver"],
                condition=models.Q(approved_by__isnull=True),
                name="one_approval_per_system_actor_per_movement",
            ),
            models.UniqueConstraint(
                fields=["request", "approved_by"],
                condition=models.Q(approved_by__isnull=False),
                name="one_approval_per_user_per_movement",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.approver} at {console_time(self.approved_at)}"


class AddressBookEntry(reviewed_model("address_entries")):
    """A vetted destination for an asset on a network, with a label. Added by one person,
    approved by another (four-eyes); usable from ``usable_from`` (approval + the cool-down)."""

    asset = models.CharField(max_length=32)
    network = models.CharField(max_length=64, blank=True, help_text="Blank: no network param.")
    address = models.CharField(max_length=200)
    label = models.CharField(max_length=200)
    status = models.CharField(
        max_length=16, choices=EntryStatus.choices, default=EntryStatus.PROPOSED
    )
    usable_from = models.DateTimeField(null=True, blank=True)
    removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["asset", "network", "label"]
        verbose_name_plural = "address book entries"
        constraints = [
            models.UniqueConstraint(
                fields=["asset", "network", "address"],
                condition=Q(status__in=["PROPOSED", "ACTIVE"]),
                name="one_live_address_entry",
            ),
        ]
        permissions = [
            ("propose_addressbookentry", "Can propose an address book entry"),
            ("decide_addressbookentry", "Can approve, reject or remove an address book entry"),
        ]

    def __str__(self) -> str:
        network = f"/{self.network}" if self.network else ""
        return f"{self.label}: {self.address} ({self.asset}{network}, {self.status})"


class OverrideProposal(reviewed_model("overrides", decision="confirmed", proposer_required=True)):
    """A supervisor's proposal of an override, carried out only when another supervisor
    confirms it before ``expires_at``."""

    request = models.ForeignKey(
        MovementRequest, on_delete=models.PROTECT, related_name="override_proposals"
    )
    action = models.CharField(max_length=32, choices=OverrideAction.choices)
    node_key = models.CharField(max_length=64, blank=True)
    reason = models.TextField()
    evidence = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    status = models.CharField(
        max_length=16, choices=OverrideStatus.choices, default=OverrideStatus.PROPOSED
    )
    expires_at = models.DateTimeField()

    class Meta:
        ordering = ["-proposed_at", "-id"]

    def __str__(self) -> str:
        return f"{self.get_action_display()} of {self.request_id} ({self.status})"

    def is_expired(self, now: Any = None) -> bool:
        return self.status == OverrideStatus.PROPOSED and self.expires_at <= (now or timezone.now())


class AuditRecord(AuditEventModel):
    """A decision recorded in the evidence chain that has no event table of its own: an
    approval-policy version proposed, activated or rejected; an address-book entry proposed,
    approved, rejected or removed (and by whom); an override proposed or confirmed; a webhook
    subscription changed; an exchange's answer about a withdrawal. One stream per subject."""

    subject = models.CharField(max_length=120, help_text='"<table>:<id>" of what was decided.')
    action = models.CharField(max_length=48)
    actor_id = models.CharField(max_length=160, blank=True)  # wider than the base's, always was
    detail = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    chain_stream = "subject"

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["subject", "id"])]
        constraints = [linked_constraint("auditrecord")]

    def __str__(self) -> str:
        return f"{self.subject}: {self.action} by {self.actor_id}"
