"""The words of movements' choice fields that the rules compare against, as pure enums
(``qtg.core.choices``): ``movements/policies.py`` reads a node's kind or a proposal's status
without importing a model. ``movements.models`` uses them for its fields (and re-exports them).
"""

from qtg.core.choices import LabelledChoices


class NodeKind(LabelledChoices):
    ACTION = "ACTION", "Action"
    OBSERVE = "OBSERVE", "Observe"
    MANUAL_GATE = "MANUAL_GATE", "Manual gate"


# The API schema names the node-kind enum from these (value, label) pairs (settings'
# ENUM_NAME_OVERRIDES: drf-spectacular reads a plain Enum's names as its labels).
NODE_KINDS = NodeKind.choices


class PolicyStatus(LabelledChoices):
    PROPOSED = "PROPOSED", "Proposed (waits for a second person)"
    ACTIVE = "ACTIVE", "Active"
    SUPERSEDED = "SUPERSEDED", "Superseded"
    REJECTED = "REJECTED", "Rejected"


class EntryStatus(LabelledChoices):
    PROPOSED = "PROPOSED", "Proposed (waits for a second person)"
    ACTIVE = "ACTIVE", "Active"
    REMOVED = "REMOVED", "Removed"
    REJECTED = "REJECTED", "Rejected"


class OverrideAction(LabelledChoices):
    FORCE_COMPLETE = "force_complete", "Force-complete"
    FORCE_FAIL = "force_fail", "Force-fail"
    CANCEL_IN_TRANSIT = "cancel_in_transit", "Cancel after a side effect (funds in transit)"
    RESOLVE_NEVER_HAPPENED = "resolve_never_happened", "Resolve UNKNOWN as never happened"


class OverrideStatus(LabelledChoices):
    PROPOSED = "PROPOSED", "Proposed"
    CONFIRMED = "CONFIRMED", "Confirmed"
