from movements.states import NodeState, RequestState


def test_a_created_movement_waits_for_approval_with_blocked_nodes(make_movement):
    request = make_movement()

    assert request.request_state == RequestState.PENDING_APPROVAL
    assert set(request.nodes.values_list("node_state", flat=True)) == {NodeState.BLOCKED}
