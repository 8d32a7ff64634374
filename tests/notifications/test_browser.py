"""In Chromium: a supervisor picks their notifications on *My notifications*; another
supervisor proposes an override in the console, and the first is emailed by the worker."""

from django.core import mail

from movements.models import OverrideProposal
from notifications.models import Kind, Mode
from notifications.services import preferences_of
from tests.admin.test_browser import browser_page, log_in, screenshot  # noqa: F401 (fixture)
from tests.admin.test_browser import pytestmark as browser_marks

pytestmark = browser_marks


def test_a_supervisor_chooses_notifications_and_is_told_of_a_proposal_to_confirm(
    browser_page,  # noqa: F811
    live_server,
    people,
    make_movement,
    intervention_failed,
    eager_tasks,
    settings,
):
    settings.QTG_TWO_PERSON_OVERRIDES = True
    page = browser_page

    # given sam asks never to be told of approvals, and at once of proposals
    log_in(page, live_server, "sam")
    page.click("#qtg-apps a[href='/admin/notifications/notificationpreference/']")
    page.check(f"input[name={Kind.APPROVAL_WAITING}][value={Mode.OFF}]")
    page.check(f"input[name={Kind.OVERRIDE_PROPOSAL}][value={Mode.IMMEDIATE}]")
    screenshot(page, "notification-preferences")
    page.click("#qtg-save-preferences")
    page.wait_for_selector("ul.messagelist >> text=saved")
    assert preferences_of(people["sam"])[Kind.APPROVAL_WAITING] == Mode.OFF

    # when a movement waits for approval, then sue proposes to force-fail a stuck one
    make_movement(amount="90.00")
    assert not [m for m in mail.outbox if m.to == ["sam@example.test"]]
    stuck = intervention_failed(amount="640.00")
    mail.outbox.clear()
    context = page.context.browser.new_context()
    other = context.new_page()
    log_in(other, live_server, "sue")
    other.goto(f"{live_server.url}/admin/movements/movementrequest/{stuck.pk}/change/")
    other.click("#qtg-actions a[data-action=force_fail]")
    other.fill("#id_reason", "the exchange returned the withdrawal")
    other.click("#qtg-confirm")
    other.wait_for_selector("ul.messagelist >> text=proposed")
    context.close()

    # then sam was emailed about the proposal (and not about the approval), with its page
    proposal = OverrideProposal.objects.get(request=stuck)
    to_sam = [m for m in mail.outbox if m.to == ["sam@example.test"]]
    assert len(to_sam) == 1
    assert f"/admin/movements/overrideproposal/{proposal.pk}/confirm/" in to_sam[0].body
