"""Movement services: the only code that writes movement state (re-exported here)."""

from movements.services.decisions import (
    expire_overdue_approvals,
    movement_approve,
    movement_expire,
    movement_reject,
    movement_withdraw,
)
from movements.services.derivation import (
    derive_request_state,
    has_completed_side_effect,
    should_release_reservation,
)
from movements.services.intake import movement_create, request_fingerprint
from movements.services.interventions import (
    intervention_force_complete,
    intervention_force_fail,
    intervention_resume,
    intervention_retry,
    manual_gate_resume,
    movement_cancel,
    node_resolve_unknown,
)
from movements.services.progress import (
    advance_after_completion,
    apply_request_state_from_nodes,
    compute_frontier,
    refresh_frontier,
    start_roots,
)
from movements.services.state import record_event, save_fields, set_node_state, set_request_state
from movements.services.templates import (
    route_template_current,
    route_templates_read_once,
    route_templates_sync,
)

__all__ = [
    "advance_after_completion",
    "apply_request_state_from_nodes",
    "compute_frontier",
    "derive_request_state",
    "expire_overdue_approvals",
    "has_completed_side_effect",
    "intervention_force_complete",
    "intervention_force_fail",
    "intervention_resume",
    "intervention_retry",
    "manual_gate_resume",
    "movement_approve",
    "movement_cancel",
    "movement_create",
    "movement_expire",
    "movement_reject",
    "movement_withdraw",
    "node_resolve_unknown",
    "record_event",
    "refresh_frontier",
    "request_fingerprint",
    "route_template_current",
    "route_templates_read_once",
    "route_templates_sync",
    "save_fields",
    "set_node_state",
    "set_request_state",
    "should_release_reservation",
    "start_roots",
]
