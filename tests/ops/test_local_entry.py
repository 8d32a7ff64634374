"""``QTG_VENUES=local``: the stand-ins start from their own entry (``python -m standins.local``,
what ``make run`` runs in local mode), which plugs them into ``run_embedded``; the product
command alone does not pretend to run local mode without them."""

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from movements import ports
from standins.local import LAUNCHERS
from venues.apps import ADAPTERS


def test_run_embedded_in_local_mode_without_the_standins_entry_refuses(settings, monkeypatch):
    settings.QTG_VENUES = "local"
    monkeypatch.setattr(ports, "_embedded_services", [])

    with pytest.raises(CommandError, match=r"python -m standins\.local"):
        call_command("run_embedded", "--no-seed")


def test_every_real_venue_adapter_has_a_local_launcher():
    assert list(LAUNCHERS) == list(ADAPTERS)
