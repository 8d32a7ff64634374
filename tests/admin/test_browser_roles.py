"""Every role, in a real Chromium: log in, follow every sidebar link, press every button the
console shows on the movement list and on each kind of movement page (submitting its
confirmation page with a reason), and follow every link of every message. Nothing answers
403, 404 or 500, and nothing the role is shown refuses it (a button that then says "you lack
the permission" was shown to someone who cannot use it)."""

from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from movements.models import OverrideAction
from movements.permissions import (
    APPROVERS,
    OPERATORS,
    SECURITY_ADMINS,
    SUPERVISORS,
    VIEWERS,
    ensure_operator_groups,
)
from movements.services.attention import detect_stuck_nodes
from movements.services.overrides import override_propose
from qtg.core.actors import Actor
from tests.admin.conftest import TO_COMPLETED, drive, staff_user
from tests.admin.test_browser import browser_page, log_in  # noqa: F401 (a fixture)
from tests.admin.test_browser import pytestmark as browser_marks

pytestmark = browser_marks

# The role's groups (None: a superuser, who holds every permission).
ROLES = {
    "viewer": VIEWERS,
    "approver": APPROVERS,
    "operator": OPERATORS,
    "supervisor": SUPERVISORS,
    "security-admin": SECURITY_ADMINS,
    "superuser": None,
}
# What a refusal of the role itself says (qtg.core.policies, the services): a button leading
# there was shown to someone who cannot use it.
NOT_FOR_YOU = ("lacks the permission", "four-eyes", "not permitted", "permission denied")
REASON = "checked by the role crawl in the browser"


@pytest.fixture
def kinds(
    make_movement,
    executing,
    waiting_at_gate,
    intervention_unknown,
    intervention_failed,
    intervention_reconciled,
):
    """A maker of a fresh movement for each situation an action applies to (made by someone
    other than the role: the suite's creator)."""

    def stuck(**kwargs):
        movement = drive(executing(**kwargs), "withdraw", *TO_COMPLETED)
        drive(movement, "withdraw_observe", "OBSERVING", "COMPLETED")
        movement = drive(movement, "deposit_observe", "OBSERVING")
        detect_stuck_nodes(now=timezone.now() + timedelta(days=1))
        return movement

    return {
        "pending": lambda: make_movement(amount="2500.00"),
        "executing": lambda: executing(amount="40.00"),
        "gate": lambda: waiting_at_gate(amount="300.00"),
        "unknown": lambda: intervention_unknown(amount="750.00"),
        "failed": lambda: intervention_failed(amount="640.00"),
        "reconciled": lambda: intervention_reconciled(amount="55.00"),
        "stuck": lambda: stuck(amount="12.00"),
    }


def fill_and_confirm(page) -> None:
    """Fill every field of a confirmation form (a reason, a note, evidence, the first choice
    of each list, the first outcome that needs no more, every acknowledgement) and submit."""
    form = page.locator("form#qtg-action-form, #content form[method=post]").first
    for field in form.locator("textarea, input[type=text], input:not([type])").all():
        if field.is_visible() and not field.input_value():
            field.fill(REASON)
    for select in form.locator("select").all():
        values = [v for v in select.locator("option").evaluate_all("os => os.map(o => o.value)")]
        chosen = [v for v in values if v]
        if chosen and not select.input_value():
            select.select_option(chosen[0])
    names = set(form.locator("input[type=radio]").evaluate_all("es => es.map(e => e.name)"))
    for name in names:
        radios = form.locator(f"input[type=radio][name='{name}']")
        completed = form.locator(f"input[type=radio][name='{name}'][value=COMPLETED]")
        (completed if completed.count() else radios.first).check()
    for box in form.locator("input[type=checkbox]").all():
        if box.is_visible():
            box.check()
    confirm = form.locator("#qtg-confirm, input[type=submit], button[type=submit]").last
    with page.expect_navigation():
        confirm.click()


class Crawl:
    """What the role met: every document or fetch answer of 400 and above, every refusal
    message, every link found in messages."""

    def __init__(self, page, base: str):
        self.page, self.base = page, base
        self.bad: list[tuple[str, int]] = []
        self.refused: list[tuple[str, str]] = []
        self.message_links: set[str] = set()
        self.said: list[tuple[str, str]] = []  # (where, message): what the crawl did
        page.on("response", self._answer)

    def _answer(self, response) -> None:
        kind = response.request.resource_type
        if kind in ("document", "fetch", "xhr") and response.status >= 400:
            self.bad.append((response.url, response.status))

    def open(self, path: str) -> None:
        self.page.goto(self.base + path)
        self.read_messages(path)

    def read_messages(self, where: str) -> None:
        for message in self.page.locator("ul.messagelist li").all():
            text = message.inner_text()
            self.said.append((where, text))
            if "error" in (message.get_attribute("class") or "") and any(
                phrase in text.lower() for phrase in NOT_FOR_YOU
            ):
                self.refused.append((where, text))
            for href in message.locator("a").evaluate_all("es => es.map(e => e.href)"):
                self.message_links.add(urlsplit(href).path)
        errors = self.page.locator(".errornote, ul.errorlist").all_inner_texts()
        if errors:
            self.refused.append((where, " / ".join(errors)))

    def follow_message_links(self) -> None:
        done: set[str] = set()
        while self.message_links - done:
            path = sorted(self.message_links - done)[0]
            done.add(path)
            self.open(path)

    def sidebar_links(self) -> list[str]:
        hrefs = self.page.eval_on_selector_all(
            "#nav-sidebar a, #qtg-apps a, #user-tools a",
            "els => els.map(e => e.getAttribute('href'))",
        )
        return sorted(
            {href for href in hrefs if href and href.startswith("/") and "logout" not in href}
        )


def press_every_action_of_the_list(crawl: Crawl) -> list[str]:
    """Each bulk action the list offers, on every row; each row button's confirmation page."""
    crawl.open("/admin/movements/movementrequest/")
    row_buttons = crawl.page.eval_on_selector_all(
        "#result_list a.qtg-action", "els => els.map(e => e.getAttribute('href'))"
    )
    for href in sorted(set(row_buttons)):
        crawl.open(href)
    crawl.open("/admin/movements/movementrequest/")
    options = crawl.page.eval_on_selector_all(
        "select[name=action] option", "os => os.map(o => o.value).filter(v => v)"
    )
    for option in options:
        crawl.open("/admin/movements/movementrequest/")
        crawl.page.check("#action-toggle")
        crawl.page.select_option("select[name=action]", option)
        with crawl.page.expect_navigation():
            crawl.page.click("button[name=index]")
        crawl.read_messages(f"bulk {option}")
        if crawl.page.locator("#content form[method=post] input[name=post]").count():
            fill_and_confirm(crawl.page)
            crawl.read_messages(f"bulk {option} confirmed")
    return options


def press_every_action_of_each_page(crawl: Crawl, kinds) -> dict[str, list[str]]:
    """For each kind of movement: the buttons its page shows the role; each pressed on a fresh
    movement of that kind, its confirmation submitted."""
    shown: dict[str, list[str]] = {}
    for kind, make in kinds.items():
        first = make()
        crawl.open(f"/admin/movements/movementrequest/{first.pk}/change/")
        crawl.page.wait_for_selector("#qtg-state")
        actions = crawl.page.eval_on_selector_all(
            "#qtg-actions a[data-action]", "els => els.map(e => e.dataset.action)"
        )
        shown[kind] = actions
        for position, action in enumerate(actions):
            movement = first if position == 0 else make()
            crawl.open(f"/admin/movements/movementrequest/{movement.pk}/change/")
            with crawl.page.expect_navigation():
                crawl.page.click(f"#qtg-actions a[data-action={action}]")
            crawl.read_messages(f"{kind}: {action}")
            if crawl.page.locator("#qtg-action-form").count():
                fill_and_confirm(crawl.page)
                crawl.read_messages(f"{kind}: {action} confirmed")
    return shown


@pytest.mark.parametrize("role", ROLES)
def test_every_role_uses_everything_the_console_shows_it(
    browser_page,  # noqa: F811
    live_server,
    creator,
    kinds,
    role,
    settings,
):
    # given the roles, a user of this one, and another supervisor's proposal to confirm
    settings.QTG_TWO_PERSON_OVERRIDES = True
    ensure_operator_groups()
    if ROLES[role] is None:
        User.objects.create_superuser(role, password="pw-" + role)
    else:
        staff_user(role, ROLES[role])
    proposed = kinds["failed"]()
    override_propose(
        request=proposed,
        action=OverrideAction.FORCE_FAIL,
        actor=Actor.for_user(staff_user("sue", SUPERVISORS)),
        reason="the exchange returned the withdrawal",
    )
    kinds["pending"]()
    page = browser_page
    crawl = Crawl(page, live_server.url)

    # when the role logs in and follows every sidebar link
    log_in(page, live_server, role)
    crawl.open("/admin/")
    pages = crawl.sidebar_links()
    first_page = next(p for p in pages if p.endswith("/") and p.count("/") == 4)
    crawl.open(first_page)
    pages = sorted(set(pages) | set(crawl.sidebar_links()))
    for path in pages:
        crawl.open(path)

    # and presses every button of the list and of each kind of movement page, and confirms
    # every override proposal it is offered
    reads_movements = "/admin/movements/movementrequest/" in pages
    if reads_movements:
        press_every_action_of_the_list(crawl)
        shown = press_every_action_of_each_page(crawl, kinds)
    if "/admin/movements/overrideproposal/" in pages:
        crawl.open("/admin/movements/overrideproposal/")
        for href in crawl.page.eval_on_selector_all(
            "a[data-confirm]", "els => els.map(e => e.getAttribute('href'))"
        ):
            crawl.open(href)
            fill_and_confirm(page)
            crawl.read_messages(f"confirm {href}")
    crawl.follow_message_links()

    # then nothing was closed, missing or broken, and nothing shown refused the role
    print(f"{role}: {len(pages)} pages", shown if reads_movements else "", *crawl.said, sep="\n  ")
    assert crawl.bad == []
    assert crawl.refused == []
    # and each role reached what it works with, and was shown nothing beyond it
    if role == "security-admin":
        assert not reads_movements
        assert "/admin/auth/user/" in pages and "/admin/otp_totp/totpdevice/" in pages
        return
    assert reads_movements and "/admin/venues/chaintransaction/" in pages
    offered = {action for actions in shown.values() for action in actions}
    expected = {
        "viewer": set(),
        "approver": {"approve", "reject"},
        "operator": {"approve", "reject", "resume_gate", "cancel"},
    }
    if role in expected:
        assert offered == expected[role]
        assert "/admin/otp_totp/totpdevice/" not in pages
        assert not any(p.startswith("/admin/sandbox/") for p in pages)
    else:
        assert {"force_fail", "force_complete", "resolve_unknown", "cancel"} <= offered
