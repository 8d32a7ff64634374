"""One leader per role through a database lease (qtg/leader.py): beat on several machines, one
sending; another takes over when the leader stops renewing."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from ops.models import LeaderLease
from qtg import leader


@pytest.mark.django_db
def test_one_candidate_leads_the_others_stand_by_until_its_lease_runs_out():
    assert leader.hold("beat", "a", ttl=30)
    assert not leader.hold("beat", "b", ttl=30)
    assert leader.hold("beat", "a", ttl=30)  # renewing

    LeaderLease.objects.filter(name="beat").update(expires_at=timezone.now() - timedelta(seconds=1))

    assert leader.hold("beat", "b", ttl=30)
    assert not leader.hold("beat", "a", ttl=30)  # the old leader cannot renew what it lost
    assert leader.current("beat").holder == "b"


@pytest.mark.django_db
def test_a_released_lease_is_taken_at_once_and_roles_are_independent():
    assert leader.hold("beat", "a", ttl=30)
    assert leader.hold("reaper", "b", ttl=30)

    leader.release("beat", "a")
    leader.release("beat", "b")  # not its lease: nothing happens

    assert leader.hold("beat", "c", ttl=30)
    assert leader.current("reaper").holder == "b"


@pytest.mark.django_db
def test_the_beat_scheduler_sends_only_while_it_leads(monkeypatch):
    from qtg.celery import app

    sent = []
    schedulers = []
    for _ in range(2):
        scheduler = leader.LeaderScheduler(app=app, lazy=True)
        scheduler.holder = f"beat-{len(schedulers)}"
        monkeypatch.setattr(
            scheduler,
            "apply_entry",
            lambda entry, s=scheduler, **kw: sent.append((s.holder, entry.name)),
        )
        scheduler.setup_schedule = lambda: None
        scheduler._store = {"entries": {}}
        schedulers.append(scheduler)
    first, second = schedulers

    def all_due(scheduler):
        scheduler.merge_inplace(app.conf.beat_schedule)
        for entry in scheduler.schedule.values():
            entry.last_run_at = timezone.now() - timedelta(days=1)

    for scheduler in schedulers:
        all_due(scheduler)

    for _ in range(len(app.conf.beat_schedule) + 1):  # beat sends one due entry per tick
        first.tick()
        second.tick()
    assert first.leading and not second.leading
    assert {holder for holder, _ in sent} == {"beat-0"}
    assert {name for _, name in sent} == set(app.conf.beat_schedule)

    # the leader dies without releasing: after its lease, the other one sends
    LeaderLease.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    del sent[:]
    all_due(second)
    for _ in range(len(app.conf.beat_schedule) + 1):
        second.tick()
    assert second.leading
    assert {holder for holder, _ in sent} == {"beat-1"}


def test_every_sweep_message_expires_once_later_ones_are_due():
    # A worker busy for a minute (a venue call on the solo pool) came back to ~800 queued
    # sweeps on RabbitMQ and ran them one by one: stale copies are discarded instead.
    for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
        expires = entry["options"]["expires"]
        assert expires >= settings.QTG_SWEEP_EXPIRES_MIN_SECONDS, name
        assert expires >= 3 * entry["schedule"], name
