"""The movement page: header, plan graph, read-only nodes and events, offered actions."""

import re
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from movements.models import MovementRequest, MovementRequestNode
from movements.services import movement_reject
from movements.states import RequestState
from qtg.core.actors import Actor
from tests.admin.conftest import TO_COMPLETED, drive
from tests.admin.helpers import change_url, post_action


def page(client, movement) -> str:
    response = client.get(change_url(movement))
    assert response.status_code == 200
    return response.content.decode()


def offered(html: str) -> set[str]:
    return set(re.findall(r'data-action="([a-z_]+)"', html))


def test_the_header_shows_state_amount_approval_and_expiry(client, op, supervisor, make_movement):
    # given a movement approved by the supervisor
    movement = make_movement(amount="1500.25")
    client.force_login(supervisor)
    post_action(client, movement, "approve")
    client.force_login(op)

    html = page(client, movement)

    header = html[html.index('id="qtg-header"') : html.index('id="qtg-actions"')]
    assert "1,500.250000 USDC" in header
    assert "APPROVED" in header
    assert "by sam" in header  # approval info
    assert "by creator" in header
    assert "1 of 1 approvals" in header
    assert "Approval window" not in header  # it matters only while the movement waits
    assert "withdraw" in header  # the frontier


def test_a_movement_awaiting_approval_shows_its_window_and_n_of_m_approvals(
    client, op, make_movement
):
    # given a movement waiting for its approval
    movement = make_movement(amount="1500.25")
    client.force_login(op)

    html = page(client, movement)

    header = html[html.index('id="qtg-header"') : html.index('id="qtg-actions"')]
    assert "0 of 1 approvals" in header
    assert "Approval window" in header and "closes" in header


def test_the_plan_graph_is_inline_svg_coloured_by_node_state_with_the_frontier_marked(
    client, op, intervention_unknown
):
    # given a movement whose withdrawal completed and whose observation is UNKNOWN
    movement = intervention_unknown()
    client.force_login(op)

    html = page(client, movement)

    # then the page carries an SVG drawn on the server, one group per plan node
    graph = html[html.index('id="qtg-graph"') :]
    graph = graph[: graph.index("</svg>")]
    nodes = dict(re.findall(r'data-node="(\w+)" data-state="(\w+)"', graph))
    assert nodes == {
        "withdraw": "COMPLETED",
        "withdraw_observe": "UNKNOWN",
        "deposit_observe": "BLOCKED",
    }
    assert graph.count('class="qtg-edge"') == 2  # the two on_success edges
    assert "#ea580c" in graph  # UNKNOWN's colour
    assert "<script" not in html.split('id="qtg-graph"')[1].split("</svg>")[0]
    assert "http://" not in graph.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_the_frontier_nodes_are_highlighted_in_the_graph(client, op, make_movement):
    movement = make_movement("split_join", approve=True)
    drive(movement, "withdraw", "PREPARING", "SUBMITTING", "SUBMITTED", "COMPLETED")
    client.force_login(op)

    html = page(client, movement)

    frontier = set(re.findall(r'data-node="(\w+)" data-state="\w+" data-frontier="1"', html))
    assert frontier == {"withdraw_observe", "chain_observe"}


def test_nodes_are_read_only_with_state_attempt_external_ref_error_and_lease(client, op, executing):
    # given a withdrawal in flight, leased by a worker, with a withdrawal id
    movement = drive(executing(), "withdraw", "PREPARING", "SUBMITTING")
    with transaction.atomic():
        node = MovementRequestNode.objects.select_for_update().get(
            request=movement, node_key="withdraw"
        )
        node.external_ref, node.lease_owner = "WD-1001", "worker-7"
        node.last_error = "venue slow to answer"
        node.lease_expires_at = timezone.now()
        node.dispatch_count, node.venue_errors = 5, 2
        node.save(
            update_fields=[
                "external_ref",
                "lease_owner",
                "lease_expires_at",
                "last_error",
                "dispatch_count",
                "venue_errors",
            ]
        )
    client.force_login(op)

    html = page(client, movement)

    nodes = html[html.index('id="nodes-group"') : html.index('id="events-group"')]
    for text in ("SUBMITTING", "WD-1001", "worker-7 until", "venue slow to answer"):
        assert text in nodes
    # Claims (lost ones included) beside the venue errors that count against the budget.
    assert "dispatches / venue errors" in nodes.lower() and "5 / 2" in nodes
    assert not re.findall(r'<input(?![^>]*type="hidden")', nodes)
    assert "<textarea" not in nodes


def test_events_are_newest_first_with_actor_and_evidence_and_cannot_be_edited(
    client, supervisor, intervention_unknown
):
    movement = intervention_unknown()
    client.force_login(supervisor)
    post_action(
        client,
        movement,
        "resolve_unknown",
        {
            "node_key": "withdraw_observe",
            "outcome": "COMPLETED",
            "evidence": "txid 0xfeed confirmed",
        },
    )

    response = client.get(change_url(movement))
    html = response.content.decode()

    events = html[html.index('id="events-group"') :]
    transitions = re.findall(r"(\w+|·) → <b>(\w+)</b>", events)
    assert transitions[0] == ("MANUAL_INTERVENTION", "EXECUTING")  # newest first
    assert transitions[-1] == ("·", "RECEIVED")  # oldest last
    assert "user:sam" in events
    assert "txid 0xfeed confirmed" in events
    assert "system:tests-worker" in events
    for inline in response.context["inline_admin_formsets"]:
        assert not inline.has_add_permission
        assert not inline.has_change_permission
        assert not inline.has_delete_permission


def test_the_page_is_read_only_no_save_no_delete(client, supervisor, make_movement):
    movement = make_movement()
    client.force_login(supervisor)

    html = page(client, movement)

    assert 'name="_save"' not in html
    assert "/delete/" not in html
    before = movement.request_state
    response = client.post(change_url(movement), {"request_state": "COMPLETED"})
    movement.refresh_from_db()
    assert response.status_code == 403
    assert movement.request_state == before


def test_each_state_offers_exactly_its_legal_actions_to_a_supervisor(
    client,
    supervisor,
    make_movement,
    executing,
    waiting_at_gate,
    intervention_unknown,
    intervention_failed,
    intervention_reconciled,
):
    client.force_login(supervisor)

    assert offered(page(client, make_movement())) == {"approve", "reject"}
    assert offered(page(client, executing())) == {"cancel"}
    assert offered(page(client, waiting_at_gate())) == {"resume_gate", "cancel"}
    # Forcing around an UNKNOWN node is refused: its outcome is resolved with evidence first.
    assert offered(page(client, intervention_unknown())) == {"resolve_unknown"}
    assert offered(page(client, intervention_failed())) == {
        "intervention_retry",
        "force_complete",
        "force_fail",
    }
    assert offered(page(client, intervention_reconciled())) == {"intervention_resume"}


def test_a_finished_movement_offers_nothing(client, supervisor, make_movement):
    movement = make_movement()
    client.force_login(supervisor)
    post_action(client, movement, "reject", {"reason": "no"})
    movement.refresh_from_db()
    assert movement.request_state == RequestState.REJECTED

    html = page(client, movement)

    assert offered(html) == set()
    assert "No action is open to you" in html


def test_a_viewer_sees_the_page_but_no_actions(client, viewer, make_movement):
    movement = make_movement()
    client.force_login(viewer)

    html = page(client, movement)

    assert offered(html) == set()
    assert 'id="qtg-graph"' in html


def test_an_expired_approval_window_hides_approve_and_says_closed(client, op, make_movement):
    movement = make_movement(expires_in=timedelta(seconds=1))
    MovementRequest.objects.filter(pk=movement.pk).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )
    client.force_login(op)

    html = page(client, movement)

    assert offered(html) == {"reject"}
    assert "closed" in html[html.index('id="qtg-header"') : html.index('id="qtg-actions"')]


def test_the_page_updates_itself_in_place_while_the_movement_is_in_flight(client, op, executing):
    # given an executing movement
    movement = executing()
    client.force_login(op)

    html = page(client, movement)

    # then it fetches itself and swaps its content in (no full reload, which loses your place)
    assert re.search(r'<script id="qtg-live-swap" data-seconds="\d+" data-target="#content">', html)
    assert 'http-equiv="refresh"' not in html
    assert 'id="qtg-live"' in html


def test_the_page_stops_refreshing_once_nothing_is_in_flight(client, op, waiting_at_gate):
    # given a movement waiting for an operator at its manual gate (no node running)
    movement = waiting_at_gate()
    client.force_login(op)

    html = page(client, movement)

    assert 'id="qtg-live-swap"' not in html
    assert 'id="qtg-live"' not in html


def test_a_chain_observer_shows_its_confirmations_out_of_the_required_number(
    client, op, make_movement
):
    # given a withdrawal done and its chain observation under way with 3 of 12 confirmations
    movement = make_movement(approve=True)
    drive(movement, "withdraw", *TO_COMPLETED)
    movement = drive(movement, "withdraw_observe", "OBSERVING")
    node = MovementRequestNode.objects.current().get(request=movement, node_key="withdraw_observe")
    node.result = {**(node.result or {}), "confirmations": 3, "required": 12}
    node.save(update_fields=["result"])
    client.force_login(op)

    html = page(client, movement)

    graph = html[html.index('id="qtg-graph"') :]
    observer = graph[graph.index('data-node="withdraw_observe"') :]
    assert "3/12 confirmations" in observer[: observer.index("</g>")]


def section_order(html: str, *ids: str) -> list[int]:
    return [html.index(f'id="{name}"') for name in ids]


def test_the_page_says_it_once_header_graph_nodes_then_events(client, supervisor, make_movement):
    movement = make_movement(amount="1500.25", idempotency_key="client-key-7")
    client.force_login(supervisor)

    html = page(client, movement)

    # the header, the plan, the nodes, then the events: no fieldsets repeating the header
    positions = section_order(html, "qtg-header", "qtg-graph", "nodes-group", "events-group")
    assert positions == sorted(positions)
    assert '<fieldset class="module aligned' not in html
    header = html[html.index('id="qtg-header"') : html.index('id="qtg-actions"')]
    # what the fieldsets held and the header did not: the key, the policy, the audit chain
    assert "client-key-7" in header
    assert "Audit chain" in header and "verified" in header
    assert "cex_to_cex v1" in header


def test_the_header_says_the_next_action_and_who_may_take_it(
    client, op, supervisor, make_movement, intervention_failed
):
    pending = make_movement(amount="10")
    stuck = intervention_failed(amount="20")
    client.force_login(op)

    waiting = page(client, pending)
    nxt = waiting[waiting.index('id="qtg-next"') :]
    nxt = nxt[: nxt.index("</dd>")]
    assert "Approve" in nxt and "operators" in nxt and "supervisors" in nxt
    assert "not creator" in nxt  # four-eyes
    held = page(client, stuck)
    nxt = held[held.index('id="qtg-next"') :]
    nxt = nxt[: nxt.index("</dd>")]
    assert "Force complete" in nxt and "supervisors" in nxt
    assert "operators" not in nxt  # an operator holds none of the ways out


def test_a_finished_movement_says_nothing_is_left_to_do(client, op, make_movement):
    movement = make_movement(amount="10")
    movement_reject(request=movement.pk, actor=Actor.system("tests"), reason="not today")
    client.force_login(op)

    html = page(client, movement)

    nxt = html[html.index('id="qtg-next"') :]
    assert "nothing: the movement is REJECTED" in nxt[: nxt.index("</dd>")]


def test_event_evidence_is_folded_and_the_events_have_a_filter(
    client, supervisor, intervention_unknown
):
    movement = intervention_unknown()
    client.force_login(supervisor)

    html = page(client, movement)

    events = html[html.index('id="events-group"') :]
    assert re.search(r'<details class="qtg-evidence-box"><summary>[^<]+</summary>\s*<pre', events)
    assert '<pre class="qtg-evidence">' not in re.sub(
        r"<details.*?</details>", "", events, flags=re.S
    )
    assert 'id="qtg-event-filter-script"' in html


def test_a_force_completed_movement_shows_who_resolved_it_and_no_approval_window(
    client, supervisor, intervention_failed
):
    movement = intervention_failed(amount="640")
    client.force_login(supervisor)
    post_action(client, movement, "force_complete", {"reason": "the desk saw it arrive"})

    html = page(client, movement)

    header = html[html.index('id="qtg-header"') : html.index('id="qtg-actions"')]
    reason = header[header.index('id="qtg-reason"') :]
    assert "resolved by force-complete by sam: the desk saw it arrive" in reason
    assert "withdraw_observe" not in reason[: reason.index("</dd>")]
    assert "Approval window" not in header
