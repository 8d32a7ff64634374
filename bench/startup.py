"""Start-up time of a management command (``manage.py check``) and of a Celery worker (from
its exec to "ready"), on the embedded default (not a test).

    python bench/startup.py --repeat 5
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def env(var: Path) -> dict[str, str]:
    return {
        **os.environ,
        "QTG_PROFILE": "embedded",
        "QTG_VAR_DIR": str(var),
        "QTG_CELERY_QUEUE": f"startup-{os.getpid()}",
        "DJANGO_SETTINGS_MODULE": "qtg.settings",
    }


def command_seconds(var: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env(var),
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def worker_seconds(var: Path) -> float:
    log = var / "worker.log"
    started = time.perf_counter()
    with log.open("w") as out:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "qtg",
                "worker",
                "--pool",
                "solo",
                "--without-gossip",
                "--without-mingle",
                "-l",
                "INFO",
            ],
            cwd=ROOT,
            env=env(var),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        while "ready." not in log.read_text():
            if worker.poll() is not None:
                raise RuntimeError(log.read_text()[-2000:])
            if time.perf_counter() - started > 120:
                raise RuntimeError("worker not ready in 120 s")
            time.sleep(0.02)
        return time.perf_counter() - started
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        var = Path(tmp)
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env(var), check=True
        )
        figures = {"manage.py check": [], "celery worker to ready": []}
        for _ in range(args.repeat):
            figures["manage.py check"].append(command_seconds(var))
            figures["celery worker to ready"].append(worker_seconds(var))
    for name, seconds in figures.items():
        print(
            f"{name:24} min {min(seconds):.2f} s  median {statistics.median(seconds):.2f} s  "
            f"max {max(seconds):.2f} s  ({len(seconds)} runs)"
        )


if __name__ == "__main__":
    main()
