"""The layered layout of the plan graph."""

from movements.admin.graph import NODE_W, GraphNode, layout


def node(key: str, state: str = "BLOCKED") -> GraphNode:
    return GraphNode(
        key=key, kind="ACTION", state=state, attempt=1, external_ref="", frontier=False
    )


def test_a_split_and_join_is_laid_out_in_columns_with_every_edge_pointing_right():
    nodes = [node("withdraw", "COMPLETED"), node("a"), node("b"), node("deposit")]
    edges = [("withdraw", "a"), ("withdraw", "b"), ("a", "deposit"), ("b", "deposit")]

    graph = layout(nodes, edges, done_states=frozenset({"COMPLETED"}))

    x = {n.key: n.x for n in graph.nodes}
    assert x["withdraw"] < x["a"] == x["b"] < x["deposit"]
    assert graph.nodes[1].y != graph.nodes[2].y  # the parallel pair is stacked
    assert len(graph.edges) == 4
    assert [e.done for e in graph.edges] == [True, True, False, False]
    assert graph.width >= x["deposit"] + NODE_W


def test_a_longer_branch_pushes_the_join_to_the_right_of_its_last_predecessor():
    nodes = [node("root"), node("short"), node("long1"), node("long2"), node("join")]
    edges = [
        ("root", "short"),
        ("root", "long1"),
        ("long1", "long2"),
        ("short", "join"),
        ("long2", "join"),
    ]

    graph = layout(nodes, edges, done_states=frozenset())

    x = {n.key: n.x for n in graph.nodes}
    assert x["join"] > x["long2"] > x["long1"]
