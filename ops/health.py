"""Health for load balancers, orchestrators and ``qtg_status``.

- ``/health/live``: the web process is up and answering (no dependency is asked): restart the
  process when this fails.
- ``/health/ready`` (and ``/health/``, as before): can this deployment do its work now? The
  database, the broker, the scheduler (a beat holds the ``beat`` lease and a periodic sweep
  finished recently), the workers of each queue (their heartbeat rows), and the configured
  venues (each chain's RPC endpoint answering with its head, each account's credentials
  present). Take the instance out of rotation while this fails.

Every check of ``/health/ready`` runs at once, in a thread of its own, and the checks get
``QTG_HEALTH_BUDGET_SECONDS`` (0.8 s, so that the whole answer comes within 1 s) whatever
happens: a check that has not answered by then fails as "no answer within 0.8s" (its thread
is left to finish on its own). JSON; 503 naming each failing check.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, connections
from django.http import JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from ops.heartbeats import last_sweep_at, workers_by_queue
from qtg.weakening import weakenings


class CheckFailed(Exception):
    """A check's reason to fail, as shown to the on-call engineer."""


@dataclass(frozen=True)
class Result:
    ok: bool
    detail: str
    seconds: float


def _closing_connections(check: Callable[[], str]) -> Callable[[], str]:
    def run() -> str:
        try:
            return check()
        except DatabaseError as exc:
            raise CheckFailed(f"database unreachable: {type(exc).__name__}") from exc
        finally:
            # Checks run in threads of their own: leave no connection behind in them.
            connections["default"].close()

    return run


def check_database() -> str:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT 1")
    return "OK"


def check_broker(budget: float) -> str:
    from qtg.celery import app

    url = settings.CELERY_BROKER_URL
    # The embedded broker's transport is named in the settings; any other URL names its own.
    transport = app.conf.broker_transport if url == "filesystem://" else url.partition(":")[0]
    try:
        with app.connection_for_write(
            url, transport=transport, connect_timeout=budget
        ) as connection:
            connection.ensure_connection(
                max_retries=1, interval_start=0, interval_step=0, timeout=budget
            )
    except Exception as exc:  # kombu raises its transports' own errors
        raise CheckFailed(f"broker unreachable: {type(exc).__name__}") from exc
    return "OK"


def check_scheduler() -> str:
    """A beat leads (holds an unexpired ``beat`` lease) and a sweep finished recently."""
    from qtg.leader import current

    lease = current("beat")
    now = timezone.now()
    at = last_sweep_at()
    if at is None:
        raise CheckFailed("no periodic sweep has run yet")
    age = (now - at).total_seconds()
    limit = settings.QTG_HEALTH_MAX_SWEEP_AGE_SECONDS
    if age > limit:
        raise CheckFailed(f"last sweep {age:.0f}s ago (limit {limit:.0f}s)")
    if lease is None or lease.expires_at <= now:
        raise CheckFailed(f"no beat holds the scheduler lease (last sweep {age:.0f}s ago)")
    return f"led by {lease.holder}; last sweep {age:.0f}s ago"


def check_workers() -> str:
    """At least one live worker consumes each queue this deployment sends to."""
    queues = settings.QTG_CELERY_QUEUES
    serving = workers_by_queue(max_age=settings.QTG_HEALTH_MAX_WORKER_AGE_SECONDS)
    missing = [q for q in queues if not serving.get(q)]
    if missing:
        raise CheckFailed(f"no live worker consumes {', '.join(missing)}")
    return "; ".join(f"{q}: {len(serving[q])} worker(s)" for q in queues)


def venue_problems() -> list[str]:
    """What the reviewed venue configuration names but this environment does not provide: a
    chain's RPC URL variable, an account's key or API credentials (looked up, never read)."""
    from venues import conf

    problems: list[str] = []

    def reference_missing(ref) -> str | None:
        if not isinstance(ref, dict):
            return "no key reference"
        if "env" in ref and not os.environ.get(str(ref["env"])):
            return f"environment variable {ref['env']} is empty"
        if "password_env" in ref and not os.environ.get(str(ref["password_env"])):
            return f"environment variable {ref['password_env']} is empty"
        for key in ("file", "keystore"):
            if key in ref and not os.access(Path(str(ref[key])), os.R_OK):
                return f"cannot read {ref[key]}"
        if not {"env", "file", "keystore", "backend"} & set(ref):
            return "no env, file or keystore named"
        return None

    for name, chain in conf.section("chains", "chains").items():
        chain = chain or {}
        more = chain.get("rpc_endpoints")
        variables = [chain.get("rpc_url_env"), chain.get("iris_url_env")]
        for variable in variables + (list(more) if isinstance(more, list) else []):
            if variable and not os.environ.get(str(variable)):
                problems.append(f"chain {name}: {variable} is empty")
        for account, entry in (chain.get("accounts") or {}).items():
            if isinstance(entry, dict) and "key" in entry:
                missing = reference_missing(entry["key"])
                if missing:
                    problems.append(f"chain {name} account {account}: {missing}")
    for name, exchange in conf.section("exchanges", "exchanges").items():
        for account, entry in ((exchange or {}).get("accounts") or {}).items():
            for field in ("api_key", "secret"):
                missing = reference_missing((entry or {}).get(field))
                if missing:
                    problems.append(f"exchange {name} account {account} {field}: {missing}")
    return problems


def chain_head(url: str, kind: str, timeout: float) -> int:
    """The head block (EVM) or slot (Solana) one RPC endpoint answers within ``timeout``
    seconds; any transport or protocol failure raises."""
    import httpx

    method = "getSlot" if kind == "solana" else "eth_blockNumber"
    answer = httpx.post(
        url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": []}, timeout=timeout
    ).json()
    head = answer["result"]
    return int(head, 16) if isinstance(head, str) else int(head)


def chain_heads(budget: float) -> list[str]:
    """Each configured chain's head, asked over its RPC URL within ``budget`` seconds."""
    from venues import conf

    heads = []
    for name, chain in conf.section("chains", "chains").items():
        variable = (chain or {}).get("rpc_url_env")
        url = os.environ.get(str(variable), "") if variable else ""
        if not url:
            continue
        try:
            head = chain_head(url, str((chain or {}).get("kind") or "evm"), budget)
        except Exception as exc:  # any transport or protocol failure: the endpoint is down
            raise CheckFailed(f"chain {name}: RPC unreachable ({type(exc).__name__})") from exc
        heads.append(f"{name} head {head}")
    return heads


def check_venues(budget: float) -> str:
    if settings.QTG_VENUES == "off":
        return "sandbox venues (QTG_VENUES=off)"
    problems = venue_problems()
    if problems:
        raise CheckFailed("; ".join(problems))
    heads = chain_heads(budget)
    return "; ".join(heads) or "OK (no chain configured)"


def checks(budget: float) -> dict[str, Callable[[], str]]:
    """The readiness checks, in the order they are reported."""
    return {
        "database": _closing_connections(check_database),
        "broker": lambda: check_broker(budget),
        "beat": _closing_connections(check_scheduler),
        "worker": _closing_connections(check_workers),
        "venues": _closing_connections(lambda: check_venues(budget)),
    }


def run_checks(budget: float | None = None) -> dict[str, Result]:
    """Every readiness check at once; each result by name, all within ``budget`` seconds."""
    budget = settings.QTG_HEALTH_BUDGET_SECONDS if budget is None else budget
    started = time.monotonic()
    results: dict[str, Result] = {}
    lock = threading.Lock()

    def run(name: str, check: Callable[[], str]) -> None:
        t0 = time.monotonic()
        try:
            result = Result(True, check(), time.monotonic() - t0)
        except CheckFailed as exc:
            result = Result(False, str(exc), time.monotonic() - t0)
        except Exception as exc:  # a check's own bug must not take the endpoint down
            result = Result(False, f"{type(exc).__name__}: {exc}", time.monotonic() - t0)
        with lock:
            results[name] = result

    todo = checks(budget)
    threads = [
        threading.Thread(target=run, args=item, name=f"health-{item[0]}", daemon=True)
        for item in todo.items()
    ]
    for thread in threads:
        thread.start()
    deadline = started + budget
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    with lock:
        return {
            name: results.get(name)
            or Result(False, f"no answer within {budget:.1f}s", time.monotonic() - started)
            for name in todo
        }


def report(results: dict[str, Result]) -> dict:
    """The JSON body: overall status and one entry per check. A deployment running with a
    security-weakening switch set (qtg/weakening.py) that passes every check is ``degraded``
    (still 200: it serves), with the switches under ``weakened``."""
    weakened = weakenings(settings)
    healthy = all(r.ok for r in results.values())
    return {
        "status": ("degraded" if weakened else "ok") if healthy else "fail",
        "weakened": weakened,
        "checks": {
            name: {
                "status": "ok" if result.ok else "fail",
                "detail": result.detail,
                "seconds": round(result.seconds, 3),
            }
            for name, result in results.items()
        },
    }


@require_GET
def live(request):
    """The process is up: nothing else is asked."""
    return JsonResponse({"status": "ok"})


def audit_detail() -> dict:
    """The newest bounded verification of the evidence chain: a detail, never a reason to take
    the instance out of rotation (every instance shares the one database)."""
    from ops.audit import audit_status

    try:
        status = audit_status()
    except DatabaseError:
        return {"status": "unknown", "detail": "database unreachable"}
    if status is None:
        return {"status": "unknown", "detail": "not verified yet"}
    return {
        "status": "broken" if status.breaks else "ok",
        "detail": status.breaks[0] if status.breaks else f"{status.rows} recent rows verified",
        "breaks": len(status.breaks),
        "checked_at": status.checked_at.isoformat(),
        "checkpoint": status.checkpoint_seq,
    }


@require_GET
def ready(request):
    """JSON whatever the client accepts; 503 when any check fails. ``audit`` reports the
    evidence chain's newest verification, read beside the checks and within the same budget
    (a database that never answers must not hold the probe past it)."""
    budget = settings.QTG_HEALTH_BUDGET_SECONDS
    started = time.monotonic()
    audit: list[dict] = []

    def read_audit() -> None:
        try:
            audit.append(audit_detail())
        finally:
            connections["default"].close()

    thread = threading.Thread(target=read_audit, name="health-audit", daemon=True)
    thread.start()
    body = report(run_checks(budget))
    thread.join(timeout=max(0.0, started + budget - time.monotonic()))
    body["audit"] = (
        audit[0] if audit else {"status": "unknown", "detail": f"no answer within {budget:.1f}s"}
    )
    return JsonResponse(body, status=503 if body["status"] == "fail" else 200)
