"""Fixtures shared by the whole suite: actors, users with permissions, movements."""

import os

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from movements.services import movement_approve, movement_create
from qtg.core.actors import Actor
from reservations.models import Hardcap
from reservations.services import hardcap_ensure
from standins import devchain_missing_reason  # before any test module imports web3: see there

ALL_MOVEMENT_PERMS = [
    "approve_movement",
    "reject_movement",
    "resume_manual_gate",
    "cancel_movement",
    "resolve_unknown_node",
    "resume_intervention",
    "retry_node",
    "force_complete_movement",
    "force_fail_movement",
    "cancel_in_transit",
    "handle_attention",
    "view_movementrequest",
]


TEST_VENUES = ("a", "b", "venue-a", "venue-b", "venue-x", "venue-y", "wallet-9")


# The property tests' examples are the same everywhere; how fast a draw or an example runs is
# the machine's (4 test processes on 2 cores, beside CI's other run): a slow draw failed the
# "too slow" health check there (1.8 s for two draws) while every example passed.
hypothesis_settings.register_profile(
    "qtg", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
hypothesis_settings.load_profile("qtg")


def pytest_configure(config):
    # Real hashing costs ~100 ms per user; tests create many users (the whole suite's one
    # place for it).
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # Venues the suite's movements name besides the sandbox's exchanges.
    settings.QTG_KNOWN_VENUES = [*settings.QTG_KNOWN_VENUES, *TEST_VENUES]
    # One test client fills whole hardcaps on purpose; the per-client limits have their own
    # tests (tests/security/test_client_limits.py).
    settings.QTG_CLIENT_MAX_PENDING_COUNT = 10_000
    settings.QTG_CLIENT_MAX_PENDING_SHARE = "1"
    # Whole test modules call the API as one user within a minute; the throttles have their
    # own test.
    settings.QTG_API_THROTTLE_USER = settings.QTG_API_THROTTLE_ANON = "1000000/min"
    # The suite's destinations are sandbox venue accounts and its operator actions are taken
    # by one supervisor: the address book and the two-person rule (on in production) are
    # off here, and their own tests (tests/approvals/) turn them on. Set in the environment
    # too, for the worker processes the slow tests start.
    for name in ("QTG_ADDRESS_BOOK_ENFORCED", "QTG_TWO_PERSON_OVERRIDES"):
        setattr(settings, name, False)
        os.environ[name] = "0"
    if settings.DB_IS_POSTGRES:
        _flush_as_the_owner()


def _flush_as_the_owner() -> None:
    """A transactional test ends with Django's flush (TRUNCATE of every table), which the
    evidence tables' TRUNCATE triggers refuse (issue 28). The suite resets its own test
    database as its owner would: with triggers off (``session_replication_role``) for the
    flush alone. Nothing outside the tests flushes a database."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    original = DatabaseOperations.execute_sql_flush

    def execute_sql_flush(self, sql_list):
        with self.connection.cursor() as cursor:
            cursor.execute("SET session_replication_role = replica")
        try:
            original(self, sql_list)
        finally:
            with self.connection.cursor() as cursor:
                cursor.execute("SET session_replication_role = DEFAULT")

    DatabaseOperations.execute_sql_flush = execute_sql_flush


def pytest_collection_modifyitems(config, items):
    on_postgres = settings.DB_IS_POSTGRES
    skip = pytest.mark.skip(reason="needs PostgreSQL (set DATABASE_URL)")
    # A self-contained test (its own SQLite database and embedded broker, or its own
    # unreachable ones) would repeat exactly on the PostgreSQL / real-broker runs: the
    # embedded run has it (CI runs both; the skip is reported, never silent).
    embedded_run = not on_postgres and settings.CELERY_BROKER_URL == "filesystem://"
    same = pytest.mark.skip(
        reason="self-contained: identical on every run; the embedded run has it"
    )
    # The console in a real Chromium drives the same views the Django test client drives on
    # every run (tests/admin/, their queries on each backend): the browser adds the pages'
    # own behaviour (links, buttons, scripts), which is the same whatever the database, and
    # costs minutes of CPU. The embedded run (the README's `make test`) has it.
    in_browser = pytest.mark.skip(
        reason="browser: the same pages on every run; the embedded run drives them in Chromium"
    )
    for item in items:
        if "postgres" in item.keywords and not on_postgres:
            item.add_marker(skip)
        if "self_contained" in item.keywords and not embedded_run:
            item.add_marker(same)
        if "browser" in item.keywords and not embedded_run:
            item.add_marker(in_browser)
    devchain_items = [item for item in items if "devchain" in item.keywords]
    if devchain_items:
        reason = devchain_missing_reason()
        if reason:
            for item in devchain_items:
                item.add_marker(pytest.mark.skip(reason=f"devchain: {reason}"))
    items[:] = longest_files_first(items)


# Files holding tests of these markers take minutes (real processes, devchains, a browser);
# the rest take seconds. pytest-xdist (`--dist loadfile`) hands files out in collection order,
# so the long ones go first and the short ones fill the processes in around them, rather than
# one long file starting last and running alone at the end.
LONG_MARKERS = ("slow", "devchain", "browser", "standin")


def longest_files_first(items):
    def weight(item):
        return next(
            (rank for rank, name in enumerate(LONG_MARKERS) if name in item.keywords),
            len(LONG_MARKERS),
        )

    by_file: dict[str, list] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def file_weight(tests):
        running = [weight(item) for item in tests if not _skipped(item)]
        return min(running, default=len(LONG_MARKERS) + 1)

    ordered = sorted(by_file.values(), key=file_weight)
    return [item for tests in ordered for item in tests]


def _skipped(item) -> bool:
    return any(mark.name == "skip" for mark in item.iter_markers())


# Fixtures whose presence means the test may touch the database.
DB_FIXTURES = {
    "db",
    "transactional_db",
    "django_db_reset_sequences",
    "django_db_serialized_rollback",
    "live_server",
    "admin_client",
    "admin_user",
}
# Reservations fail closed: without a hardcap no movement validates. Every database test gets
# caps on the assets the suite uses, generous enough never to be the reason a test fails.
# Tests about hardcaps use other assets (tests/reservations/).
TEST_HARDCAP_ASSETS = ("USDC", "USDT", "BTC", "ETH")
TEST_HARDCAP = "1000000000000"


def _ensure_test_hardcaps() -> None:
    for asset in TEST_HARDCAP_ASSETS:
        hardcap_ensure(asset=asset, max_in_flight=TEST_HARDCAP, note="test suite default")


@pytest.fixture(autouse=True)
def default_hardcaps(request, django_db_blocker):
    """Generous hardcaps for the suite's assets, in every test that uses the database.

    They are committed outside any test's transaction, by the first database test of a
    process, so every test that rolls back starts from them (one query); a transactional
    test ends with a flush that leaves none, and the next test writes them again."""
    if request.node.get_closest_marker("django_db") is None and not (
        DB_FIXTURES & set(request.fixturenames)
    ):
        return
    request.getfixturevalue("django_db_setup")
    with django_db_blocker.unblock():
        if _missing_test_hardcaps():
            _ensure_test_hardcaps()
    # Set up the database the way the test asked for (transactional or not).
    request.getfixturevalue("_django_db_helper")


def _missing_test_hardcaps() -> bool:
    present = Hardcap.objects.filter(asset__in=TEST_HARDCAP_ASSETS, source="").count()
    return present != len(TEST_HARDCAP_ASSETS)


def make_user(username: str, *perms: str, **extra) -> User:
    user = User.objects.create_user(username=username, password="pw-" + username, **extra)
    if perms:
        user.user_permissions.set(
            Permission.objects.filter(content_type__app_label="movements", codename__in=perms)
        )
    # has_perm caches; reload so the permissions just set are seen.
    return User.objects.get(pk=user.pk)


@pytest.fixture
def system() -> Actor:
    return Actor.system("tests")


@pytest.fixture
def creator(db) -> User:
    return make_user("creator")


@pytest.fixture
def operator(db) -> User:
    return make_user("operator", *ALL_MOVEMENT_PERMS)


@pytest.fixture
def make_movement(db, creator):
    """Create a movement through the real service (PENDING_APPROVAL unless it fails)."""

    def _make(template: str = "cex_to_cex", *, approve: bool = False, by=None, **overrides):
        fields = {
            "asset": "USDC",
            "amount": "100.00",
            "source": "sandbox-exchange-a",
            "destination": "sandbox-exchange-b",
        }
        fields.update(overrides)
        request = movement_create(template=template, actor=Actor.for_user(by or creator), **fields)
        if approve:
            movement_approve(request=request, actor=Actor.system("tests-approver"))
            request.refresh_from_db()
        return request

    return _make
