"""Soak `make run` (``manage.py run_embedded``, the embedded default: SQLite and the embedded
broker) under the API for a long while (not part of the suite):

    python bench/soak_api.py --minutes 60

Starts the product as the README's first command does (migrate, seed the demo, web + worker +
beat under the supervisor) in a scratch var directory on a free port, mints API tokens for the
demo's ``admin`` (creates) and ``operator`` (approves: four-eyes), then loops over the API
scenarios until the time is up: creates (every template the sandbox serves, each sandbox
fault, replays of an Idempotency-Key, refusals), approvals, rejections, reads of the list, the
detail, a movement's events and the event feed, and /health/ready (a 503 there is reported
with its failing checks, not as a server error). At the end it waits for the approved
movements to settle and reports: requests by status, server errors (5xx), refused
connections, every process exit the supervisor logged (a crash), broker files quarantined, and
the movements by state. Exit status non-zero on any 5xx, refused connection or process exit.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
API = "/api/v1/movements/"
FAULTS = [
    None,
    None,
    "submit_timeout_landed",
    "submit_timeout_lost",
    "fail",
    "observe_fail",
    "delay:2",
    "submit_delay:1",
    "reorg",
]
FINAL = {"COMPLETED", "FAILED", "MANUAL_INTERVENTION", "REJECTED", "EXPIRED", "CANCELLED"}


def retry_after(response: httpx.Response) -> float:
    """The seconds a 429 asks the client to wait (at most 10, at least 0.1)."""
    try:
        return min(10.0, max(0.1, float(response.headers.get("Retry-After", "1"))))
    except ValueError:
        return 1.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def manage(env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout


class Soak:
    def __init__(self, base: str, admin: str, operator: str) -> None:
        self.creator = httpx.Client(
            base_url=base, headers={"Authorization": f"Token {admin}"}, timeout=30
        )
        self.approver = httpx.Client(
            base_url=base, headers={"Authorization": f"Token {operator}"}, timeout=30
        )
        self.statuses: collections.Counter[str] = collections.Counter()
        self.refused = 0
        self.server_errors: list[str] = []
        self.not_ready: list[str] = []
        self.created: list[str] = []
        self.keys: list[tuple[str, dict]] = []
        self.throttled_wait = 0.0
        # Decisions that have not landed yet (throttled past their tries, or the connection
        # failed): made again before anything new, as an operator who wants the money moved
        # does. Left waiting, the movements would fill the client's pending limit
        # (QTG_CLIENT_MAX_PENDING_COUNT) and every later create would be refused.
        self.undecided: collections.deque[tuple[str, str]] = collections.deque()
        self.decided: collections.Counter[str] = collections.Counter()

    def call(self, client: httpx.Client, method: str, url: str, **kwargs):
        # A throttled call (429) is counted and then made again after the Retry-After the API
        # gave, as the integrator guide asks of a client: otherwise a throttled approve leaves
        # the movement waiting, the client's pending limit fills up and every later create is
        # refused at once, and the soak no longer exercises execution.
        for _attempt in range(5):
            try:
                response = client.request(method, url, **kwargs)
            except httpx.TransportError as exc:
                self.refused += 1
                self.statuses[f"{type(exc).__name__}"] += 1
                return None
            self.statuses[str(response.status_code)] += 1
            if response.status_code != 429:
                break
            self.throttled_wait += retry_after(response)
            time.sleep(retry_after(response))
        if url.startswith("/health/") and response.status_code == 503:
            # Not a server error: readiness says what is behind (which check, why).
            failing = {
                name: check["detail"]
                for name, check in response.json()["checks"].items()
                if check["status"] != "ok"
            }
            self.not_ready.append(f"{time.strftime('%H:%M:%S')} {failing}")
        elif response.status_code >= 500:
            self.server_errors.append(f"{method} {url} -> {response.status_code}")
        return response

    def create(self, *, fault: str | None, replay: bool = False) -> str | None:
        if replay and self.keys:
            key, body = random.choice(self.keys)
        else:
            body = {
                "template": "cex_to_cex",
                "asset": random.choice(["USDC", "USDT"]),
                "amount": f"{random.randint(1, 500)}.{random.randint(0, 99):02d}",
                "source": "sandbox-exchange-a",
                "destination": "sandbox-exchange-b",
            }
            if fault:
                body["params"] = {"sandbox": {"withdraw": fault}}
            key = uuid.uuid4().hex
            self.keys.append((key, body))
        response = self.call(self.creator, "POST", API, json=body, headers={"Idempotency-Key": key})
        if response is not None and response.status_code == 201:
            movement = response.json()["id"]
            self.created.append(movement)
            return movement
        return None

    def decide(self, verb: str, movement: str) -> None:
        """Approve or reject ``movement`` as the operator (four-eyes: not its creator)."""
        body = {"reason": "soak"} if verb == "reject" else {}
        response = self.call(self.approver, "POST", f"{API}{movement}/{verb}/", json=body)
        if response is None or response.status_code == 429:
            self.undecided.append((verb, movement))
        elif response.status_code == 200:
            self.decided[verb] += 1

    def scenario(self) -> None:
        if self.undecided:
            self.decide(*self.undecided.popleft())
        roll = random.random()
        if roll < 0.45:
            movement = self.create(fault=random.choice(FAULTS))
            if movement and random.random() < 0.9:
                self.decide("approve", movement)
            elif movement:
                # A movement awaiting approval is rejected, not cancelled (the spec's only ways
                # out of PENDING_APPROVAL are APPROVED, REJECTED and EXPIRED).
                self.decide("reject", movement)
        elif roll < 0.55:
            self.create(fault=None, replay=True)
        elif roll < 0.6:  # refused at validation: an unknown template, a bad amount
            self.call(
                self.creator,
                "POST",
                API,
                json={"template": "teleport"},
                headers={"Idempotency-Key": uuid.uuid4().hex},
            )
        elif roll < 0.75 and self.created:
            movement = random.choice(self.created)
            self.call(self.creator, "GET", f"{API}{movement}/")
            self.call(self.creator, "GET", f"{API}{movement}/events/")
        elif roll < 0.85:
            self.call(self.creator, "GET", API, params={"page_size": 20})
            self.call(self.creator, "GET", "/api/v1/events/")
        else:
            self.call(self.creator, "GET", "/health/ready")
            self.call(self.creator, "GET", "/health/live")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--settle-seconds", type=float, default=120)
    args = parser.parse_args()

    var = Path(tempfile.mkdtemp(prefix="qtg-soak-"))
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "CELERY_BROKER_URL"} and not k.startswith("QTG_")
    }
    env.update(
        QTG_PROFILE="embedded",
        QTG_VAR_DIR=str(var),
        QTG_SANDBOX_TIME_SCALE="0.05",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYTHONUNBUFFERED="1",
    )
    log = var / "make-run.log"
    product = subprocess.Popen(
        [sys.executable, "manage.py", "run_embedded", "--addr", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/health/live", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(1)
        else:
            print(log.read_text()[-3000:])
            return 2
        admin = manage(env, "api_token_create", "admin", "--name", "soak").strip().splitlines()[-1]
        operator = manage(env, "api_token_create", "operator", "--name", "soak")
        soak = Soak(base, admin, operator.strip().splitlines()[-1])
        started = time.monotonic()
        end = started + args.minutes * 60
        next_report = started + 60
        while time.monotonic() < end:
            soak.scenario()
            if time.monotonic() > next_report:
                next_report += 60
                print(
                    f"{(time.monotonic() - started) / 60:5.1f} min: {sum(soak.statuses.values())}"
                    f" requests, {dict(soak.statuses)}",
                    flush=True,
                )
        time.sleep(args.settle_seconds)
        states: collections.Counter[str] = collections.Counter()
        reasons: collections.Counter[str] = collections.Counter()
        for movement in soak.created:
            response = soak.call(soak.creator, "GET", f"{API}{movement}/")
            if response is not None and response.status_code == 200:
                body = response.json()
                states[body["request_state"]] += 1
                if body["request_state"] == "FAILED":
                    # The reason without the ids in it, so alike reasons count together.
                    reason = re.sub(r"[0-9a-f-]{16,}", "…", body.get("failure_reason") or "")
                    reasons[reason[:120]] += 1
        text = log.read_text()
        exits = re.findall(r"\| (\w+ exited \(rc=-?\d+\).*)", text)
        decode_errors = text.count("JSONDecodeError")
        quarantined = len(list((var / "broker" / "corrupt").glob("*")))
        result = {
            "minutes": args.minutes,
            "requests": sum(soak.statuses.values()),
            "by_status": dict(soak.statuses),
            "server_errors": soak.server_errors[:20],
            "not_ready": soak.not_ready[:20],
            "refused_connections": soak.refused,
            "seconds_waited_on_429": round(soak.throttled_wait, 1),
            "process_exits": exits,
            "JSONDecodeError_lines": decode_errors,
            "broker_files_quarantined": quarantined,
            "movements_created": len(soak.created),
            "movements_approved": soak.decided["approve"],
            "movements_rejected": soak.decided["reject"],
            "decisions_not_landed": len(soak.undecided),
            "movements_by_state": dict(states),
            "still_moving": sum(n for s, n in states.items() if s not in FINAL),
            "failed_by_reason": dict(reasons.most_common(8)),
        }
        print(json.dumps(result, indent=1))
        bad = soak.server_errors or soak.refused or exits
        print("FAIL" if bad else "OK: no crash, no 5xx, no refused connection")
        return 1 if bad else 0
    finally:
        if product.poll() is None:
            os.killpg(product.pid, signal.SIGINT)
            try:
                product.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(product.pid, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
