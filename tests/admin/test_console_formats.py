"""One way of writing times and money across the console: every rendered datetime in one
format with its time zone, every amount with its asset's decimals and thousands separators.
The pages are crawled as an operator sees them; evidence (``<pre class="qtg-evidence">``) is
the record as it was written and is left verbatim."""

import csv
import io
import re
from decimal import Decimal
from html import unescape

import pytest
from django.urls import reverse

from callbacks.models import Subscription
from movements.models import OverrideAction
from movements.permissions import SUPERVISORS
from movements.services.overrides import override_propose
from qtg.core import money
from qtg.core.actors import Actor
from tests.admin.conftest import staff_user
from tests.admin.helpers import change_url, post_action

# The console's one format: ISO date, 24-hour time to the second, the zone's name.
ONE_FORMAT = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} [A-Z][A-Za-z+\-0-9]*$")
# Anything a person would read as a date with a time, in the formats Django and Python write.
DATETIME_LIKE = re.compile(
    r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?"
    r"(?:[ ]?(?:[A-Z]{2,5}\b|[+-]\d{2}:?\d{2}|Z))?"
    r"|(?:Jan|Feb|March|April|May|June|July|Aug|Sept|Oct|Nov|Dec)[a-z]*\.? \d{1,2}, \d{4}"
    r"(?:, \d{1,2}(?::\d{2})? ?[ap]\.m\.|, midnight|, noon)?"
)


def visible_text(html: str) -> str:
    """The page as read: no scripts, styles, tags or evidence blocks."""
    html = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S)
    html = re.sub(r'<pre class="qtg-evidence">.*?</pre>', " ", html, flags=re.S)
    return unescape(re.sub(r"<[^>]+>", " ", html))


def rendered_datetimes(html: str) -> list[str]:
    return [m.group(0) for m in DATETIME_LIKE.finditer(visible_text(html))]


@pytest.fixture
def console_pages(client, supervisor, make_movement, intervention_failed, settings):
    """The console's pages with times on them: home, list, a MANUAL_INTERVENTION movement
    page (nodes, events, approvals), proposals (list and confirmation), deliveries."""
    settings.QTG_TWO_PERSON_OVERRIDES = True
    Subscription.objects.create(
        name="treasury-hook",
        url="https://hooks.example.com/qtg",
        event_types=["request_approved", "request_attention"],
    )
    make_movement(amount="1234567.5")
    approved = make_movement(amount="20.25")
    client.force_login(supervisor)
    post_action(client, approved, "approve")
    stuck = intervention_failed(amount="640.00")
    proposal = override_propose(
        request=stuck,
        action=OverrideAction.FORCE_FAIL,
        actor=Actor.for_user(staff_user("sue", SUPERVISORS)),
        reason="the exchange returned the withdrawal",
    )
    return {
        "home": reverse("admin:index"),
        "list": reverse("admin:movements_movementrequest_changelist"),
        "movement": change_url(stuck),
        "approved movement": change_url(approved),
        "proposals": reverse("admin:movements_overrideproposal_changelist"),
        "proposal": reverse("admin:movements_overrideproposal_confirm", args=[proposal.pk]),
        "deliveries": reverse("admin:callbacks_delivery_changelist"),
        "reservations": reverse("admin:reservations_reservation_changelist"),
    }


def test_every_datetime_the_console_renders_has_one_format_and_its_zone(client, console_pages):
    found, wrong = {}, {}
    for name, url in console_pages.items():
        response = client.get(url)
        assert response.status_code == 200, (name, url, response.status_code)
        stamps = rendered_datetimes(response.content.decode())
        found[name] = stamps
        if bad := [s for s in stamps if not ONE_FORMAT.match(s)]:
            wrong[name] = bad

    assert wrong == {}
    # and the crawl did read times on the pages that have them
    for name in ("home", "movement", "proposals", "proposal", "deliveries"):
        assert found[name], f"no datetime found on the {name} page"
    assert any(s.endswith(" UTC") for s in found["movement"])


def test_the_list_the_page_and_the_home_write_amounts_with_the_assets_decimals(
    client, supervisor, make_movement
):
    movement = make_movement(amount="1234567.5")
    client.force_login(supervisor)
    shown = "1,234,567.500000"  # USDC has 6 decimals

    list_html = client.get(reverse("admin:movements_movementrequest_changelist")).content
    page_html = client.get(change_url(movement)).content
    home_html = client.get(reverse("admin:index")).content
    held_html = client.get(reverse("admin:reservations_reservation_changelist")).content

    assert shown in visible_text(list_html.decode())
    page = visible_text(page_html.decode())
    assert f"{shown} USDC" in page  # the header's amount
    assert re.search(rf"HELD\s+·\s+{re.escape(shown)} USDC", page)  # the reservation
    assert shown in visible_text(home_html.decode())  # queue and money table
    assert shown in visible_text(held_html.decode())  # the reservations
    # and no amount of the movement is written without them
    for html in (list_html, page_html, home_html, held_html):
        text = visible_text(html.decode())
        assert not re.search(r"1,?234,?567\.5(?:0{0,4}|0{6,})\b", text)


def test_the_csv_export_keeps_the_raw_amount(client, supervisor, make_movement):
    make_movement(amount="1234567.5")
    client.force_login(supervisor)

    response = client.get(reverse("admin:movements_movementrequest_export"))
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))

    assert [r["amount"] for r in rows] == ["1234567.5"]
    assert Decimal(rows[0]["amount"]) == Decimal("1234567.5")


@pytest.mark.parametrize(
    ("amount", "asset", "shown"),
    [
        ("1234567.5", "USDC", "1,234,567.500000"),
        ("0.1", "BTC", "0.10000000"),
        ("1500", "ETH", "1,500.000000000000000000"),
        ("2.5", "SOL", "2.500000000"),
        # an asset whose decimals nobody configured: as written, never rounded
        ("1000.25", "XYZ", "1,000.25"),
        # more digits than the asset has are shown, never rounded away
        ("1.0000001", "USDC", "1.0000001"),
        (None, "USDC", ""),
    ],
)
def test_display_amount_pads_to_the_assets_decimals_and_never_rounds(amount, asset, shown):
    assert money.display_amount(amount, asset) == shown
