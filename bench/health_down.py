"""How long /health/live, /health/ready and /metrics take to answer with the database and the
broker down (not a test): a real gunicorn started as production starts it (the Procfile's
settings file, production profile), its database and broker either refusing connections
(stopped) or never answering (a partition, a host gone). Prints min / median / max of the
warm answers with the target beside them (a load balancer's probe: /health/ready's 503 within
1 s; /health/live at once). tests/ops/test_health_down.py asserts the same bounds.

    python bench/health_down.py --repeat 10
"""

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.ops.test_health_down import (  # noqa: E402
    silently_listening,
    timed_get,
    web_with_dependencies_at,
)
from tests.ops.test_production_smoke import TOKEN  # noqa: E402

READY_TARGET_SECONDS = 1.0


def spread(values: list[float]) -> str:
    middle = statistics.median(values)
    return " / ".join(f"{v * 1000:.0f}" for v in (min(values), middle, max(values)))


def timed(url: str, **kwargs) -> tuple[int, float]:
    response, seconds = timed_get(url, **kwargs)
    return response.status_code, seconds


def measure(mode: str, repeat: int) -> None:
    with contextlib.ExitStack() as stack:
        # "refusing": nothing listens at port 1; "hanging": a port that never answers.
        port = stack.enter_context(silently_listening()) if mode == "hanging" else 1
        tmp = Path(tempfile.mkdtemp(prefix="qtg-health-bench-"))
        base = stack.enter_context(web_with_dependencies_at(tmp, port))
        first_status, first = timed(f"{base}/health/ready")
        live, ready, scrape, statuses = [], [], [], set()
        for _ in range(repeat):
            status, seconds = timed(f"{base}/health/live")
            statuses.add(("live", status))
            live.append(seconds)
            status, seconds = timed(f"{base}/health/ready")
            statuses.add(("ready", status))
            ready.append(seconds)
        status, seconds = timed(f"{base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        statuses.add(("metrics", status))
        scrape.append(seconds)
    ok = statistics.median(ready) < READY_TARGET_SECONDS
    print(f"database and broker {mode}: answers {sorted(statuses)}")
    print(f"  /health/live     {spread(live)} ms")
    print(
        f"  /health/ready    {spread(ready)} ms (first {first * 1000:.0f} ms, {first_status}); "
        f"target < {READY_TARGET_SECONDS * 1000:.0f} ms: {'holds' if ok else 'MISSES'}"
    )
    print(f"  /metrics         {scrape[0] * 1000:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"load average: {load} ({os.cpu_count()} CPUs); min / median / max of warm answers")
    for mode in ("refusing", "hanging"):
        measure(mode, args.repeat)


if __name__ == "__main__":
    main()
