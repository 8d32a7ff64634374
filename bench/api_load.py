"""The REST API under load: N concurrent clients creating movements (not a test).

Starts the production web server as it is deployed (the Procfile's ``web`` command: gunicorn,
``QTG_PROFILE=smoke``: production with the sandbox's templates allowed, DEBUG off, a long secret
key; plain HTTP on the loopback, as the production smoke test starts it) against a scratch
PostgreSQL database, gives every client its own user and hashed API token, and has N clients
post movements as fast as they are answered (closed loop). A share of the posts replays an
earlier Idempotency-Key with the same body (the original is answered, 200, nothing created).

For each scenario (one asset: every create queues on the same hardcap row; across assets:
the demo's four assets) it prints creates/s, p50 / p99 of a create, replays, and errors, then
counts the movements in the database: every 201 must be one PENDING_APPROVAL movement, every
replay none. Anything else is an error and the script exits non-zero.

Several server configurations (``--worker-class sync,gthread``, ``--web-workers 2,4``: gunicorn's
worker class and process count, ``--threads`` per gthread process) are each started in turn,
``--repeat`` times, interleaved (configuration after configuration, then again), so machine
noise falls on each alike; the summary gives each figure as min / median / max over the
repeats with its target, the machine's load average around each run, and the statements one
create sends through the API (counted in a process of its own before the runs).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/qtg_perf python bench/api_load.py
    ... --clients 1,20 --per-client 40 --replays 0.2 --web-workers 2,4 \
        --worker-class sync,gthread --repeat 3
"""

import argparse
import asyncio
import itertools
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The demo's hardcapped assets (reservations fail closed) and an amount each cap takes often.
ASSETS = {"USDC": "1.00", "USDT": "1.00", "ETH": "0.001", "BTC": "0.0001"}
SOURCE, DESTINATION, NETWORK = "sandbox-exchange-a", "sandbox-exchange-b", "ethereum"
# Issue 34's targets with 20 concurrent clients across assets (this 2-core machine).
CREATE_P99_TARGET_MS = 250
CREATES_PER_S_TARGET = 100
TARGET_CLIENTS = 20


class BenchCheckFailed(SystemExit):
    """What the benchmark measured is not what it claims (exits non-zero)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"api_load: {message}")


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile (``share`` in 0..1) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * share // 1))
    return ordered[int(rank) - 1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scratch_url(database_url: str) -> str:
    parts = urlsplit(database_url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "_api"))


def recreate_database(database_url: str) -> None:
    import psycopg

    parts = urlsplit(database_url)
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(database_url: str) -> None:
    import psycopg

    parts = urlsplit(database_url)
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{parts.path.lstrip("/")}" WITH (FORCE)')


def production_env(database_url: str, var_dir: Path, **extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "CELERY_BROKER_URL", "PROMETHEUS_MULTIPROC_DIR"}
        and not key.startswith("QTG_")
        and not key.startswith("DJANGO_")
    }
    env.update(
        QTG_PROFILE="smoke",
        DATABASE_URL=database_url,
        # Nothing is executed here; the broker is only named (no worker runs).
        CELERY_BROKER_URL=os.environ.get("QTG_BENCH_BROKER_URL", "redis://127.0.0.1:6379/12"),
        DJANGO_SECRET_KEY="bench-" + uuid.uuid4().hex + uuid.uuid4().hex,
        # The audit chain's key (production refuses to start without one): the run's own.
        QTG_AUDIT_KEY=uuid.uuid4().hex + uuid.uuid4().hex,
        QTG_AUDIT_KEY_ID="bench",
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
        DJANGO_SECURE_SSL_REDIRECT="0",
        QTG_VAR_DIR=str(var_dir),
        QTG_SANDBOX_ENABLED="1",
        QTG_METRICS_OPEN="1",
        # ... and its venues serve the templates (production's default is the real ones).
        QTG_VENUES="off",
        QTG_ADDRESS_COOLDOWN_SECONDS="0",
        # Each client is one integrator creating far more than it would leave waiting for
        # approval, far faster than the default per-client rate: lift those two limits only.
        QTG_CLIENT_MAX_PENDING_COUNT="1000000",
        QTG_API_THROTTLE_USER="1000000/min",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def setup_data(clients: int, profile: int = 0) -> None:
    """In the production profile (a child process): hardcaps, the address book for every
    asset, one user and token per client. Prints the tokens as JSON (or, with ``profile``,
    profiles that many creates instead)."""
    import django

    django.setup()
    from django.contrib.auth.models import User

    from access.services import api_token_mint
    from movements.models import AddressBookEntry, EntryStatus
    from movements.services.address_book import address_approve, address_propose
    from qtg.core.actors import Actor
    from reservations.services import hardcap_ensure_demo_defaults

    hardcap_ensure_demo_defaults()
    proposer = User.objects.create_superuser("bench-proposer", "p@qtg.invalid", None)
    second = User.objects.create_superuser("bench-second", "s@qtg.invalid", None)
    for asset in ASSETS:
        if not AddressBookEntry.objects.filter(
            asset=asset, network=NETWORK, address=DESTINATION, status=EntryStatus.ACTIVE
        ).exists():
            address_approve(
                entry=address_propose(
                    actor=Actor.for_user(proposer),
                    asset=asset,
                    network=NETWORK,
                    address=DESTINATION,
                    label=f"bench {asset}",
                ),
                actor=Actor.for_user(second),
            )
    tokens = []
    for i in range(clients):
        user = User.objects.create_user(f"bench-client-{i}")
        tokens.append(api_token_mint(user=user, actor_label="bench/api_load.py").key)
    counter_user = User.objects.create_user("bench-counter")
    token = api_token_mint(user=counter_user, actor_label="bench/api_load.py").key
    if profile:
        profile_creates(token, profile)
        return
    print(json.dumps({"tokens": tokens, "statements": statements_per_create(token)}))


def post_create(client, key: str, asset: str = "USDC") -> None:
    """One create through the whole API (Django's test client: no HTTP server)."""
    response = client.post(
        "/api/v1/movements/",
        data=json.dumps(
            {
                "template": "cex_to_cex",
                "asset": asset,
                "amount": ASSETS[asset],
                "source": SOURCE,
                "destination": DESTINATION,
            }
        ),
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY=key,
    )
    if response.status_code != 201:
        raise BenchCheckFailed(f"a create: {response.status_code} {response.content[:2000]}")


def statements_per_create(token: str) -> int:
    """The statements one create sends through the whole API (authentication, the service,
    the answer), each parameter set of a pipelined ``executemany`` counted; the second of
    two creates (the first warms the process's caches)."""
    from django.db import connection
    from django.test import Client

    client = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Token {token}")
    count = 0

    def counted(execute, sql, params, many, context):
        nonlocal count
        count += len(params) if many else 1
        return execute(sql, params, many, context)

    for i in range(2):
        count = 0
        with connection.execute_wrapper(counted):
            post_create(client, f"bench-count-{i}")
    return count


def profile_creates(token: str, n: int) -> None:
    """cProfile ``n`` creates across the assets through the whole API in this process (after
    a warm-up): CPU per create and the top of the profile, written to /tmp/qtg-create.prof."""
    import cProfile
    import pstats

    from django.test import Client

    client = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Token {token}")
    assets = itertools.cycle(ASSETS)
    for i in range(20):
        post_create(client, f"bench-warm-{i}", next(assets))
    profiler = cProfile.Profile()
    started = time.process_time()
    profiler.enable()
    for i in range(n):
        post_create(client, f"bench-profiled-{i}", next(assets))
    profiler.disable()
    cpu = time.process_time() - started
    profiler.dump_stats("/tmp/qtg-create.prof")
    print(f"{n} creates profiled (/tmp/qtg-create.prof): {1000 * cpu / n:.1f} ms CPU per create")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(60)


def analyze(database_url: str) -> None:
    """Planner statistics, as autovacuum gathers them in a running system (a fresh database
    has none, and the hold's queries would plan nested loops over the growing tables)."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("ANALYZE")


def count_movements(database_url: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT r.request_state, count(*) FROM movements_movementrequest r "
            "JOIN auth_user u ON u.id = r.created_by_id "
            "WHERE u.username LIKE 'bench-client-%%' GROUP BY r.request_state"
        ).fetchall()
    return dict(rows)


class Server:
    """The Procfile's ``web`` line, run by a shell as honcho would run it."""

    def __init__(
        self, env: dict[str, str], port: int, web_workers: int, worker_class: str, threads: int
    ) -> None:
        command = next(
            line.split(":", 1)[1].strip()
            for line in (ROOT / "Procfile").read_text().splitlines()
            if line.startswith("web:")
        )
        command = command.removeprefix("exec ")  # exec'd below, as honcho's shell would
        self.base = f"http://127.0.0.1:{port}"
        self.log = Path(env["QTG_VAR_DIR"]) / "web.log"
        env = {
            **env,
            "QTG_BIND": f"127.0.0.1:{port}",
            "WEB_CONCURRENCY": str(web_workers),
            "QTG_WEB_WORKER_CLASS": worker_class,
            "QTG_WEB_THREADS": str(threads if worker_class == "gthread" else 1),
        }
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                ["bash", "-c", f"exec {command}"],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.command = command

    def wait_ready(self, timeout: float = 60) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BenchCheckFailed(f"the web server exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.base + "/health/", timeout=5).status_code in (200, 503):
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise BenchCheckFailed(f"the web server did not answer: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


async def client_loop(
    client, token: str, index: int, assets: list[str], args, label: str, results: dict
) -> None:
    rng = random.Random(f"{label}-{index}")
    headers = {"Authorization": f"Token {token}"}
    sent: list[tuple[str, dict]] = []
    for n in range(args.per_client):
        replay = bool(sent) and rng.random() < args.replays
        if replay:
            key, body = rng.choice(sent)
        else:
            asset = assets[(index + n) % len(assets)]
            key = f"{label}-{index}-{n}"
            body = {
                "template": "cex_to_cex",
                "asset": asset,
                "amount": ASSETS[asset],
                "source": SOURCE,
                "destination": DESTINATION,
            }
        started = time.perf_counter()
        try:
            response = await client.post(
                "/api/v1/movements/", json=body, headers={**headers, "Idempotency-Key": key}
            )
            status, replayed = response.status_code, response.headers.get("Idempotency-Replayed")
        except Exception as exc:
            status, replayed = f"{type(exc).__name__}", None
            response = None
        elapsed = time.perf_counter() - started
        if replay and status == 200 and replayed == "true":
            results["replays"].append(elapsed)
        elif not replay and status == 201:
            results["creates"].append(elapsed)
            sent.append((key, body))
        else:
            text = response.text[:300] if response is not None else ""
            results["errors"].append(f"{'replay' if replay else 'create'} -> {status} {text}")


async def run_scenario(base: str, tokens: list[str], assets: list[str], args, label: str):
    import httpx

    results: dict[str, list] = {"creates": [], "replays": [], "errors": []}
    limits = httpx.Limits(max_connections=len(tokens), max_keepalive_connections=len(tokens))
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:
        started = time.perf_counter()
        await asyncio.gather(
            *(
                client_loop(client, token, i, assets, args, label, results)
                for i, token in enumerate(tokens)
            )
        )
        results["elapsed"] = time.perf_counter() - started
    return results


def report(
    label: str, clients: int, results: dict, before: dict, after: dict, figures: dict
) -> list[str]:
    creates, replays, errors = results["creates"], results["replays"], list(results["errors"])
    new_pending = after.get("PENDING_APPROVAL", 0) - before.get("PENDING_APPROVAL", 0)
    others = {s: n - before.get(s, 0) for s, n in after.items() if s != "PENDING_APPROVAL"}
    others = {s: n for s, n in others.items() if n}
    if new_pending != len(creates) or others:
        errors.append(
            f"database: {new_pending} new PENDING_APPROVAL movements for {len(creates)} creates "
            f"answered 201; other states {others or 'none'}"
        )
    line = f"{label:<14} {clients:>3} clients  "
    if creates:
        p50, p99 = percentile(creates, 0.5) * 1000, percentile(creates, 0.99) * 1000
        rate = len(creates) / results["elapsed"]
        figures.update(rate=rate, p50=p50, p99=p99)
        line += f"{rate:7.1f} creates/s  p50 {p50:6.1f} ms  p99 {p99:7.1f} ms"
    replay_p50 = f"p50 {percentile(replays, 0.5) * 1000:.1f} ms" if replays else "-"
    line += f"\n{'':<14} {len(creates)} created, {len(replays)} replays ({replay_p50}), "
    line += f"{len(errors)} errors (target 0: {'holds' if not errors else 'MISSES'})"
    figures["errors"] = len(errors)
    print(line, flush=True)
    for error in errors[:5]:
        print(f"{'':<14} error: {error}")
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1,20", help="comma-separated client counts")
    parser.add_argument("--per-client", type=int, default=40, help="posts per client")
    parser.add_argument("--replays", type=float, default=0.2, help="share of replayed posts")
    parser.add_argument(
        "--web-workers", default="2", help="comma-separated WEB_CONCURRENCY values to compare"
    )
    parser.add_argument(
        "--worker-class", default="sync", help="comma-separated gunicorn worker classes"
    )
    parser.add_argument("--threads", type=int, default=4, help="threads per gthread worker")
    parser.add_argument("--repeat", type=int, default=1, help="interleaved runs of each figure")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument(
        "--profile", type=int, default=0, help="cProfile this many creates in one process"
    )
    parser.add_argument("--setup-data", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.setup_data is not None:
        setup_data(args.setup_data, args.profile)
        return
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        raise BenchCheckFailed("the API load runs on PostgreSQL: set DATABASE_URL")
    counts = [int(n) for n in args.clients.split(",")]
    classes = args.worker_class.split(",")
    if not set(classes) <= {"sync", "gthread"}:
        raise BenchCheckFailed("--worker-class: sync and/or gthread")
    configs = list(itertools.product(classes, [int(n) for n in args.web_workers.split(",")]))
    database_url = scratch_url(os.environ["DATABASE_URL"])
    recreate_database(database_url)
    import tempfile

    var_dir = Path(tempfile.mkdtemp(prefix="qtg-api-load-"))
    env = production_env(database_url, var_dir)
    failures: list[str] = []
    figures: dict[tuple, list[dict]] = {}
    try:
        subprocess.run(
            [sys.executable, "manage.py", "qtg_prestart"],
            cwd=ROOT, env=env, check=True, capture_output=True, text=True,
        )  # fmt: skip
        made = subprocess.run(
            [sys.executable, __file__, "--setup-data", str(max(counts)),
             "--profile", str(args.profile)],
            cwd=ROOT, env={**env, "DJANGO_SETTINGS_MODULE": "qtg.settings"},
            capture_output=True, text=True,
        )  # fmt: skip
        if args.profile:
            print(made.stdout[-12000:], made.stderr[-3000:])
            return
        if made.returncode:
            raise BenchCheckFailed(f"setting up the data failed: {made.stderr[-3000:]}")
        setup = json.loads(made.stdout.strip().splitlines()[-1])
        tokens = setup["tokens"]
        print(
            f"load            closed loop, {args.per_client} posts per client, "
            f"{args.replays:.0%} of them replays of an earlier key (same body)"
        )
        print(
            f"statements      {setup['statements']} per create through the API "
            f"(authentication, the service, the answer)"
        )
        print(f"repeats         {args.repeat}, interleaved over {len(configs)} configurations")
        for r in range(args.repeat):
            for worker_class, web_workers in configs:
                print(f"\n[repeat {r + 1}] {describe(worker_class, web_workers, args.threads)}")
                print(f"load average    {load_average()} before")
                failures += run_config(
                    env, database_url, tokens, counts, args, worker_class, web_workers, figures
                )
                print(f"load average    {load_average()} after", flush=True)
    finally:
        if not args.keep:
            drop_database(database_url)
    summary(figures, configs, counts, args)
    if failures:
        raise BenchCheckFailed(f"{len(failures)} errors (see above)")


def describe(worker_class: str, web_workers: int, threads: int) -> str:
    per = f" x {threads} threads" if worker_class == "gthread" else ""
    return f"{web_workers} {worker_class} workers{per}"


def _process_cpu(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc; 0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_busy() -> float:
    """CPU seconds the whole machine has spent busy (not idle nor waiting on I/O) so far."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class CpuUse:
    """Where the CPU of a scenario went: the web server's processes (master and workers),
    this load generator, and the rest of the machine (the database, mostly), in seconds."""

    def __init__(self, server: "Server") -> None:
        self.server = server

    def _web(self) -> float:
        master = self.server.process.pid
        children = subprocess.run(
            ["pgrep", "-P", str(master)], capture_output=True, text=True
        ).stdout.split()
        return sum(_process_cpu(pid) for pid in [master, *map(int, children)])

    def __enter__(self) -> "CpuUse":
        self.started = (self._web(), time.process_time(), _machine_busy(), time.monotonic())
        return self

    def __exit__(self, *exc) -> None:
        web, client, machine, wall = self.started
        self.web = self._web() - web
        self.client = time.process_time() - client
        self.machine = _machine_busy() - machine
        self.wall = time.monotonic() - wall
        self.rest = max(0.0, self.machine - self.web - self.client)

    def line(self, creates: int) -> str:
        per = 1000 / max(1, creates)
        return (
            f"CPU per create {self.web * per:.1f} ms in the web server, {self.rest * per:.1f} ms "
            f"the database and the rest, {self.client * per:.1f} ms this load generator; the "
            f"machine {self.machine / self.wall / (os.cpu_count() or 1):.0%} busy "
            f"({os.cpu_count()} cores)"
        )


def load_average() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def run_config(env, database_url, tokens, counts, args, worker_class, web_workers, figures):
    server = Server(env, free_port(), web_workers, worker_class, args.threads)
    failures: list[str] = []
    try:
        server.wait_ready()
        print(f"web server      {server.command}")
        # One warm-up create per gunicorn worker: imports and connections are not measured.
        asyncio.run(
            run_scenario(server.base, tokens[:1], ["USDC"], warmup_args(args, web_workers), "warm")
        )
        for label, assets in (("one asset", ["USDC"]), ("across assets", list(ASSETS))):
            for clients in counts:
                before = count_movements(database_url)
                tag = f"{label.split()[0]}-{clients}-{uuid.uuid4().hex[:6]}"
                with CpuUse(server) as cpu:
                    results = asyncio.run(
                        run_scenario(server.base, tokens[:clients], assets, args, tag)
                    )
                measured: dict = {}
                failures += report(
                    label, clients, results, before, count_movements(database_url), measured
                )
                # Replays are answered too: their share of the CPU is counted with the creates.
                print(f"{'':<14} {cpu.line(len(results['creates']))}")
                key = (worker_class, web_workers, label, clients)
                figures.setdefault(key, []).append(measured)
                analyze(database_url)
    finally:
        server.stop()
    return failures


def spread(values: list[float], fmt: str = "{:.1f}") -> str:
    """min / median / max."""
    return " / ".join(fmt.format(v) for v in (min(values), statistics.median(values), max(values)))


def summary(figures: dict, configs: list, counts: list[int], args) -> None:
    print("\nsummary         min / median / max over the repeats")
    for worker_class, web_workers in configs:
        print(f"{describe(worker_class, web_workers, args.threads)}")
        for label in ("one asset", "across assets"):
            for clients in counts:
                runs = [f for f in figures.get((worker_class, web_workers, label, clients), [])]
                runs = [f for f in runs if "rate" in f]
                if not runs:
                    continue
                rates, p99s = [f["rate"] for f in runs], [f["p99"] for f in runs]
                errors = sum(f["errors"] for f in runs)
                line = (
                    f"  {label:<14} {clients:>3} clients  creates/s {spread(rates)}  "
                    f"p99 {spread(p99s)} ms  errors {errors}"
                )
                if label == "across assets" and clients == TARGET_CLIENTS:
                    ok = (
                        statistics.median(rates) >= CREATES_PER_S_TARGET
                        and statistics.median(p99s) < CREATE_P99_TARGET_MS
                        and not errors
                    )
                    line += (
                        f"  (target >= {CREATES_PER_S_TARGET}/s, p99 < {CREATE_P99_TARGET_MS} ms, "
                        f"0 errors, medians: {'holds' if ok else 'MISSES'})"
                    )
                print(line)


def warmup_args(args, web_workers: int):
    return argparse.Namespace(**{**vars(args), "per_client": 2 * web_workers, "replays": 0})


if __name__ == "__main__":
    main()
