"""Every role opens what the console shows it: from the admin index, every sidebar link, every
"add" link, every row and every action offered on a movement answers 200 (or redirects to a
page that does), never 403, 404 or 500."""

import re
from collections import deque
from html import unescape
from io import StringIO
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from movements.models import OverrideAction
from movements.permissions import OPERATORS, ROLES, SUPERVISORS
from movements.services.overrides import override_propose
from qtg.core.actors import Actor
from tests.admin.conftest import staff_user

HREF = re.compile(r'<a\b[^>]*\bhref="([^"#]*)"')
# Links the crawl does not follow: logging out ends the session; changelist filters and sorts
# are the same page with another query (the pages themselves are followed once).
SKIP = ("/admin/logout/", "/static/")


def links_of(html: str) -> set[str]:
    found = set()
    for href in HREF.findall(html):
        href = unescape(href)
        if not href.startswith("/") or href.startswith(SKIP):
            continue
        found.add(urlsplit(href).path)
    return found


def crawl(client: Client, start: str = "/admin/", limit: int = 400) -> dict[str, int]:
    """Follow every same-site link reachable from ``start``; the status of each page."""
    seen: dict[str, int] = {}
    queue = deque([start])
    while queue and len(seen) < limit:
        url = queue.popleft()
        if url in seen:
            continue
        response = client.get(url, follow=True)
        seen[url] = response.status_code
        if response.status_code == 200 and "html" in response.get("Content-Type", ""):
            queue.extend(links_of(response.content.decode()) - seen.keys())
    return seen


@pytest.fixture
def console_data(op, supervisor, make_movement, intervention_failed, waiting_at_gate):
    """One movement in each state a role acts on, and an override proposal waiting."""
    make_movement(amount="2500.00")
    waiting_at_gate(amount="300.00")
    intervention_failed(amount="640.00")
    stuck = intervention_failed(amount="77.00")
    other = staff_user("sue", SUPERVISORS)
    override_propose(
        request=stuck,
        action=OverrideAction.FORCE_FAIL,
        actor=Actor.for_user(other),
        reason="the venue desk says it never left",
    )


@pytest.mark.parametrize("role", [*ROLES, "superuser"])
def test_every_link_a_role_is_shown_opens(role, console_data):
    client = Client()
    if role == "superuser":
        user = User.objects.create_superuser("root", password="pw-root")
    else:
        user = staff_user(f"someone-{role.replace(' ', '-')}", role)
    client.force_login(user)

    statuses = crawl(client)

    broken = {url: status for url, status in statuses.items() if status != 200}
    assert broken == {}
    # the crawl reached the pages the role works in
    if role == "security admins":
        assert "/admin/auth/user/" in statuses
        assert not any(url.startswith("/admin/movements/") for url in statuses)
    else:
        assert "/admin/movements/movementrequest/" in statuses
        assert any("/action/" in url for url in statuses) == (role != "viewers")


def test_the_site_link_leads_to_the_console_home(op):
    client = Client()
    client.force_login(op)

    response = client.get("/admin/")

    assert '<a href="/admin/">View site</a>' in response.content.decode()
    assert 'href="/"' not in response.content.decode()


@pytest.mark.parametrize(
    ("username", "role_groups", "hidden"),
    [
        # operators view the rules and proposals; they propose and decide none of them
        (
            "olga",
            (OPERATORS,),
            (
                "/admin/movements/approvalpolicy/add/",
                "/admin/movements/addressbookentry/add/",
                "/admin/reservations/hardcap/add/",
                "/admin/callbacks/subscription/add/",
            ),
        ),
    ],
)
def test_the_index_offers_no_add_link_the_role_cannot_use(username, role_groups, hidden, groups):
    user = staff_user(username, *role_groups)
    client = Client()
    client.force_login(user)

    links = links_of(client.get("/admin/").content.decode())

    assert set(hidden) & links == set()
    assert "/admin/movements/movementrequest/" in links


DEMO_USERS = ["viewer", "approver", "operator", "supervisor", "supervisor2", "security"]


def test_the_demo_seeds_a_user_per_role_with_two_supervisors(db):
    call_command("seed_demo", stdout=StringIO())

    in_groups = {
        user.username: sorted(user.groups.values_list("name", flat=True))
        for user in User.objects.filter(username__in=DEMO_USERS)
    }
    assert in_groups == {
        "viewer": ["viewers"],
        "approver": ["approvers"],
        "operator": [OPERATORS],
        "supervisor": [SUPERVISORS],
        "supervisor2": [SUPERVISORS],
        "security": ["security admins"],
    }
    assert not User.user_permissions.through.objects.exists()


@pytest.mark.parametrize("username", DEMO_USERS)
def test_every_link_a_demo_user_is_shown_opens(username, db):
    # given the demo as make run seeds it
    call_command("seed_demo", stdout=StringIO())
    client = Client()
    client.force_login(User.objects.get(username=username))

    # when the demo user follows every link the console shows
    statuses = crawl(client)

    # then none is closed to them
    assert {url: status for url, status in statuses.items() if status != 200} == {}
    if username == "security":
        assert "/admin/otp_totp/totpdevice/" in statuses
        return
    for page in (
        "/admin/movements/overrideproposal/",
        "/admin/movements/addressbookentry/",
        "/admin/movements/approvalpolicy/",
        "/admin/reservations/reservation/",
        "/admin/reservations/hardcap/",
        "/admin/callbacks/delivery/",
        "/admin/venues/chaintransaction/",
    ):
        assert page in statuses
