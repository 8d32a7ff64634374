"""The console's chain-transaction page, read as a person reads it (for the venue tests that
run real transactions and then look at them)."""

import re
from decimal import Decimal
from html import unescape

from django.contrib.auth.models import User
from django.urls import reverse

# The console's one way of writing a time: "2026-12-03 12:40:05 UTC".
ONE_FORMAT = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC")


def chain_transaction_url(tx) -> str:
    return reverse("admin:venues_chaintransaction_change", args=[tx.pk])


def chain_transaction_page(client, tx) -> tuple[str, str]:
    """(visible text, html) of ``tx``'s console page, as a superuser opens it."""
    user = User.objects.filter(username="page-reader").first() or User.objects.create_superuser(
        "page-reader", "reader@example.org", "pw-page-reader"
    )
    client.force_login(user)
    response = client.get(chain_transaction_url(tx))
    assert response.status_code == 200
    html = response.content.decode()
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S)
    text = " ".join(unescape(re.sub(r"<[^>]+>", " ", body)).split())
    return text, html


def fee_text(wei) -> str:
    """How a fee in wei reads, worked out here independently: ETH, then gwei."""

    def plain(value: Decimal) -> str:
        text = f"{value:,f}"
        return text.rstrip("0").rstrip(".") if "." in text else text

    return f"{plain(Decimal(wei) / 10**18)} ETH ({plain(Decimal(wei) / 10**9)} gwei)"
