"""People of each role with an email address, movements in the states that notify, eager
tasks and a real HTTP receiver for the chat webhook (the callbacks suite's)."""

import pytest
from django.contrib.auth.models import Group, User

from movements.permissions import (
    APPROVERS,
    OPERATORS,
    SECURITY_ADMINS,
    SUPERVISORS,
    VIEWERS,
    ensure_operator_groups,
)
from tests.admin.conftest import (  # noqa: F401 (fixtures)
    executing,
    intervention_failed,
    intervention_unknown,
    waiting_at_gate,
)
from tests.callbacks.conftest import eager_tasks, receiver  # noqa: F401 (fixtures)


def person(username: str, *groups: str, email: bool = True) -> User:
    user = User.objects.create_user(
        username=username,
        password="pw-" + username,
        email=f"{username}@example.test" if email else "",
        is_staff=True,
    )
    user.groups.set(Group.objects.filter(name__in=groups))
    return User.objects.get(pk=user.pk)


@pytest.fixture
def people(db):
    """One of each role: olga the operator creates the movements."""
    ensure_operator_groups()
    return {
        "olga": person("olga", OPERATORS),
        "ann": person("ann", APPROVERS),
        "sam": person("sam", SUPERVISORS),
        "sue": person("sue", SUPERVISORS),
        "vic": person("vic", VIEWERS),
        "sec": person("sec", SECURITY_ADMINS),
    }


@pytest.fixture
def creator(people):
    """The movements of these tests are created by the operator (tests/conftest's make_movement
    creates them as ``creator``)."""
    return people["olga"]


@pytest.fixture(autouse=True)
def notify_settings(settings):
    settings.QTG_NOTIFY_MAX_ATTEMPTS = 3
    settings.QTG_NOTIFY_BACKOFF_SECONDS = 0
    settings.QTG_NOTIFY_TIMEOUT_SECONDS = 2
    settings.QTG_NOTIFY_CHAT_WEBHOOK_URL = ""
    settings.QTG_CONSOLE_URL = "https://qtg.example.test"
    return settings


@pytest.fixture
def commit(django_capture_on_commit_callbacks):
    """``with commit(): ...``: what the block writes commits (its on-commit hooks run: the
    queued tasks, eager, send at once), as it would outside the test's transaction."""
    return lambda: django_capture_on_commit_callbacks(execute=True)
