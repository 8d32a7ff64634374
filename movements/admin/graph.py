"""The plan of one movement as a picture: a layered left-to-right layout of its nodes and
edges, rendered server-side into SVG by a template (no JavaScript, nothing from the internet).

A node's column is the length of the longest path from a root to it, so every edge points
right; nodes of one column are stacked in plan order.
"""

from dataclasses import dataclass, field

from movements.models import MovementPlanEdge, MovementPlanNode, MovementRequest
from movements.states import NodeState, RequestState

NODE_W, NODE_H = 190, 62
GAP_X, GAP_Y = 70, 26
MARGIN = 16

# Fill and stroke per node state: grey waiting, blue ready, amber running, green done,
# red failed, orange unknown.
NODE_COLOURS: dict[str, tuple[str, str]] = {
    NodeState.BLOCKED: ("#f1f5f9", "#94a3b8"),
    NodeState.READY: ("#dbeafe", "#2563eb"),
    NodeState.PREPARING: ("#fef3c7", "#d97706"),
    NodeState.AWAITING_SIGNATURE: ("#fef3c7", "#d97706"),
    NodeState.SUBMITTING: ("#fef3c7", "#d97706"),
    NodeState.SUBMITTED: ("#fef3c7", "#d97706"),
    NodeState.OBSERVING: ("#fef3c7", "#d97706"),
    NodeState.COMPLETED: ("#dcfce7", "#16a34a"),
    NodeState.FAILED: ("#fee2e2", "#dc2626"),
    NodeState.UNKNOWN: ("#ffedd5", "#ea580c"),
    NodeState.CANCELLED: ("#e5e7eb", "#6b7280"),
    NodeState.SKIPPED: ("#f8fafc", "#cbd5e1"),
}

# Badge colours for request states (the changelist and the page header share them).
REQUEST_COLOURS: dict[str, tuple[str, str]] = {
    RequestState.RECEIVED: ("#f1f5f9", "#334155"),
    RequestState.VALIDATED: ("#f1f5f9", "#334155"),
    RequestState.PENDING_APPROVAL: ("#dbeafe", "#1d4ed8"),
    RequestState.APPROVED: ("#e0e7ff", "#4338ca"),
    RequestState.EXECUTING: ("#fef3c7", "#92400e"),
    RequestState.WAITING_MANUAL_ACTION: ("#fae8ff", "#86198f"),
    RequestState.COMPLETED: ("#dcfce7", "#166534"),
    RequestState.FAILED: ("#fee2e2", "#991b1b"),
    RequestState.MANUAL_INTERVENTION: ("#ffedd5", "#9a3412"),
    RequestState.REJECTED: ("#e5e7eb", "#374151"),
    RequestState.EXPIRED: ("#e5e7eb", "#374151"),
    RequestState.CANCELLED: ("#e5e7eb", "#374151"),
}


@dataclass
class GraphNode:
    key: str
    kind: str
    state: str
    attempt: int
    external_ref: str
    frontier: bool
    # (seen, required) for a node watching a chain reach finality.
    confirmations: tuple[int, int] | None = None
    x: int = 0
    y: int = 0
    fill: str = ""
    stroke: str = ""

    @property
    def cx(self) -> int:
        return self.x + NODE_W // 2

    @property
    def detail(self) -> str:
        parts = [self.kind.replace("_", " ").lower()]
        if self.attempt > 1:
            parts.append(f"attempt {self.attempt}")
        if self.confirmations:
            parts.append("{}/{} confirmations".format(*self.confirmations))
        return " · ".join(parts)


@dataclass
class GraphEdge:
    path: str
    done: bool


@dataclass
class PlanGraph:
    width: int
    height: int
    nodes: list[GraphNode] = field(default_factory=list)
    edges: list[GraphEdge] = field(default_factory=list)
    node_w: int = NODE_W
    node_h: int = NODE_H


def _columns(keys: list[str], edges: list[tuple[str, str]]) -> dict[str, int]:
    preds: dict[str, list[str]] = {key: [] for key in keys}
    for source, target in edges:
        preds[target].append(source)
    column: dict[str, int] = {}

    def depth(key: str, seen: frozenset[str] = frozenset()) -> int:
        if key not in column:
            if key in seen:  # the compiler refuses cycles; never loop on bad data
                return 0
            column[key] = max((depth(p, seen | {key}) + 1 for p in preds[key]), default=0)
        return column[key]

    for key in keys:
        depth(key)
    return column


def layout(
    nodes: list[GraphNode], edges: list[tuple[str, str]], *, done_states: frozenset[str]
) -> PlanGraph:
    """Place ``nodes`` (in plan order) in columns and route ``edges`` between them."""
    column = _columns([n.key for n in nodes], edges)
    stacks: dict[int, list[GraphNode]] = {}
    for node in nodes:
        stacks.setdefault(column[node.key], []).append(node)
    rows = max((len(stack) for stack in stacks.values()), default=0)
    height = MARGIN * 2 + rows * NODE_H + max(rows - 1, 0) * GAP_Y
    for col, stack in stacks.items():
        stack_h = len(stack) * NODE_H + (len(stack) - 1) * GAP_Y
        top = (height - stack_h) // 2
        for i, node in enumerate(stack):
            node.x = MARGIN + col * (NODE_W + GAP_X)
            node.y = top + i * (NODE_H + GAP_Y)
            node.fill, node.stroke = NODE_COLOURS.get(node.state, ("#ffffff", "#000000"))
    width = MARGIN * 2 + len(stacks) * NODE_W + max(len(stacks) - 1, 0) * GAP_X
    by_key = {n.key: n for n in nodes}
    graph_edges = []
    for source_key, target_key in edges:
        s, t = by_key[source_key], by_key[target_key]
        x1, y1 = s.x + NODE_W, s.y + NODE_H // 2
        x2, y2 = t.x - 4, t.y + NODE_H // 2
        bend = (x2 - x1) // 2
        graph_edges.append(
            GraphEdge(
                path=f"M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}",
                done=s.state in done_states,
            )
        )
    return PlanGraph(
        width=max(width, NODE_W + 2 * MARGIN), height=height, nodes=nodes, edges=graph_edges
    )


def confirmations_of(node) -> tuple[int, int] | None:
    """(seen, required) from a chain observer's result, when it reports them."""
    result = (node.result if node is not None else None) or {}
    try:
        seen, required = int(result["confirmations"]), int(result["required"])
    except (KeyError, TypeError, ValueError):
        return None
    return (seen, required) if required > 0 else None


def plan_graph(movement: MovementRequest, nodes: list) -> PlanGraph:
    """The picture of ``movement``'s plan, each node coloured by the state of its live attempt."""
    attempts = {n.node_key: n for n in nodes}
    frontier = set(movement.current_frontier or [])
    graph_nodes = []
    for plan_node in MovementPlanNode.objects.filter(request=movement).order_by("position", "pk"):
        attempt = attempts.get(plan_node.key)
        graph_nodes.append(
            GraphNode(
                key=plan_node.key,
                kind=plan_node.kind,
                state=attempt.node_state if attempt else NodeState.BLOCKED,
                attempt=attempt.attempt if attempt else 1,
                external_ref=attempt.external_ref if attempt else "",
                frontier=plan_node.key in frontier,
                confirmations=confirmations_of(attempt),
            )
        )
    edges = list(
        MovementPlanEdge.objects.filter(request=movement)
        .order_by("source__position", "target__position")
        .values_list("source__key", "target__key")
    )
    return layout(
        graph_nodes, edges, done_states=frozenset({NodeState.COMPLETED, NodeState.SKIPPED})
    )
