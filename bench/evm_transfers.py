"""EVM transfers per second through real worker processes on an anvil devchain mining a block
every ``--block-time`` seconds (not a test).

Starts anvil with interval mining, deploys a 6-decimal test USDC, mints it to ``--senders``
dev accounts (1..N) and writes a chains config naming them (finality: ``--confirmations``
with the ``finalized`` tag ``--confirmations`` blocks behind the head). Then, ``--repeat``
times, on a scratch PostgreSQL database (``<name>_bench`` next to DATABASE_URL's):

- ``-n`` ``evm_transfer`` movements, round-robin over the senders, each to an address of its
  own, are created and approved (not timed);
- ``--workers`` Celery workers are started with the Procfile's worker line and beat on a fresh
  queue of a real broker (``bench.throughput.Deployment``; ``QTG_BENCH_BROKER_URL``), and run
  until every movement has COMPLETED;
- from the first node transition a worker wrote: transfers/s to BROADCAST (the last transfer's
  first broadcast) and to FINALIZED (its transaction FINALIZED by the chain's policy), and per
  transfer the latency from its node's claim (READY -> PREPARING) to each;
- the checks: every sender's nonces used without a gap (the chain's count at the head is the
  nonce cursor's next nonce, nothing of the sender left in the mempool, each nonce below it
  held by exactly one FINALIZED transaction of ours) and every balance exact (each recipient
  got what it was sent, each sender lost exactly what it sent). A failed check prints no
  figure (exit non-zero).

With ``--reference-in-flight K`` each repeat also runs the same load with
``QTG_EVM_MAX_IN_FLIGHT=K`` (K=1: a sender's next nonce waits for the previous one's block),
interleaved, so machine noise falls on both alike. Figures are min / median / max over the
repeats, with the targets beside them (issue 34: 4 senders, 2 workers, 1 s blocks).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/qtg_evm \\
        python bench/evm_transfers.py -n 400 --senders 4 --workers 2 --repeat 3
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "qtg.settings")
os.environ.setdefault("QTG_PROFILE", "embedded")
os.environ.setdefault("QTG_OBSERVE_POLL_SECONDS", "0")
os.environ.setdefault("QTG_RETRY_BASE_SECONDS", "0")
os.environ.setdefault("DJANGO_DEBUG", "0")
os.environ.setdefault("QTG_LOG_LEVEL", "WARNING")
os.environ.setdefault("QTG_CLIENT_MAX_PENDING_COUNT", "1000000")
os.environ["QTG_VENUES"] = "local"
_scratch = Path(tempfile.mkdtemp(prefix="qtg-evm-bench-"))

import django  # noqa: E402

import standins  # noqa: E402, F401  (web3 under the recursion limit; before django)

django.setup()

import yaml  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.models import Min  # noqa: E402

# The worker processes, their broker and the spread/percentile helpers: the throughput
# benchmark's (one way of starting a deployment for every benchmark).
from bench.throughput import (  # noqa: E402
    BenchCheckFailed,
    Deployment,
    QueryCounter,
    bench_users,
    percentile,
    spread,
    verdict,
)
from movements.models import MovementEvent, MovementRequest  # noqa: E402
from movements.services import movement_approve, movement_create  # noqa: E402
from qtg.core.actors import Actor  # noqa: E402
from qtg.core.venues import provide_venues  # noqa: E402
from standins.anvil import Anvil  # noqa: E402
from standins.contracts import deploy_test_token, transact  # noqa: E402
from venues.models import ChainTransaction, NonceCursor, TxPurpose  # noqa: E402

RPC_ENV = "QTG_BENCH_RPC_URL"
AMOUNT = Decimal("1.5")
UNITS = 1_500_000  # AMOUNT in USDC's 6 decimals

# Issue 34's targets: 4 senders, 2 workers, 1 s blocks, on this 2-core machine.
BROADCAST_TARGET = 100.0  # transfers/s to BROADCAST
FINALIZED_TARGET = 50.0  # transfers/s to FINALIZED


class Chain:
    """The devchain, its token and the senders, for the whole sitting."""

    def __init__(self, anvil: Anvil, senders: int, confirmations: int, block_time: float):
        if not 1 <= senders <= len(anvil.accounts) - 1:
            raise BenchCheckFailed(f"--senders is 1..{len(anvil.accounts) - 1}")
        self.anvil = anvil
        owner = anvil.accounts[0]
        self.accounts = anvil.accounts[1 : senders + 1]
        self.usdc = deploy_test_token(anvil.web3, owner, decimals=6, symbol="USDC")
        for account in self.accounts:
            transact(anvil.web3, owner, self.usdc.functions.mint(account.address, 10**18))
        self.names = [f"sender{i}" for i in range(senders)]
        accounts = {}
        for name, account in zip(self.names, self.accounts, strict=True):
            env = f"QTG_BENCH_KEY_{name.upper()}"
            os.environ[env] = account.signer.key.hex()
            accounts[name] = {"address": account.address, "key": {"env": env}}
        entry = {
            "kind": "evm",
            "chain_id": anvil.chain_id,
            "rpc_url_env": RPC_ENV,
            "confirmations": confirmations,
            "block_seconds": max(1, round(block_time)),
            "replace_after_seconds": 600,
            "max_fee_gwei": 100,
            "tokens": {"USDC": {"address": self.usdc.address, "decimals": 6}},
            "accounts": accounts,
        }
        path = _scratch / "chains.yaml"
        path.write_text(yaml.safe_dump({"version": 1, "chains": {"devchain": entry}}))
        os.environ[RPC_ENV] = anvil.url
        # The worker processes read the same file (their environment is this one's).
        os.environ["QTG_CHAINS_CONFIG"] = str(path)
        settings.QTG_CHAINS_CONFIG = str(path)
        provide_venues(self.names)

    def balance(self, address: str) -> int:
        return int(self.usdc.functions.balanceOf(address).call())


def create(chain: Chain, n: int, run: int) -> list[MovementRequest]:
    from reservations.services import hardcap_ensure

    creator, approver = bench_users()
    hardcap_ensure(asset="USDC", max_in_flight="1000000000000", note="bench")
    requests = []
    for i in range(n):
        request = movement_create(
            template="evm_transfer",
            asset="USDC",
            amount=str(AMOUNT),
            source=chain.names[i % len(chain.names)],
            destination=f"0x{run + 1:04x}{i + 1:036x}",
            params={"chain": "devchain"},
            idempotency_key=f"bench-evm-{run}-{i}",
            actor=Actor.for_user(creator),
        )
        requests.append(movement_approve(request=request, actor=approver))
    return requests


def check(chain: Chain, requests: list[MovementRequest], before: dict[str, int]) -> None:
    """No nonce gap left and every balance exact, or ``BenchCheckFailed``."""
    w3 = chain.anvil.web3
    sent: Counter[str] = Counter()
    for request in requests:
        sent[chain.accounts[chain.names.index(request.source)].address] += 1
    for account in chain.accounts:
        address = account.address
        mined = w3.eth.get_transaction_count(address, "latest")
        pending = w3.eth.get_transaction_count(address, "pending")
        cursor = NonceCursor.objects.get(chain="devchain", sender=address)
        if not mined == pending == cursor.next_nonce:
            raise BenchCheckFailed(
                f"{address}: mined {mined}, pending {pending}, cursor {cursor.next_nonce}"
            )
        finals = Counter(
            ChainTransaction.objects.filter(
                chain="devchain", sender=address, state="FINALIZED"
            ).values_list("nonce", flat=True)
        )
        held = [nonce for nonce in range(mined) if finals[nonce] != 1]
        if held:
            raise BenchCheckFailed(f"{address}: nonces not held by one final transaction: {held}")
        lost = before[address] - chain.balance(address)
        if lost != sent[address] * UNITS:
            raise BenchCheckFailed(f"{address} lost {lost}, sent {sent[address] * UNITS}")
    for request in requests:
        got = chain.balance(w3.to_checksum_address(request.destination))
        if got != UNITS:
            raise BenchCheckFailed(f"{request.destination} holds {got}, was sent {UNITS}")


def figures(requests: list[MovementRequest]) -> dict:
    ids = [r.pk for r in requests]
    start = MovementEvent.objects.filter(
        request_id__in=ids, kind="transition", node__isnull=False, actor_id__startswith="worker:"
    ).aggregate(first=Min("created_at"))["first"]
    claimed = dict(
        MovementEvent.objects.filter(
            request_id__in=ids, kind="transition", node_key="transfer", new_state="PREPARING"
        )
        .values("request_id")
        .annotate(at=Min("created_at"))
        .values_list("request_id", "at")
    )
    broadcast: dict = {}
    finalized: dict = {}
    for movement, purpose, state, b_at, f_at in ChainTransaction.objects.filter(
        movement_id__in=ids
    ).values_list("movement_id", "purpose", "state", "broadcast_at", "finalized_at"):
        if purpose != TxPurpose.NODE:
            continue
        if b_at is not None:
            broadcast[movement] = min(b_at, broadcast.get(movement, b_at))
        if state == "FINALIZED":
            finalized[movement] = f_at
    if len(broadcast) != len(ids) or len(finalized) != len(ids):
        raise BenchCheckFailed(
            f"{len(broadcast)} broadcast and {len(finalized)} finalized of {len(ids)} transfers"
        )
    n = len(ids)

    def rate(stamps: dict) -> float:
        return n / (max(stamps.values()) - start).total_seconds()

    def latency(stamps: dict) -> list[float]:
        return [(stamps[m] - claimed[m]).total_seconds() * 1000 for m in ids]

    return {
        "broadcast": rate(broadcast),
        "finalized": rate(finalized),
        "lat_broadcast": latency(broadcast),
        "lat_finalized": latency(finalized),
        "phases": phases(ids, start),
    }


def phases(ids: list[int], start) -> dict[str, float]:
    """Where a transfer's time goes (median ms of each step, from the audit events)."""
    steps = defaultdict(list)
    at: dict = defaultdict(dict)
    for request_id, new_state, created in MovementEvent.objects.filter(
        request_id__in=ids, kind="transition", node_key="transfer"
    ).values_list("request_id", "new_state", "created_at"):
        at[request_id].setdefault(new_state, created)
    for tx in ChainTransaction.objects.filter(movement_id__in=ids, purpose=TxPurpose.NODE):
        a = at[tx.movement_id]
        pairs = {
            "workers' first step -> claimed": (start, a.get("PREPARING")),
            "claimed -> signed": (a.get("PREPARING"), tx.signed_at),
            "signed -> broadcast": (tx.signed_at, tx.broadcast_at),
            "broadcast -> confirmed (seen mined)": (tx.broadcast_at, tx.confirmed_at),
            "confirmed -> finalized": (tx.confirmed_at, tx.finalized_at),
        }
        for name, (begin, end) in pairs.items():
            if begin is not None and end is not None:
                steps[name].append((end - begin).total_seconds() * 1000)
    return {name: statistics.median(values) for name, values in steps.items()}


def venue_statements(statements: QueryCounter) -> dict:
    """SQL statements, calls and seconds inside each EVM executor method (the venue code's
    own share), counted by wrapping the methods where they are defined."""
    from venues.evm.executors import ChainTxObserve
    from venues.evm.tx import ChainAction

    found: dict = defaultdict(lambda: [0, 0, 0.0])

    def wrap(cls, method, fn):
        def counted(*args, **kwargs):
            before, began = statements.count, time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                entry = found[(cls.__name__, method)]
                entry[0] += statements.count - before
                entry[1] += 1
                entry[2] += time.perf_counter() - began

        return counted

    for cls in (ChainAction, ChainTxObserve):
        for method in ("prepare", "sign", "submit", "observe", "recover"):
            if method in cls.__dict__:
                setattr(cls, method, wrap(cls, method, cls.__dict__[method]))
    return found


def profile(chain: Chain, args) -> None:
    """One worker's services in-process under cProfile (the sweeps as beat sends them, one
    pass after another), with every JSON-RPC call counted and timed by method."""
    import cProfile
    import pstats

    from web3.providers.rpc import HTTPProvider

    from movements.services import execution

    calls: Counter[str] = Counter()
    spent: Counter[str] = Counter()
    # Counted where a request leaves the process (after web3's own cache): one HTTP round
    # trip per single call, one per batch (its calls counted by method as well).
    real_single, real_batch = HTTPProvider._make_request, HTTPProvider.make_batch_request
    trips = Counter()

    def single(self, method, request_data):
        began = time.perf_counter()
        try:
            return real_single(self, method, request_data)
        finally:
            calls[method] += 1
            trips["single"] += 1
            spent[method] += time.perf_counter() - began

    def batch(self, batch_requests):
        began = time.perf_counter()
        try:
            return real_batch(self, batch_requests)
        finally:
            trips["batch"] += 1
            for method, _ in batch_requests:
                calls[method] += 1
            spent["(batch)"] += time.perf_counter() - began

    HTTPProvider._make_request, HTTPProvider.make_batch_request = single, batch
    settings.QTG_EVM_MAX_IN_FLIGHT = args.in_flight
    settings.QTG_OBSERVE_POLL_SECONDS = 0
    settings.QTG_RETRY_BASE_SECONDS = 0
    requests = create(chain, args.transfers, 10_000)
    ids = [r.pk for r in requests]
    owner = execution.worker_identity()
    statements = QueryCounter()
    in_venue = venue_statements(statements)
    profiler = cProfile.Profile()
    began = time.perf_counter()
    profiler.enable()
    with connection.execute_wrapper(statements):
        while (
            MovementRequest.objects.filter(pk__in=ids).exclude(request_state="COMPLETED").exists()
        ):
            execution.reap_expired_leases()
            execution.dispatch_ready_nodes(owner=owner, limit=settings.QTG_DISPATCH_BATCH)
            execution.observe_submitted_nodes(owner=owner, limit=settings.QTG_DISPATCH_BATCH)
            execution.recover_unknown_nodes(owner=owner, limit=settings.QTG_DISPATCH_BATCH)
            if time.perf_counter() - began > args.timeout:
                raise BenchCheckFailed("the profiled run did not finish")
    profiler.disable()
    wall = time.perf_counter() - began
    HTTPProvider._make_request, HTTPProvider.make_batch_request = real_single, real_batch
    n = len(ids)
    print(f"profile: {n} transfers, one worker in-process, {wall:.1f} s, {n / wall:.1f}/s")
    print(
        f"JSON-RPC: {sum(calls.values())} calls ({sum(calls.values()) / n:.1f} per transfer) "
        f"in {sum(trips.values())} round trips ({sum(trips.values()) / n:.1f} per transfer, "
        f"{trips['batch']} of them batches), {sum(spent.values()):.1f} s"
    )
    for method, count in calls.most_common():
        print(f"  {method:<32} {count:6d} calls {count / n:6.1f}/transfer {spent[method]:6.2f} s")
    print(f"SQL: {statements.count} statements ({statements.count / n:.1f} per transfer)")
    for (executor, method), (count, calls, seconds) in sorted(in_venue.items()):
        print(
            f"  in {executor}.{method:<10} {count / n:6.1f}/transfer "
            f"({calls} calls, {seconds * 1000 / max(1, calls):.1f} ms each)"
        )
    start = MovementEvent.objects.filter(
        request_id__in=ids, kind="transition", node__isnull=False
    ).aggregate(first=Min("created_at"))["first"]
    steps = phases(ids, start)
    print("where a transfer's time goes (median ms per step):")
    for name, value in steps.items():
        print(f"  {name:<38} {value:8.0f}")
    stats = pstats.Stats(profiler).sort_stats("cumulative")
    if args.profile_out:
        stats.dump_stats(args.profile_out)
    stats.print_stats(r"venues/|movements/services", 60)
    stats.sort_stats("tottime").print_stats(25)


def one_run(chain: Chain, args, run: int, in_flight: int) -> dict:
    requests = create(chain, args.transfers, run)
    before = {account.address: chain.balance(account.address) for account in chain.accounts}
    os.environ["QTG_EVM_MAX_IN_FLIGHT"] = str(in_flight)
    deployment = Deployment(args.workers)
    try:
        deployment.wait_done(requests, timeout=args.timeout)
    finally:
        deployment.stop()
    # Final by the policy: the chain mines on; the checks read it once every block is in.
    time.sleep(2 * args.block_time)
    for request in requests:
        request.refresh_from_db()
    check(chain, requests, before)
    found = figures(requests)
    found["busy"] = deployment.busy
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--transfers", type=int, default=400, help="per run")
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--block-time", type=float, default=1.0, help="anvil --block-time")
    parser.add_argument("--confirmations", type=int, default=2)
    parser.add_argument("--in-flight", type=int, default=settings.QTG_EVM_MAX_IN_FLIGHT)
    parser.add_argument("--reference-in-flight", type=int, help="interleave runs with this bound")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--profile", action="store_true", help="one worker in-process, profiled")
    parser.add_argument("--profile-out", help="with --profile: also write the pstats file here")
    args = parser.parse_args()
    if not settings.DB_IS_POSTGRES:
        raise BenchCheckFailed("the worker processes need PostgreSQL: set DATABASE_URL")
    real_name = connection.settings_dict["NAME"]
    connection.settings_dict.setdefault("TEST", {})["NAME"] = f"{real_name}_bench"
    database = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    bounds = [args.in_flight] + (
        [args.reference_in_flight] if args.reference_in_flight is not None else []
    )
    rows: dict[int, list[dict]] = {bound: [] for bound in bounds}
    try:
        lag = max(2, args.confirmations + args.confirmations % 2)
        with Anvil(chain_id=31337, finalized_lag=lag, block_time=args.block_time) as anvil:
            chain = Chain(anvil, args.senders, args.confirmations, args.block_time)
            if args.profile:
                profile(chain, args)
                return
            run = 0
            for _ in range(args.repeat):
                for bound in bounds:
                    rows[bound].append(one_run(chain, args, run, bound))
                    run += 1
    finally:
        connection.creation.destroy_test_db(real_name, verbosity=0)
    print(f"database        {database} (PostgreSQL, scratch, dropped afterwards)")
    print(
        f"per run         {args.transfers} evm_transfer (ERC-20, 6 decimals), "
        f"{args.senders} senders round-robin, each to an address of its own"
    )
    print(
        f"chain           anvil --block-time {args.block_time:g}; final at {args.confirmations} "
        f"confirmations and the finalized tag ({lag} behind the head)"
    )
    print(
        f"workers         {args.workers} Celery worker processes (Procfile worker line, solo "
        f"pool) + beat on a real broker; figures from the first node transition they wrote"
    )
    print(f"repeats         {args.repeat}, interleaved; figures are min / median / max")
    print("checks          every sender: no nonce gap, mempool empty; every balance exact: passed")
    print(f"load average    {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for bound in bounds:
        found = rows[bound]
        main_run = bound == args.in_flight
        label = f"in flight <= {bound} per sender"
        print(f"\n{label}{'' if main_run else ' (reference)'}")
        b = [r["broadcast"] for r in found]
        f = [r["finalized"] for r in found]
        b_target = f"target >= {BROADCAST_TARGET:.0f}: {verdict(statistics.median(b) >= 100)}"
        f_target = f"target >= {FINALIZED_TARGET:.0f}: {verdict(statistics.median(f) >= 50)}"
        print(f"  to BROADCAST   {spread(b)} transfers/s   ({b_target})")
        print(f"  to FINALIZED   {spread(f)} transfers/s   ({f_target})")
        for key, name in (("lat_broadcast", "BROADCAST"), ("lat_finalized", "FINALIZED")):
            p50 = [percentile(r[key], 0.5) for r in found]
            p99 = [percentile(r[key], 0.99) for r in found]
            p50_text, p99_text = spread(p50, "{:.0f}"), spread(p99, "{:.0f}")
            print(f"  claim -> {name:<9} p50 {p50_text} ms, p99 {p99_text} ms")
        busy = [sum(r["busy"]) / len(r["busy"]) for r in found]
        print(f"  worker CPU     {spread([x * 100 for x in busy], '{:.0f}')} % busy per worker")
        print("  where a transfer's time goes (median ms per step, median over the runs):")
        names = list(found[0]["phases"])
        for name in names:
            values = [r["phases"][name] for r in found if name in r["phases"]]
            print(f"    {name:<38} {statistics.median(values):8.0f}")


if __name__ == "__main__":
    main()
