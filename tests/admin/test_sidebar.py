"""The console's sidebar and home app list are grouped by task, each model once; a role sees
only the pages it holds a permission for."""

import re

import pytest
from django.urls import reverse

from movements.permissions import APPROVERS, OPERATORS, SECURITY_ADMINS, SUPERVISORS, VIEWERS
from tests.admin.conftest import staff_user


def groups_of(html: str) -> dict[str, list[str]]:
    """Each app-list group's caption and the model names listed under it (home page list)."""
    apps = html[html.index('id="qtg-apps"') :]
    found = {}
    for caption, body in re.findall(
        r"<caption>\s*<a [^>]*>([^<]+)</a>\s*</caption>(.*?)</table>", apps, re.S
    ):
        found[caption.strip()] = re.findall(
            r'<th scope="row" id="[^"]*">\s*<a [^>]*>([^<]+)</a>', body
        )
    return found


def test_a_supervisor_sees_the_pages_grouped_by_task(client, supervisor):
    client.force_login(supervisor)

    groups = groups_of(client.get("/admin/").content.decode())

    assert list(groups) == [
        "Movements",
        "Approvals &amp; policy",
        "Venues",
        "Integrations",
        "Notifications",
    ]
    assert "Chain transactions" in groups["Venues"]
    assert "Movement requests" in groups["Movements"]
    assert "Override proposals" in groups["Approvals &amp; policy"]
    assert "Subscriptions" in groups["Integrations"]
    every = [name for names in groups.values() for name in names]
    assert len(every) == len(set(every))  # each page once


def test_an_operator_is_shown_no_security_pages(client, op):
    client.force_login(op)

    groups = groups_of(client.get("/admin/").content.decode())

    assert "Security" not in groups
    assert "Movements" in groups


def test_an_apps_own_page_still_lists_its_models(client, supervisor):
    client.force_login(supervisor)

    response = client.get(reverse("admin:app_list", args=["movements"]))

    assert response.status_code == 200
    assert b"Movement requests" in response.content


MONEY_PAGES = {
    "Movements": ["Movement requests", "Reservations", "Route templates"],
    "Approvals &amp; policy": [
        "Override proposals",
        "Approval policies",
        "Address book entries",
        "Hardcaps",
    ],
    "Venues": ["Chain transactions", "Chain ledger entries", "Cex withdrawals"],
    "Integrations": ["Subscriptions", "Deliveries", "Api tokens"],
    "Notifications": ["My notifications"],
}


@pytest.mark.parametrize(
    ("role", "shown"),
    [
        (VIEWERS, MONEY_PAGES),
        (APPROVERS, MONEY_PAGES),
        (OPERATORS, MONEY_PAGES),
        (
            SUPERVISORS,
            {
                **MONEY_PAGES,
                # the venues' internals a stuck movement is diagnosed by
                "Venues": [
                    "Chain transactions",
                    "Chain ledger entries",
                    "Nonce cursors",
                    "Cex withdrawals",
                    "Cex clocks",
                ],
            },
        ),
        (
            SECURITY_ADMINS,
            {
                "Integrations": ["Api tokens", "Tokens"],
                "Security": [
                    "Users",
                    "Groups",
                    "Api token events",
                    "TOTP devices",
                    "Access attempts",
                    "Access failures",
                    "Access logs",
                ],
                "Notifications": ["My notifications"],
            },
        ),
    ],
)
def test_each_role_is_shown_exactly_the_pages_of_its_work(client, groups, role, shown):
    # second-factor devices, DRF's tokens and the sandbox only to those who administer them
    client.force_login(staff_user("someone", role))

    assert groups_of(client.get("/admin/").content.decode()) == shown
