"""An operator's approve on PostgreSQL, alone: its latency and its statements (not a test).

Creates a scratch database (``<name>_approve`` next to the one in DATABASE_URL), an operator
subscription to every event (so each approve writes its callback deliveries, as in
production) and, ``--repeat`` times, interleaved so that machine noise falls on every figure
alike:

- N movements of the one-approver default, each approved by an operator of the operators
  group (four-eyes: not the creator);
- N movements under a two-approver policy, each approved by two operators: the first approval
  (the movement stays PENDING_APPROVAL) and the second (APPROVED, the root nodes READY) are
  measured apart.

Each approve is the service (``movement_approve``) in its own transaction, the approver's user
read again before it (as the API's authentication does for every request, outside the
approve). Nothing else runs: no worker takes the READY nodes. It prints p50 / p99 of each kind
and the CPU time of the approve in this process (p50) as min / median / max over the repeats,
the statements one approve sends in its transaction and after it commits (each parameter set
of a pipelined ``executemany`` counted), the target beside each figure, and the machine's load
average before and after (a loaded 2-core machine stretches the wall time, not the CPU time).
There is no bare reference for an approve.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/qtg python bench/approve.py \
        --movements 200 --repeat 3
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qtg.settings")
os.environ.setdefault("QTG_PROFILE", "embedded")
os.environ["QTG_SANDBOX_ENABLED"] = "1"
os.environ.setdefault("QTG_CLIENT_MAX_PENDING_COUNT", "1000000")
os.environ.setdefault("QTG_CLIENT_MAX_PENDING_SHARE", "1")
# Production-like: no DEBUG query log (it costs more per query than the query itself here).
os.environ.setdefault("DJANGO_DEBUG", "0")
# The delivery tasks each approve queues go to a broker directory of the run's own.
os.environ.setdefault("QTG_VAR_DIR", tempfile.mkdtemp(prefix="qtg-bench-approve-"))

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import Group, User  # noqa: E402
from django.db import connection  # noqa: E402

from callbacks.models import Subscription  # noqa: E402
from movements.models import MovementRequest  # noqa: E402
from movements.services import movement_approve, movement_create  # noqa: E402
from movements.services.approvals import (  # noqa: E402
    approval_policy_activate,
    approval_policy_propose,
)
from qtg.core.actors import Actor  # noqa: E402

APPROVE_P99_TARGET_MS = 30  # issue 34, this 2-core machine
STATEMENTS_TARGET = 15  # issue 34: per approve
# Movements of the two-approver policy: above this amount (the default is one approver).
TWO_APPROVERS_ABOVE = "1000"


class BenchCheckFailed(SystemExit):
    """What the benchmark measured is not what it claims (exits non-zero)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"approve: {message}")


class StatementCounter:
    """Statements sent, each parameter set of an ``executemany`` counted (it is one statement
    each in the server, pipelined in one round trip): in the approve's transaction, and after
    it committed (its commit hooks: the feed's publisher)."""

    def __init__(self) -> None:
        self.count = 0
        self.after_commit = 0
        self._committed = False
        self._run_hooks = connection.run_and_clear_commit_hooks

    def __call__(self, execute, sql, params, many, context):
        statements = len(params) if many else 1
        if self._committed:
            self.after_commit += statements
        else:
            self.count += statements
        return execute(sql, params, many, context)

    def __enter__(self) -> "StatementCounter":
        def run_hooks() -> None:
            self._committed = True
            self._run_hooks()

        connection.run_and_clear_commit_hooks = run_hooks
        self._wrapper = connection.execute_wrapper(self)
        self._wrapper.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._wrapper.__exit__(*exc)
        del connection.run_and_clear_commit_hooks


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile (``share`` in 0..1) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * share // 1))
    return ordered[int(rank) - 1]


def spread(values: list[float], fmt: str = "{:.1f}") -> str:
    """min / median / max."""
    return " / ".join(fmt.format(v) for v in (min(values), statistics.median(values), max(values)))


def verdict(ok: bool) -> str:
    return "holds" if ok else "MISSES"


def load_average() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


# --- the data ------------------------------------------------------------------------------


def setup() -> tuple[User, list[int]]:
    """The creator, the approvers (operators), the two-approver policy and a subscriber."""
    from movements.permissions import OPERATORS, ensure_operator_groups
    from reservations.services import hardcap_ensure_demo_defaults

    hardcap_ensure_demo_defaults()
    ensure_operator_groups()
    operators = Group.objects.get(name=OPERATORS)
    creator = User.objects.create_user("bench-creator")
    approvers = []
    for name in ("bench-approver-1", "bench-approver-2"):
        user = User.objects.create_user(name, is_staff=True)
        user.groups.add(operators)
        approvers.append(user.pk)
    proposer = User.objects.create_superuser("bench-proposer", "p@qtg.invalid", None)
    second = User.objects.create_superuser("bench-second", "s@qtg.invalid", None)
    policy = approval_policy_propose(
        actor=Actor.for_user(proposer),
        key="bench-two",
        approvals_required=2,
        amount_above=TWO_APPROVERS_ABOVE,
    )
    approval_policy_activate(policy=policy, actor=Actor.for_user(second))
    Subscription.objects.create(
        name="bench", url="https://hooks.example.com/bench", secret="s" * 32, event_types=["*"]
    )
    return creator, approvers


def create(creator: User, n: int, label: str, amount: str) -> list[MovementRequest]:
    movements = []
    for i in range(n):
        movement = movement_create(
            template="cex_to_cex",
            asset="USDC",
            amount=amount,
            source="sandbox-exchange-a",
            destination="sandbox-exchange-b",
            idempotency_key=f"bench-{label}-{i}",
            actor=Actor.for_user(creator),
        )
        if movement.request_state != "PENDING_APPROVAL":
            raise BenchCheckFailed(
                f"{label} {i} is {movement.request_state}: {movement.failure_reason}"
            )
        movements.append(movement)
    return movements


def approve_all(movements: list[MovementRequest], approver_pk: int, expect: str) -> dict:
    """Approve each movement as ``approver_pk``; the latencies (s) and statements of each."""
    latencies, cpu, statements, after_commit = [], [], [], []
    for movement in movements:
        actor = Actor.for_user(User.objects.get(pk=approver_pk))  # the API's authentication
        with StatementCounter() as counter:
            started, cpu_started = time.perf_counter(), time.process_time()
            movement_approve(request=movement.pk, actor=actor)
            latencies.append(time.perf_counter() - started)
            cpu.append(time.process_time() - cpu_started)
        statements.append(counter.count)
        after_commit.append(counter.after_commit)
    states = set(
        MovementRequest.objects.filter(pk__in=[m.pk for m in movements]).values_list(
            "request_state", flat=True
        )
    )
    if states != {expect}:
        raise BenchCheckFailed(f"approved movements are {states}, expected {expect}")
    return {
        "latencies": latencies,
        "cpu": cpu,
        "statements": statements,
        "after_commit": after_commit,
    }


# --- the sitting ---------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--movements", type=int, default=200, help="per kind and repeat")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved runs of each figure")
    parser.add_argument(
        "--profile", action="store_true", help="cProfile --movements one-approver approves"
    )
    args = parser.parse_args()
    if not settings.DB_IS_POSTGRES:
        raise BenchCheckFailed("the benchmark runs on PostgreSQL: set DATABASE_URL")
    if args.repeat < 1 or args.movements < 10:
        raise BenchCheckFailed("--repeat is at least 1 and --movements at least 10")
    real_name = connection.settings_dict["NAME"]
    connection.settings_dict.setdefault("TEST", {})["NAME"] = f"{real_name}_approve"
    database = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        if args.profile:
            profile(args.movements)
        else:
            sitting(args, database)
    finally:
        connection.creation.destroy_test_db(real_name, verbosity=0)


def profile(n: int) -> None:
    """cProfile ``n`` one-approver approves (after a warm-up); the top of the profile."""
    import cProfile
    import pstats

    creator, (first, _) = setup()
    approve_all(create(creator, 20, "warm", "100.00"), first, "APPROVED")
    movements = create(creator, n, "profiled", "100.00")
    profiler = cProfile.Profile()
    profiler.enable()
    approve_all(movements, first, "APPROVED")
    profiler.disable()
    profiler.dump_stats("/tmp/qtg-approve.prof")
    stats = pstats.Stats(profiler).sort_stats("cumulative")
    print(f"{n} approves profiled (/tmp/qtg-approve.prof)")
    stats.print_stats(45)


def sitting(args, database: str) -> None:
    n = args.movements
    print(f"database             {database} (PostgreSQL, scratch, dropped afterwards)")
    print(
        f"per repeat           {n} cex_to_cex movements approved by one operator, {n} under a "
        f"two-approver policy approved by two; one subscriber to every event"
    )
    print(f"repeats              {args.repeat}, interleaved; figures are min / median / max")
    print(f"load average         {load_average()} (1, 5, 15 min) before")
    creator, (first, second) = setup()
    approve_all(create(creator, 20, "warm", "100.00"), first, "APPROVED")  # imports, caches
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    kinds = ("one approver", "two: the first", "two: the second")
    p50: dict[str, list[float]] = {kind: [] for kind in kinds}
    p99: dict[str, list[float]] = {kind: [] for kind in kinds}
    cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
    statements: dict[str, list[int]] = {kind: [] for kind in kinds}
    after_commit: dict[str, list[int]] = {kind: [] for kind in kinds}
    for r in range(args.repeat):
        started = time.perf_counter()
        one = create(creator, n, f"one-{r}", "100.00")
        two = create(creator, n, f"two-{r}", "1200.00")
        results = {
            "one approver": approve_all(one, first, "APPROVED"),
            "two: the first": approve_all(two, first, "PENDING_APPROVAL"),
            "two: the second": approve_all(two, second, "APPROVED"),
        }
        for kind, result in results.items():
            ms = [t * 1000 for t in result["latencies"]]
            p50[kind].append(percentile(ms, 0.5))
            p99[kind].append(percentile(ms, 0.99))
            cpu[kind].append(percentile([t * 1000 for t in result["cpu"]], 0.5))
            statements[kind] += result["statements"]
            after_commit[kind] += result["after_commit"]
        print(
            f"  repeat {r + 1}: "
            + ", ".join(f"{kind} p99 {p99[kind][-1]:.1f} ms" for kind in kinds)
            + f" ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    print(f"load average         {load_average()} (1, 5, 15 min) after")
    print()
    print(
        "approve (ms)         p50 min / median / max    p99 min / median / max    "
        "CPU p50 (this process)"
    )
    for kind in kinds:
        ok = statistics.median(p99[kind]) < APPROVE_P99_TARGET_MS
        print(
            f"{kind:<20} {spread(p50[kind]):<25} {spread(p99[kind]):<25} {spread(cpu[kind])}  "
            f"(target p99 < {APPROVE_P99_TARGET_MS} ms, median: {verdict(ok)})"
        )
    print()
    for kind in kinds:
        most = max(statements[kind])
        print(
            f"statements           {kind}: {statistics.median(statements[kind]):.0f} in its "
            f"transaction (at most {most}; target <= {STATEMENTS_TARGET}: "
            f"{verdict(most <= STATEMENTS_TARGET)}), then "
            f"{statistics.median(after_commit[kind]):.0f} after commit (the feed's publisher)"
        )


if __name__ == "__main__":
    main()
