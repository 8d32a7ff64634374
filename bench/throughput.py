"""Throughput of the execution services on PostgreSQL with the sandbox venues (not a test).

Creates a scratch database (``<name>_bench`` next to the one in DATABASE_URL), runs N
movements through the CEX lane by calling the worker services in-process (one worker, one
connection, the sweeps' own batching), and prints movements/s, node transitions/s and database
queries per node transition. Time spent inside the executors' calls is the sandbox venue's (in
production: the network round trip to an exchange or a chain), so the rates are printed end to
end and in the service layer's own time. In the same run, on the same database, it measures the
bare SQL of one node transition issued directly through psycopg (lock the node, update it,
insert its event, update the request; one transaction each) and prints the ratios.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/qtg python bench/throughput.py -n 300
"""

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qtg.settings")
# The benchmark drives the sandbox venues: the embedded profile, named (the settings never guess).
os.environ.setdefault("QTG_PROFILE", "embedded")
# Chains mine (almost) instantly and nothing waits between polls: we measure the services.
os.environ.setdefault("QTG_SANDBOX_TIME_SCALE", "0.0001")
os.environ.setdefault("QTG_OBSERVE_POLL_SECONDS", "0")
os.environ.setdefault("QTG_RETRY_BASE_SECONDS", "0")
os.environ["QTG_SANDBOX_ENABLED"] = "1"
# Production-like: no DEBUG query log (it costs more per query than the query itself here).
os.environ.setdefault("DJANGO_DEBUG", "0")

import django

django.setup()

import psycopg  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.db import connection  # noqa: E402

from movements.models import MovementEvent, MovementRequest, MovementRequestNode  # noqa: E402
from movements.services import execution, movement_approve, movement_create  # noqa: E402
from qtg.core.actors import Actor  # noqa: E402


class QueryCounter:
    def __init__(self) -> None:
        self.count = 0
        self.in_venue = 0

    def __call__(self, execute, sql, params, many, context):
        # A pipelined executemany sends many statements in one round trip; each counts here.
        statements = len(params) if many else 1
        self.count += statements
        if VENUE.depth > 0:
            self.in_venue += statements
        return execute(sql, params, many, context)


class VenueClock:
    """Wall time spent inside executor calls: the venue's share (in production, the network
    round trip to an exchange or a chain), which is not the service layer's."""

    METHODS = ("prepare", "sign", "submit", "observe", "recover")

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self.depth = 0

    def install(self) -> None:
        from movements.executors.registry import registry

        for name in registry.names():
            cls = type(registry.get(name))
            for method in self.METHODS:
                original = cls.__dict__.get(method)
                if original is not None and not hasattr(original, "_venue_clock"):
                    setattr(cls, method, self._timed(original))

    def _timed(self, fn):
        def timed(*args, **kwargs):
            self.depth += 1
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started
                self.calls += 1
                self.depth -= 1

        timed._venue_clock = True
        return timed


VENUE = VenueClock()


def setup_movements(n: int) -> list[MovementRequest]:
    from reservations.services import hardcap_ensure_demo_defaults

    hardcap_ensure_demo_defaults()
    creator = User.objects.create_user("bench-creator", password="x")
    approver = Actor.system("bench-approver")
    requests = []
    for i in range(n):
        request = movement_create(
            template="cex_to_cex",
            asset="USDC",
            amount="100.00",
            source="sandbox-exchange-a",
            destination="sandbox-exchange-b",
            idempotency_key=f"bench-{i}",
            actor=Actor.for_user(creator),
        )
        movement_approve(request=request, actor=approver)
        requests.append(request)
    return requests


def run_services(n: int) -> dict:
    counter = QueryCounter()
    events_before = MovementEvent.objects.filter(kind="transition").count()
    node_events_before = MovementEvent.objects.filter(kind="transition", node__isnull=False).count()
    owner = execution.worker_identity()
    VENUE.install()
    venue_before = VENUE.seconds
    started = time.perf_counter()
    with connection.execute_wrapper(counter):
        while MovementRequest.objects.exclude(request_state="COMPLETED").exists():
            execution.dispatch_ready_nodes(owner=owner, limit=10_000)
            execution.observe_submitted_nodes(owner=owner, limit=10_000)
            execution.recover_unknown_nodes(owner=owner, limit=10_000)
    elapsed = time.perf_counter() - started
    venue = VENUE.seconds - venue_before
    transitions = MovementEvent.objects.filter(kind="transition").count() - events_before
    node_transitions = (
        MovementEvent.objects.filter(kind="transition", node__isnull=False).count()
        - node_events_before
    )
    return {
        "elapsed": elapsed,
        "movements_per_s": n / elapsed,
        "transitions": transitions,
        "node_transitions": node_transitions,
        "node_transitions_per_s": node_transitions / elapsed,
        "all_transitions_per_s": transitions / elapsed,
        "queries": counter.count,
        "queries_per_node_transition": counter.count / node_transitions,
        "venue_seconds": venue,
        "venue_queries": counter.in_venue,
        "service_seconds": elapsed - venue,
        "service_node_transitions_per_s": node_transitions / (elapsed - venue),
        "service_queries_per_node_transition": (counter.count - counter.in_venue)
        / node_transitions,
    }


BARE_SQL = [
    "SELECT id, node_state FROM movements_movementrequestnode WHERE id = %s FOR UPDATE",
    "UPDATE movements_movementrequestnode SET node_state = %s, state_changed_at = now(), "
    "updated_at = now() WHERE id = %s",
    "INSERT INTO movements_movementevent (request_id, node_id, node_key, kind, old_state, "
    "new_state, actor_type, actor_id, detail, created_at, chain_hash) "
    "VALUES (%s, %s, %s, 'transition', %s, %s, 'system', 'bench', %s, now(), %s)",
    "UPDATE movements_movementrequest SET updated_at = now() WHERE id = %s",
]


def run_bare_sql(count: int) -> dict:
    """Time the bare SQL on 200 of the nodes, then put their states back as they were."""
    db = connection.settings_dict
    conninfo = psycopg.conninfo.make_conninfo(
        dbname=db["NAME"],
        user=db.get("USER") or None,
        password=db.get("PASSWORD") or None,
        host=db.get("HOST") or None,
        port=db.get("PORT") or None,
    )
    nodes = list(
        MovementRequestNode.objects.order_by("id").values_list(
            "id", "request_id", "node_key", "node_state"
        )[:200]
    )
    states = ("OBSERVING", "COMPLETED")
    with psycopg.connect(conninfo) as conn:
        started = time.perf_counter()
        for i in range(count):
            node_id, request_id, node_key, _ = nodes[i % len(nodes)]
            old, new = states[i % 2], states[(i + 1) % 2]
            with conn.transaction():
                conn.execute(BARE_SQL[0], (node_id,))
                conn.execute(BARE_SQL[1], (new, node_id))
                conn.execute(
                    BARE_SQL[2],
                    # The audit chain's hash (movements/audit.py), as the services write it.
                    (
                        request_id,
                        node_id,
                        node_key,
                        old,
                        new,
                        json.dumps({"bench": True}),
                        hashlib.sha256(f"{i}".encode()).hexdigest(),
                    ),
                )
                conn.execute(BARE_SQL[3], (request_id,))
        elapsed = time.perf_counter() - started
        with conn.transaction():
            for node_id, _, _, state in nodes:
                conn.execute(
                    "UPDATE movements_movementrequestnode SET node_state = %s WHERE id = %s",
                    (state, node_id),
                )
    return {"count": count, "elapsed": elapsed, "transitions_per_s": count / elapsed}


def profile(n: int) -> None:
    import cProfile
    import pstats

    setup_movements(n)
    cProfile.runctx(
        "run_services(n)", globals(), {"n": n, "run_services": run_services}, "/tmp/qtg-bench.prof"
    )
    pstats.Stats("/tmp/qtg-bench.prof").sort_stats(
        os.environ.get("QTG_BENCH_PROFILE_SORT", "cumulative")
    ).print_stats(int(os.environ.get("QTG_BENCH_PROFILE_LINES", "45")))


def _reset_for_cycle() -> None:
    """After the bare-SQL run (which wrote states without the tables), give the sample nodes a
    state on the READY <-> PREPARING cycle. Scratch data only."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE movements_movementrequestnode SET node_state = 'READY' "
            "WHERE node_key = 'withdraw'"
        )


def run_service_transition(count: int) -> dict:
    """The same single transition as the bare SQL, one transaction each, through the services
    an operator's action uses (no batching): lock the node with its request,
    ``set_node_state`` (guarded update + audit event), touch the request (``save_fields``).
    READY <-> PREPARING is the one legal cycle of the node table."""
    from django.db import transaction

    from movements.services import save_fields, set_node_state

    actor = Actor.system("bench")
    ids = list(
        MovementRequestNode.objects.filter(node_key="withdraw").values_list("id", flat=True)[:200]
    )
    started = time.perf_counter()
    for i in range(count):
        with transaction.atomic():
            node = (
                MovementRequestNode.objects.select_related("request")
                .select_for_update(of=("self", "request"))
                .get(pk=ids[i % len(ids)])
            )
            target = "PREPARING" if node.node_state == "READY" else "READY"
            set_node_state(node=node, new_state=target, actor=actor, detail={"bench": True})
            save_fields(node.request, [])
    elapsed = time.perf_counter() - started
    return {"count": count, "elapsed": elapsed, "transitions_per_s": count / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--movements", type=int, default=300)
    parser.add_argument("--bare", type=int, default=3000, help="bare-SQL transitions to time")
    parser.add_argument("--profile", action="store_true", help="cProfile the services instead")
    args = parser.parse_args()
    if not settings.DB_IS_POSTGRES:
        sys.exit("the benchmark runs on PostgreSQL: set DATABASE_URL")
    real_name = connection.settings_dict["NAME"]
    # Its own scratch database: never the one a concurrent test run is using.
    connection.settings_dict.setdefault("TEST", {})["NAME"] = f"{real_name}_bench"
    args.database = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        t0 = time.perf_counter()
        if args.profile:
            profile(args.movements)
            return
        setup_movements(args.movements)
        setup_elapsed = time.perf_counter() - t0
        # A fresh database has no planner statistics (autovacuum would gather them within a
        # minute in a running system): without them the claim query plans a nested loop.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        # The bare SQL is timed before and after the lane and the faster run is used, so
        # noise on this machine can only make the ratio look worse, never better.
        bare_before = run_bare_sql(args.bare)
        services = run_services(args.movements)
        assert not MovementRequest.objects.exclude(request_state="COMPLETED").exists()
        bare_after = run_bare_sql(args.bare)
        bare = max(bare_before, bare_after, key=lambda run: run["transitions_per_s"])
        _reset_for_cycle()
        single = run_service_transition(args.bare)
    finally:
        connection.creation.destroy_test_db(real_name, verbosity=0)
    report(args, setup_elapsed, services, bare, single)


def report(args, setup_elapsed: float, services: dict, bare: dict, single: dict) -> None:
    bare_rate = bare["transitions_per_s"]
    lane_ratio = services["node_transitions_per_s"] / bare_rate
    service_ratio = services["service_node_transitions_per_s"] / bare_rate
    print(f"database            {args.database} (PostgreSQL, scratch, dropped afterwards)")
    print(f"movements           {args.movements} through cex_to_cex (3 nodes) with the sandbox")
    print(f"setup               {setup_elapsed:.2f} s to create and approve (not in the rates)")
    print(
        f"execution           {services['elapsed']:.2f} s, one worker, in-process services, "
        f"claim batch {settings.QTG_CLAIM_BATCH}"
    )
    print(
        f"  in the venue      {services['venue_seconds']:.2f} s inside {VENUE.calls} sandbox "
        f"executor calls ({services['venue_queries']} of the statements)"
    )
    print(f"  service layer     {services['service_seconds']:.2f} s (the rest)")
    print(f"movements/s         {services['movements_per_s']:.1f}")
    print(
        f"node transitions/s  {services['node_transitions_per_s']:.1f} end to end "
        f"({services['node_transitions']} node transitions; "
        f"{services['all_transitions_per_s']:.1f}/s counting request transitions too)"
    )
    print(
        f"                    {services['service_node_transitions_per_s']:.1f} in the service "
        f"layer's own time (execution minus the time inside venue calls)"
    )
    print(
        f"queries/transition  {services['queries_per_node_transition']:.2f} "
        f"({services['queries']} statements, incl. sandbox venue and observation polls); "
        f"{services['service_queries_per_node_transition']:.2f} are the service layer's"
    )
    print(
        f"bare SQL            {bare_rate:.1f} transitions/s "
        f"({bare['count']} x lock node, update node, insert event, update request; psycopg; "
        f"the faster of a run before and one after the lane)"
    )
    print(
        f"ratio               {lane_ratio:.2f} end to end; {service_ratio:.2f} service layer "
        f"(target >= 0.5)"
    )
    print(
        f"one at a time       {single['transitions_per_s']:.1f} transitions/s, ratio "
        f"{single['transitions_per_s'] / bare_rate:.2f} (the bare SQL's work as an operator's "
        f"action does it: one transaction per transition, ORM lock, no batching)"
    )


if __name__ == "__main__":
    main()
