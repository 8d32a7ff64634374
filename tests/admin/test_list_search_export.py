"""The movement list read by a person: source → destination, reason and time in state;
search by asset, venue, creator and venue reference; filters by venue and creator; the
filtered list exported as CSV."""

import csv
import io
from html import escape

from django.urls import reverse

from tests.admin.helpers import changelist_url
from tests.conftest import make_user


def listed_ids(response) -> set[str]:
    return {str(obj.pk) for obj in response.context["cl"].result_list}


def test_each_row_shows_where_the_money_goes_why_and_for_how_long(
    client, op, make_movement, intervention_failed
):
    trouble = intervention_failed(amount="640.00")
    client.force_login(op)

    html = client.get(changelist_url()).content.decode()

    assert "sandbox-exchange-a → sandbox-exchange-b" in html
    assert 'class="field-in_state">0\xa0minutes<' in html
    # the reason the movement went to MANUAL_INTERVENTION is shown in its row
    assert trouble.failure_reason and escape(trouble.failure_reason[:40]) in html


def test_search_finds_movements_by_asset_venue_and_creator(client, op, make_movement):
    usdc = make_movement()
    eth = make_movement(asset="ETH", source="sandbox-exchange-c")
    someone = make_user("treasury-bot")
    theirs = make_movement(asset="DAI", by=someone)
    client.force_login(op)

    def search(term):
        return listed_ids(client.get(changelist_url(), {"q": term}))

    assert search("eth") == {str(eth.pk)}
    assert search("sandbox-exchange-c") == {str(eth.pk)}
    assert search("sandbox-exchange-b") == {str(usdc.pk), str(eth.pk), str(theirs.pk)}
    assert search("treasury-bot") == {str(theirs.pk)}


def test_filters_by_venue_and_by_creator(client, op, make_movement):
    usdc = make_movement()
    other = make_movement(source="sandbox-exchange-c")
    someone = make_user("treasury-bot")
    theirs = make_movement(by=someone)
    client.force_login(op)

    by_venue = client.get(changelist_url(), {"venue": "sandbox-exchange-c"})
    by_creator = client.get(changelist_url(), {"creator": str(someone.pk)})

    assert listed_ids(by_venue) == {str(other.pk)}
    assert listed_ids(by_creator) == {str(theirs.pk)}
    assert str(usdc.pk) not in listed_ids(by_creator)
    assert b"treasury-bot" in by_venue.content  # offered as a creator choice


def test_the_export_streams_every_filtered_movement_as_csv(client, op, make_movement):
    # given more movements than one page shows, and others the filter leaves out
    kept = [make_movement(asset="ETH", amount=f"{1000 + i}.5") for i in range(3)]
    make_movement(asset="USDC")
    client.force_login(op)
    listing = client.get(changelist_url(), {"asset": "ETH"}).content.decode()
    export_url = reverse("admin:movements_movementrequest_export") + "?asset=ETH"
    assert export_url in listing.replace("&amp;", "&")

    response = client.get(export_url)

    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert {row["id"] for row in rows} == {str(m.pk) for m in kept}
    assert sorted(row["amount"] for row in rows) == ["1000.5", "1001.5", "1002.5"]
    assert all(row["asset"] == "ETH" and row["created_by"] == "creator" for row in rows)


def test_the_export_is_closed_to_staff_without_the_view_permission(client, db, make_movement):
    make_movement()
    stranger = make_user("stranger", is_staff=True)
    client.force_login(stranger)

    response = client.get(reverse("admin:movements_movementrequest_export"))

    assert response.status_code == 403
