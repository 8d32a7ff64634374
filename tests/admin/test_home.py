"""The console's home page: my queue, money by asset and venue, what is UNKNOWN or stuck,
failing webhooks; each figure checked against the database, read here another way."""

import json
import re
import threading
from datetime import timedelta
from decimal import Decimal
from html import unescape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.urls import reverse
from django.utils import timezone

from callbacks.models import Subscription
from callbacks.services import delivery_send, subscription_save, subscription_send_test
from movements import policies
from movements.admin.filters import needs_me_q
from movements.models import (
    MovementAttention,
    MovementRequest,
    MovementRequestNode,
    OverrideAction,
)
from movements.permissions import SUPERVISORS
from movements.selectors import current_nodes
from movements.services.attention import detect_stuck_nodes
from movements.services.overrides import override_propose
from movements.states import NodeState, RequestState
from ops import gauges
from ops.models import GaugeSnapshot
from qtg.core import money
from qtg.core.actors import Actor
from reservations.models import Reservation, ReservationState
from tests.admin.conftest import TO_COMPLETED, drive, staff_user
from venues.cex.models import CexClock

HOME = "/admin/"


def home_html(client, user, url=HOME) -> str:
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def queue_pks(html: str) -> list[tuple[str, str]]:
    section = html[html.index('id="qtg-queue"') : html.index('id="qtg-money"')]
    return re.findall(r'<tr data-kind="(\w+)" data-pk="([^"]+)">', section)


def money_cells(html: str, asset: str, venue: str) -> list[str]:
    row = re.search(
        rf'<tr data-asset="{asset}" data-venue="{re.escape(venue)}">(.*?)</tr>', html, re.S
    )
    assert row, f"no money row for {asset} at {venue}"
    return [unescape(c) for c in re.findall(r'<td class="num">([^<]*)</td>', row.group(1))]


@pytest.fixture
def floor(op, supervisor, make_movement, executing, waiting_at_gate, intervention_failed):
    """One movement in each place money can be: awaiting approval, running with nothing gone,
    gone from the exchange (waiting at a gate), held in MANUAL_INTERVENTION."""
    return {
        "pending": make_movement(amount="2500.00"),
        "running": executing(amount="40.50"),
        "gate": waiting_at_gate(amount="300.00"),
        "stuck": intervention_failed(amount="640.00"),
    }


def test_the_home_page_replaces_the_stock_index(client, op, floor):
    html = home_html(client, op)

    assert "My queue" in html and "Money held, by asset and venue" in html
    assert "Recent actions" not in html
    # the sidebar of every page is there: the app list still leads everywhere
    assert reverse("admin:movements_movementrequest_changelist") in html


def test_an_operators_queue_holds_what_they_can_act_on_oldest_first(client, op, floor):
    # given the operator's own movement awaiting approval (four-eyes: not theirs to approve)
    mine = MovementRequest.objects.get(pk=floor["pending"].pk)
    MovementRequest.objects.filter(pk=mine.pk).update(created_by=op)

    pks = queue_pks(home_html(client, op))

    # then: the gate (operators resume gates), not their own movement, not MANUAL_INTERVENTION
    assert pks == [("movement", str(floor["gate"].pk))]


def test_a_supervisors_queue_has_the_intervention_the_approval_and_a_proposal_to_confirm(
    client, supervisor, floor, settings
):
    settings.QTG_TWO_PERSON_OVERRIDES = True
    other = staff_user("sue", SUPERVISORS)
    proposal = override_propose(
        request=floor["stuck"],
        action=OverrideAction.FORCE_FAIL,
        actor=Actor.for_user(other),
        reason="the desk says it came back",
    )

    html = home_html(client, supervisor)
    pks = queue_pks(html)

    assert ("proposal", str(proposal.pk)) in pks
    assert ("movement", str(floor["stuck"].pk)) in pks
    assert ("movement", str(floor["pending"].pk)) in pks
    assert reverse("admin:movements_overrideproposal_confirm", args=[proposal.pk]) in html
    # oldest first, by what each has been waiting since
    whens = [
        MovementRequest.objects.get(pk=pk).state_changed_at
        for kind, pk in pks
        if kind == "movement"
    ]
    assert whens == sorted(whens)
    # and the proposer is not asked to confirm their own proposal
    assert ("proposal", str(proposal.pk)) not in queue_pks(home_html(client, other))


def expected_money() -> dict[tuple[str, str], list[Decimal]]:
    """The held reservations classified one by one from each movement's live nodes."""
    result: dict[tuple[str, str], list[Decimal]] = {}
    for reservation in Reservation.objects.filter(state=ReservationState.HELD):
        movement = reservation.request
        left = policies.funds_in_transit(current_nodes(movement))
        if movement.request_state == RequestState.PENDING_APPROVAL:
            column = 0
        elif movement.request_state == RequestState.MANUAL_INTERVENTION:
            column = 3
        elif left:
            column = 2
        else:
            column = 1
        cells = result.setdefault((reservation.asset, reservation.source), [Decimal(0)] * 4)
        cells[column] += reservation.amount
    return result


def test_money_is_split_by_where_it_is_and_matches_the_reservations(client, op, floor):
    expected = expected_money()
    html = home_html(client, op)

    for (asset, venue), amounts in expected.items():
        shown = money_cells(html, asset, venue)
        assert shown == [money.display_amount(a, asset) if a else "—" for a in amounts]
    # the figures of the floor, by hand: 2,500 awaiting, 40.5 running, 300 gone, 640 held
    assert money_cells(html, "USDC", "sandbox-exchange-a") == [
        "2,500.000000",
        "40.500000",
        "300.000000",
        "640.000000",
    ]


def test_unknown_and_stuck_counts_match_the_nodes(client, op, floor, intervention_unknown):
    intervention_unknown(amount="12.00")

    html = home_html(client, op)

    unknown = MovementRequestNode.objects.current().filter(node_state=NodeState.UNKNOWN).count()
    assert unknown == 1
    assert re.search(rf'id="qtg-unknown"><b>{unknown}</b>', html)
    waiting = MovementRequest.objects.filter(
        request_state__in=[
            RequestState.PENDING_APPROVAL,
            RequestState.WAITING_MANUAL_ACTION,
            RequestState.MANUAL_INTERVENTION,
        ]
    ).count()
    assert re.search(rf'id="qtg-needs-someone"><b><a [^>]*>{waiting}</a>', html)


def test_a_subscription_whose_deliveries_died_is_listed(client, op, settings, db):
    settings.QTG_CALLBACKS_MAX_ATTEMPTS = 1
    subscription = subscription_save(
        subscription=Subscription(
            name="ledger", url="http://127.0.0.1:9/hook", event_types=["request_completed"]
        ),
        actor=Actor.system("tests"),
    )
    delivery = subscription_send_test(subscription=subscription)
    delivery_send(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert delivery.status == "DEAD"

    html = home_html(client, op)

    section = html[html.index('id="qtg-webhooks"') : html.index('id="qtg-venues"')]
    assert f'data-subscription="{subscription.pk}"' in section and "ledger" in section


def test_the_live_part_is_served_alone_for_the_page_to_swap_in(client, op, floor):
    html = home_html(client, op, url=reverse("qtg-home-live"))

    assert 'id="qtg-queue"' in html
    assert "<html" not in html and 'id="header"' not in html


def test_a_stuck_movement_counts_as_stuck_by_reason_and_as_waiting_for_a_person(
    client, supervisor, floor, executing
):
    # given a movement whose deposit observation has been running far longer than expected
    movement = drive(executing(), "withdraw", *TO_COMPLETED)
    drive(movement, "withdraw_observe", "OBSERVING", "COMPLETED")
    drive(movement, "deposit_observe", "OBSERVING")
    assert detect_stuck_nodes(now=timezone.now() + timedelta(days=1)) == 1

    html = home_html(client, supervisor)

    # then the tiles and the reasons agree with the attention rows and with the list's filter
    open_stuck = MovementAttention.objects.filter(resolved_at__isnull=True, reason="stuck")
    assert re.search(rf'id="qtg-stuck"><b>{open_stuck.count()}</b>', html)
    assert re.search(r'<tr data-reason="stuck"><td>[^<]+</td><td class="num">1</td>', html)
    listed = MovementRequest.objects.filter(needs_me_q()).count()
    assert listed == 4  # pending, gate, intervention, and the stuck one
    assert re.search(rf'id="qtg-needs-someone"><b><a [^>]*>{listed}</a>', html)
    # and a supervisor's queue has it (they may handle the attention)
    assert ("movement", str(movement.pk)) in queue_pks(html)


def transit_bars(html: str, asset: str) -> list[tuple[str, Decimal]]:
    chart = re.search(rf'<svg id="qtg-chart-transit-{asset}".*?</svg>', html, re.S)
    assert chart, f"no money-in-transit chart for {asset}"
    return [
        (hour, Decimal(n))
        for hour, n in re.findall(r'data-hour="([^"]+)" data-n="([^"]+)"', chart.group(0))
    ]


def left_and_arrived(movement: MovementRequest):
    """When the movement's money left (its first side-effect node to complete) and when it
    arrived (it finished), read row by row."""
    completed = [
        node.state_changed_at
        for node in movement.nodes.all()
        if node.has_side_effect and node.node_state == NodeState.COMPLETED
    ]
    finished = movement.request_state in ("COMPLETED", "FAILED", "CANCELLED", "REJECTED")
    return (min(completed) if completed else None), (
        movement.state_changed_at if finished else None
    )


def test_money_in_transit_over_the_day_matches_the_movements(client, op, floor, make_movement):
    # given, beside the floor, a movement whose money left 5 hours ago and arrived 2 hours ago
    done = make_movement(approve=True, amount="125.5")
    drive(done, "withdraw", *TO_COMPLETED)
    drive(done, "withdraw_observe", "OBSERVING", "COMPLETED")
    drive(done, "deposit_observe", "OBSERVING", "COMPLETED")
    now = timezone.now()
    MovementRequestNode.objects.filter(request=done, node_key="withdraw").update(
        state_changed_at=now - timedelta(hours=5)
    )
    MovementRequest.objects.filter(pk=done.pk).update(state_changed_at=now - timedelta(hours=2))

    gauges.refresh()  # the scheduled refresh computes the series; the page reads them
    html = home_html(client, op)
    bars = transit_bars(html, "USDC")
    now = GaugeSnapshot.objects.get(name="current").computed_at

    # then each hour's bar is the money that had left and not arrived at its end
    assert len(bars) == 24
    movements = [MovementRequest.objects.get(pk=m.pk) for m in (*floor.values(), done)]
    spans = [(m.amount, *left_and_arrived(m)) for m in movements]
    for i, (_, shown) in enumerate(bars):
        hour_end = min(
            now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=22 - i), now
        )
        expected = sum(
            (
                amount
                for amount, left, arrived in spans
                if left is not None and left <= hour_end and (arrived is None or arrived > hour_end)
            ),
            Decimal(0),
        )
        assert shown == expected, (i, shown, expected)
    # by hand: now 300 (the gate's withdrawal) + 640 (the intervention) are out; 5 hours
    # ago the finished one was out too
    assert bars[-1][1] == Decimal("940")
    assert bars[-4][1] == Decimal("125.5")
    assert "940.000000" in html  # the peak, written with the asset's decimals


class RpcAndIris(BaseHTTPRequestHandler):
    """Answers JSON-RPC's eth_blockNumber with the head set per port, and Iris's root with
    a 404 (it serves /v2/... only)."""

    heads: dict[int, int] = {}

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        head = self.heads[self.server.server_address[1]]
        answer = {"jsonrpc": "2.0", "id": body["id"], "result": hex(head)}
        self._send(200, json.dumps(answer).encode())

    def do_GET(self):
        self._send(404, b'{"message": "Not Found"}')

    def _send(self, status: int, payload: bytes):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def venues_up(settings, tmp_path, monkeypatch):
    """Two RPC endpoints of one chain (heads 1000 and 996), a third that refuses, and an
    Iris: real HTTP servers on free ports."""
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), RpcAndIris) for _ in range(2)]
    RpcAndIris.heads = {
        servers[0].server_address[1]: 1000,
        servers[1].server_address[1]: 996,
    }
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    urls = [f"http://127.0.0.1:{s.server_address[1]}/" for s in servers]
    monkeypatch.setenv("QTG_TEST_RPC_A", urls[0])
    monkeypatch.setenv("QTG_TEST_RPC_B", urls[1])
    monkeypatch.setenv("QTG_TEST_RPC_C", "http://127.0.0.1:1/")
    monkeypatch.setenv("QTG_TEST_IRIS", urls[0])
    chains = tmp_path / "chains.yaml"
    chains.write_text(
        "version: 1\niris_url_env: QTG_TEST_IRIS\nchains:\n  devnet:\n    kind: evm\n"
        "    chain_id: 31337\n    rpc_url_env: QTG_TEST_RPC_A\n"
        "    rpc_endpoints: [QTG_TEST_RPC_B, QTG_TEST_RPC_C]\n    max_head_lag_blocks: 3\n"
    )
    settings.QTG_CHAINS_CONFIG = str(chains)
    yield
    for server in servers:
        server.shutdown()
        server.server_close()


def test_venue_health_shows_what_the_probe_and_the_clocks_recorded(client, op, venues_up):
    # given the scheduled refresh probed the venues, and an exchange account's clock was
    # measured (one credential of another exchange is blocked)
    gauges.refresh()
    now = timezone.now()
    CexClock.objects.create(
        account="treasury-binance",
        exchange="binance",
        skew_ms=-412,
        uncertainty_ms=35,
        measured_at=now - timedelta(seconds=30),
    )
    CexClock.objects.create(
        account="upbit-hot",
        exchange="upbit",
        skew_ms=80,
        uncertainty_ms=10,
        measured_at=now - timedelta(hours=2),
    )

    html = home_html(client, op)
    venues = html[html.index('id="qtg-venues"') : html.index('id="qtg-charts-settled"')]

    # then the chain's head is the highest endpoint's, its lag the slowest answering one's
    stored = GaugeSnapshot.objects.get(name="current").values["venue_probe"]
    chain = stored["chains"][0]
    assert (chain["head"], chain["max_lag"], chain["answering"]) == (1000, 4, 2)
    row = re.search(r'<tr data-chain="devnet" data-ok="(\d)">(.*?)</tr>', venues, re.S)
    assert row and row.group(1) == "0"  # lagging past its limit and one endpoint down
    assert 'data-head="1000"' in row.group(2) and 'data-lag="4"' in row.group(2)
    assert "QTG_TEST_RPC_C: <span" in row.group(2) and "ConnectError" in row.group(2)
    # the exchange accounts: skew as measured, reachable only when measured lately
    assert re.search(r'data-account="treasury-binance" data-ok="1">.*?data-skew="-412"', venues)
    assert re.search(r'data-account="upbit-hot" data-ok="0">.*?no answer for', venues, re.S)
    # Iris answers (its root is a 404: an answer)
    assert re.search(r'data-iris="QTG_TEST_IRIS" data-ok="1">.*?HTTP 404', venues, re.S)
