"""The operator console in a real headless Chromium (Debian's chromium, driven by Playwright).

Screenshots go to ``QTG_SCREENSHOTS_DIR`` (default ``artifacts/``, kept by CI) and their
paths are printed; ``make screenshots`` writes those of the main screens (home, list, a
MANUAL_INTERVENTION movement, override proposals) to ``docs/screenshots/``, the copies the
README shows.
"""

import os
import shutil
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections

from movements.models import MovementRequest, OverrideAction
from movements.permissions import SUPERVISORS
from movements.services.overrides import override_propose
from movements.states import NodeState, RequestState
from ops import gauges
from qtg.core import money
from qtg.core.actors import Actor
from tests.admin.conftest import TO_COMPLETED, drive, staff_user

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # the browser test is optional where playwright is not installed
    sync_playwright = None

CHROMIUM = os.environ.get("QTG_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("QTG_SCREENSHOTS_DIR") or Path(settings.BASE_DIR) / "artifacts")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        sync_playwright is None,
        reason="playwright is not installed (pip install playwright; CI installs it)",
    ),
    pytest.mark.skipif(
        not shutil.which(CHROMIUM),
        reason=f"no Chromium at {CHROMIUM} (apt-get install chromium; CI installs it)",
    ),
]


@pytest.fixture
def browser_page(monkeypatch):
    # Playwright's sync API runs an event loop in this thread; the ORM calls the test makes
    # between browser steps are still plain synchronous calls.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(15_000)
        yield page
        browser.close()
        # Inside Playwright's event loop the ORM keeps its connections per context, not per
        # thread: close the ones this test opened here, or PostgreSQL cannot drop the test
        # database at the end of the session.
        connections.close_all()


def screenshot(page, name: str) -> Path:
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


def log_in(page, live_server, username: str) -> None:
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", "pw-" + username)
    page.click("input[type=submit]")
    expect(page.locator("#user-tools")).to_contain_text(username)


def test_an_operator_finds_a_pending_movement_approves_it_and_sees_the_event(
    browser_page, live_server, op, make_movement
):
    # given a movement waiting for approval, created by someone else
    movement = make_movement(amount="2500.00")
    page = browser_page

    # when the operator logs in, opens "needs me", opens the movement and approves it
    log_in(page, live_server, "olga")
    page.goto(f"{live_server.url}/admin/movements/movementrequest/")
    page.click("#qtg-needs-me")
    row = page.locator("#result_list tbody tr", has_text=movement.short_id)
    expect(row).to_contain_text("PENDING_APPROVAL")
    screenshot(page, "operator-needs-me-list")
    row.locator("th a, td a").filter(has_text=movement.short_id).first.click()
    expect(page.locator("#qtg-state")).to_contain_text("PENDING_APPROVAL")
    page.click("#qtg-actions a[data-action=approve]")
    expect(page.locator("h1")).to_contain_text("Approve")
    page.click("#qtg-confirm")

    # then the page shows the new state, the success message and the approval event
    expect(page.locator("ul.messagelist")).to_contain_text("is now APPROVED")
    expect(page.locator("#qtg-state")).to_contain_text("APPROVED")
    first_event = page.locator("#events-group tbody tr").first
    expect(first_event).to_contain_text("user:olga")
    expect(page.locator("#events-group")).to_contain_text("PENDING_APPROVAL → APPROVED")
    screenshot(page, "operator-approved-movement")
    movement.refresh_from_db()
    assert movement.request_state == RequestState.APPROVED
    assert movement.approved_by.username == "olga"


def test_a_supervisor_resolves_a_movement_in_manual_intervention(
    browser_page, live_server, supervisor, intervention_unknown
):
    # given a movement whose withdrawal observation went UNKNOWN after the withdrawal
    movement = intervention_unknown(amount="750.00")
    page = browser_page

    # when the supervisor resolves the UNKNOWN node as COMPLETED with evidence
    log_in(page, live_server, "sam")
    page.goto(f"{live_server.url}/admin/movements/movementrequest/{movement.pk}/change/")
    expect(page.locator("#qtg-state")).to_contain_text("MANUAL_INTERVENTION")
    expect(page.locator("#qtg-graph g[data-node=withdraw_observe]")).to_have_attribute(
        "data-state", "UNKNOWN"
    )
    screenshot(page, "supervisor-manual-intervention")
    page.click("#qtg-actions a[data-action=resolve_unknown]")
    page.select_option("#id_node_key", "withdraw_observe")
    page.check("input[name=outcome][value=COMPLETED]")
    page.fill("#id_evidence", "venue says withdrawal WD-123 settled, txid 0xabc")
    page.click("#qtg-confirm")

    # then the movement is executing again and the graph shows the next node ready
    expect(page.locator("ul.messagelist")).to_contain_text("is now EXECUTING")
    expect(page.locator("#qtg-state")).to_contain_text("EXECUTING")
    expect(page.locator("#qtg-graph g[data-node=deposit_observe]")).to_have_attribute(
        "data-state", "READY"
    )
    expect(page.locator("#events-group")).to_contain_text("UNKNOWN → COMPLETED")
    screenshot(page, "supervisor-resolved-movement")
    node = movement.nodes.get(node_key="withdraw_observe", is_current=True)
    assert node.node_state == NodeState.COMPLETED
    assert MovementRequest.objects.get(pk=movement.pk).request_state == RequestState.EXECUTING


def test_the_plan_graph_renders_in_the_browser_with_every_outside_request_blocked(
    browser_page, live_server, op, make_movement
):
    # given a split-and-join movement mid-flight: withdrawn, chain watched, exchange watching
    movement = make_movement("split_join", approve=True, amount="125000.00")
    drive(movement, "withdraw", *TO_COMPLETED)
    drive(movement, "chain_observe", "OBSERVING", "COMPLETED")
    drive(movement, "withdraw_observe", "OBSERVING")
    page = browser_page
    outside = []

    def only_the_live_server(route):
        if route.request.url.startswith(live_server.url):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_the_live_server)

    # when the operator opens the movement page
    log_in(page, live_server, "olga")
    page.goto(f"{live_server.url}/admin/movements/movementrequest/{movement.pk}/change/")

    # then every node of the plan is drawn, with the frontier marked, and nothing was fetched
    # from anywhere but QTG itself
    for key in ("withdraw", "withdraw_observe", "chain_observe", "deposit_observe"):
        box = page.locator(f"#qtg-graph g[data-node={key}]").bounding_box()
        assert box and box["width"] > 100 and box["height"] > 40
    expect(page.locator("#qtg-graph g[data-frontier]")).to_have_count(1)
    expect(page.locator("#qtg-graph g[data-frontier]")).to_have_attribute(
        "data-node", "withdraw_observe"
    )
    assert outside == []
    path = ARTIFACTS / "movement-page.png"
    bottom = page.locator("#qtg-graph").bounding_box()
    height = bottom["y"] + bottom["height"] + 16
    page.screenshot(path=str(path), clip={"x": 0, "y": 0, "width": 1400, "height": height})
    print(f"screenshot: {path}")


@pytest.mark.parametrize("username", ["olga", "sam"])
def test_each_role_opens_every_link_and_add_button_the_console_home_shows_it(
    browser_page, live_server, op, supervisor, make_movement, username
):
    # given a movement waiting for approval
    make_movement(amount="2500.00")
    page = browser_page

    # when the role logs in and opens every link of the home page's app list and its
    # "View site", then every "+ Add" it is shown
    log_in(page, live_server, username)
    page.goto(f"{live_server.url}/admin/")
    expect(page.locator("#site-name")).to_contain_text("QTG operations")
    screenshot(page, f"home-{username}")
    links = page.eval_on_selector_all(
        "#content-main a, #qtg-apps a, #user-tools a",
        "els => els.map(e => e.getAttribute('href'))",
    )
    pages = sorted({href for href in links if href and href.startswith("/")})
    assert "/admin/movements/movementrequest/" in pages

    # then each answers 200: nothing shown is closed to the role
    statuses = {href: page.goto(f"{live_server.url}{href}").status for href in pages}
    assert {href: s for href, s in statuses.items() if s != 200} == {}


def test_a_second_supervisor_confirms_an_override_on_its_own_page_with_a_reason(
    browser_page, live_server, supervisor, intervention_failed, settings
):
    # given the two-person rule on and another supervisor's proposal to force-fail
    settings.QTG_TWO_PERSON_OVERRIDES = True
    movement = intervention_failed(amount="640.00")
    override_propose(
        request=movement,
        action=OverrideAction.FORCE_FAIL,
        actor=Actor.for_user(staff_user("sue", SUPERVISORS)),
        reason="the exchange returned the withdrawal",
    )
    page = browser_page

    # when sam opens the proposals, then the proposal's own page, and confirms with a reason
    log_in(page, live_server, "sam")
    page.goto(f"{live_server.url}/admin/movements/overrideproposal/")
    screenshot(page, "override-proposals")
    page.click("a[data-confirm]")
    expect(page.locator("#qtg-proposal-reason")).to_contain_text("returned the withdrawal")
    expect(page.locator("#qtg-what-happens")).to_contain_text("stays HELD")
    screenshot(page, "override-confirm")
    page.fill("#id_reason", "saw the return on the exchange statement")
    page.click("#qtg-confirm")

    # then the movement page shows it FAILED, by sam's confirmation
    expect(page.locator("ul.messagelist")).to_contain_text("is now FAILED")
    movement.refresh_from_db()
    assert movement.request_state == RequestState.FAILED
    assert "saw the return on the exchange statement" in movement.failure_reason


def test_the_home_shows_my_queue_and_money_and_updates_in_place(
    browser_page, live_server, supervisor, make_movement, intervention_failed, settings
):
    # given a movement awaiting approval, one in MANUAL_INTERVENTION and another supervisor's
    # proposal to force-fail it
    settings.QTG_TWO_PERSON_OVERRIDES = True
    make_movement(amount="2500.00")
    stuck = intervention_failed(amount="640.00")
    proposal = override_propose(
        request=stuck,
        action=OverrideAction.FORCE_FAIL,
        actor=Actor.for_user(staff_user("sue", SUPERVISORS)),
        reason="the exchange returned the withdrawal",
    )
    page = browser_page

    # when sam opens the console
    log_in(page, live_server, "sam")
    page.goto(f"{live_server.url}/admin/")

    # then the home shows the proposal to confirm, the intervention, and the money split
    queue = page.locator("#qtg-queue")
    expect(queue.locator(f"tr[data-kind=proposal][data-pk='{proposal.pk}']")).to_be_visible()
    expect(queue.locator(f"tr[data-kind=movement][data-pk='{stuck.pk}']")).to_be_visible()
    money = page.locator("#qtg-money tr[data-asset=USDC][data-venue=sandbox-exchange-a] td.num")
    expect(money).to_have_text(["2,500.000000", "—", "—", "640.000000"])
    expect(page.locator("#qtg-chart-settled")).to_be_visible()
    screenshot(page, "home")

    # and when a new movement arrives while the page stays open
    page.evaluate("window.qtgStillThisPage = true")
    fresh = make_movement(amount="75.25")

    # then it appears in the queue and in the money without the page reloading
    expect(queue.locator(f"tr[data-pk='{fresh.pk}']")).to_be_visible(timeout=25_000)
    expect(money).to_have_text(["2,575.250000", "—", "—", "640.000000"])
    assert page.evaluate("window.qtgStillThisPage") is True
    screenshot(page, "home-updated")

    # and the proposal's Confirm leads to its confirmation page
    queue.locator(f"tr[data-pk='{proposal.pk}'] a[data-action=confirm]").click()
    expect(page.locator("#qtg-proposal-reason")).to_contain_text("returned the withdrawal")


def test_the_movement_page_follows_the_movement_without_reloading(
    browser_page, live_server, op, make_movement
):
    # given an approved movement whose withdrawal is under way, open on the operator's screen
    movement = make_movement(approve=True, amount="310.00")
    drive(movement, "withdraw", "PREPARING", "SUBMITTING")
    page = browser_page
    log_in(page, live_server, "olga")
    page.goto(f"{live_server.url}/admin/movements/movementrequest/{movement.pk}/change/")
    expect(page.locator("#qtg-graph g[data-node=withdraw]")).to_have_attribute(
        "data-state", "SUBMITTING"
    )
    page.evaluate("window.qtgStillThisPage = true")

    # when the withdrawal completes and its observation starts
    drive(movement, "withdraw", "SUBMITTED", "COMPLETED")

    # then the page shows it in place: same page, graph and events updated
    expect(page.locator("#qtg-graph g[data-node=withdraw]")).to_have_attribute(
        "data-state", "COMPLETED", timeout=20_000
    )
    expect(page.locator("#events-group")).to_contain_text("SUBMITTED → COMPLETED")
    assert page.evaluate("window.qtgStillThisPage") is True


def test_needs_me_updates_in_place_and_keeps_the_operators_ticks(
    browser_page, live_server, op, make_movement, monkeypatch
):
    monkeypatch.setattr("movements.admin.changelist.LIST_REFRESH_SECONDS", 2)
    first = make_movement(amount="10.00")
    page = browser_page
    log_in(page, live_server, "olga")
    page.goto(f"{live_server.url}/admin/movements/movementrequest/?state=needs_me")
    page.evaluate("window.qtgStillThisPage = true")

    # when a movement arrives, it shows up without a reload
    second = make_movement(amount="20.00")
    rows = page.locator("#result_list tbody tr")
    expect(rows.filter(has_text=second.short_id)).to_have_count(1, timeout=15_000)
    assert page.evaluate("window.qtgStillThisPage") is True

    # and while the operator has ticked a row, the list is left alone
    rows.filter(has_text=first.short_id).locator("input.action-select").check()
    third = make_movement(amount="30.00")
    page.wait_for_timeout(5_000)
    expect(rows.filter(has_text=third.short_id)).to_have_count(0)
    expect(rows.filter(has_text=first.short_id).locator("input.action-select")).to_be_checked()
    screenshot(page, "movement-list")

    # and the table fits the screen (1400 px here): no column hides behind a scrollbar
    overflow = page.evaluate(
        "(() => { const r = document.querySelector('#changelist .results');"
        " return r.scrollWidth - r.clientWidth; })()"
    )
    assert overflow <= 0, f"the list is {overflow} px wider than its box"


# The movement page of a MANUAL_INTERVENTION with its history fits in this many pixels at
# 1400 px wide (it was about 6,600 px with the fieldsets and the raw evidence).
COMPACT_PAGE_PX = 2600


@pytest.fixture
def floor(supervisor, op, make_movement, executing, intervention_failed, settings):
    """A working day: movements awaiting approval, running, settled, one in
    MANUAL_INTERVENTION with another supervisor's proposal to force-fail it."""
    settings.QTG_TWO_PERSON_OVERRIDES = True
    make_movement(amount="2500.00")
    make_movement(amount="1250000.00", destination="sandbox-exchange-c")
    running = executing(amount="40.50")
    drive(running, "withdraw", "PREPARING", "SUBMITTING")
    done = make_movement(approve=True, amount="730.125")
    drive(done, "withdraw", *TO_COMPLETED)
    drive(done, "withdraw_observe", "OBSERVING", "COMPLETED")
    drive(done, "deposit_observe", "OBSERVING", "COMPLETED")
    stuck = intervention_failed(amount="640.00")
    proposal = override_propose(
        request=stuck,
        action=OverrideAction.FORCE_FAIL,
        actor=Actor.for_user(staff_user("sue", SUPERVISORS)),
        reason="the exchange returned the withdrawal",
    )
    gauges.refresh()  # the home's money-in-transit series, as the scheduled refresh does
    return {"stuck": stuck, "proposal": proposal, "done": done}


def test_the_main_screens_render_and_are_saved(browser_page, live_server, floor):
    page = browser_page
    log_in(page, live_server, "sam")

    # the home: my queue, money by venue, the charts
    page.goto(f"{live_server.url}/admin/")
    page.locator("#qtg-chart-settled").wait_for()
    page.locator("#qtg-chart-transit").wait_for()
    screenshot(page, "screen-home")

    # the list
    page.goto(f"{live_server.url}/admin/movements/movementrequest/")
    page.locator("#result_list").wait_for()
    assert page.locator("#result_list tbody tr").count() == MovementRequest.objects.count()
    screenshot(page, "screen-list")

    # the proposals
    page.goto(f"{live_server.url}/admin/movements/overrideproposal/")
    page.locator("a[data-confirm]").wait_for()
    screenshot(page, "screen-proposals")


def test_a_manual_intervention_page_is_compact_and_its_events_can_be_searched(
    browser_page, live_server, floor
):
    stuck = floor["stuck"]
    page = browser_page
    log_in(page, live_server, "sam")

    # when the supervisor opens the movement in MANUAL_INTERVENTION
    page.goto(f"{live_server.url}/admin/movements/movementrequest/{stuck.pk}/change/")
    header = page.locator("#qtg-header")
    header.wait_for()
    height = page.evaluate("document.documentElement.scrollHeight")
    print(f"movement page height: {height} px at 1400 px wide")
    screenshot(page, "screen-manual-intervention")

    # then the header says it once: the state, the amount with its decimals, the reason,
    # the reservation and who may act next
    text = header.inner_text()
    assert "MANUAL_INTERVENTION" in text
    assert f"{money.display_amount(Decimal('640'), 'USDC')} USDC" in text
    assert "withdraw_observe" in page.locator("#qtg-reason").inner_text()
    assert "HELD" in page.locator("#qtg-reservation").inner_text()
    assert "supervisors" in page.locator("#qtg-next").inner_text()
    assert page.locator("#qtg-approval-window").count() == 0
    # the page is short: no fieldsets repeating the header, evidence folded
    assert page.locator("fieldset.module.aligned").count() == 0
    assert height < COMPACT_PAGE_PX, f"the page is {height} px tall"
    assert not page.locator("#events-group pre.qtg-evidence").first.is_visible()

    # and when the supervisor searches the events for the failing observation
    events = page.locator("#events-group tbody tr.has_original")
    total = sum(row.is_visible() for row in events.all())
    page.fill("#qtg-event-filter", "OBSERVING → FAILED")
    visible = [row for row in events.all() if row.is_visible()]
    assert 1 <= len(visible) < total
    assert all("FAILED" in row.inner_text() for row in visible)

    # and a search reaches into the folded evidence, which opens where it is needed
    page.fill("#qtg-event-filter", "the exchange returned")
    visible = [row for row in events.all() if row.is_visible()]
    assert len(visible) == 1 and "user:sue" in visible[0].inner_text()
    visible[0].locator("details summary").click()
    assert visible[0].locator("pre.qtg-evidence").is_visible()
    page.fill("#qtg-event-filter", "")
    assert sum(row.is_visible() for row in events.all()) == total
    assert page.locator("#qtg-event-count").inner_text() == f"{total} of {total} events"
