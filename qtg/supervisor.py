"""``make run``'s process supervisor: the Procfile's lines, each restarted on its own.

honcho (the previous runner) stops every process when one exits and SIGKILLs them ~5 s after
SIGTERM. Here a process that exits while the supervisor is running is started again after a
backoff (1 s, doubling to ``max_backoff``; back to 1 s once it had stayed up ``stable_after``
seconds), each exit and restart logged; the others keep running. Ctrl-C / SIGTERM stops them
all: SIGTERM to each, then SIGKILL to the process group of any still running after
``stop_timeout`` (longer than gunicorn's graceful timeout and a Celery warm shutdown).

Every output line is prefixed with the time and the process name, as honcho did.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TextIO


@dataclass
class Child:
    name: str
    command: str
    popen: subprocess.Popen | None = None
    started_at: float = 0.0
    restarts: int = 0
    backoff: float = 0.0
    restart_at: float | None = None
    threads: list[threading.Thread] = field(default_factory=list)


class Supervisor:
    def __init__(
        self,
        processes: Mapping[str, str],
        *,
        env: Mapping[str, str],
        cwd: str,
        out: TextIO = sys.stdout,
        initial_backoff: float = 1.0,
        max_backoff: float = 30.0,
        stable_after: float = 60.0,
        stop_timeout: float = 30.0,
    ) -> None:
        self.children = [Child(name, command) for name, command in processes.items()]
        self.env = dict(env)
        self.cwd = cwd
        self.out = out
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.stable_after = stable_after
        self.stop_timeout = stop_timeout
        self.width = max((len(c.name) for c in self.children), default=6)
        self._write_lock = threading.Lock()
        self._stopping = threading.Event()
        self.returncode = 0

    # -- output ------------------------------------------------------------------------------
    def log(self, name: str, line: str) -> None:
        stamp = datetime.now().strftime("%H:%M:%S")
        with self._write_lock:
            self.out.write(f"{stamp} {name:<{self.width}} | {line.rstrip()}\n")
            self.out.flush()

    def _pump(self, child: Child, stream) -> None:
        for raw in iter(stream.readline, b""):
            self.log(child.name, raw.decode(errors="replace"))
        stream.close()

    # -- processes ---------------------------------------------------------------------------
    def _start(self, child: Child) -> None:
        child.popen = subprocess.Popen(
            ["/bin/sh", "-c", child.command],
            env=self.env,
            cwd=self.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # Its own process group: Ctrl-C reaches the supervisor only, which stops each
            # child in order; a SIGKILL after the timeout reaches the child's children too.
            start_new_session=True,
        )
        child.started_at = time.monotonic()
        child.restart_at = None
        thread = threading.Thread(target=self._pump, args=(child, child.popen.stdout), daemon=True)
        thread.start()
        child.threads = [thread]
        self.log("system", f"{child.name} started (pid={child.popen.pid})")

    def _on_exit(self, child: Child, rc: int) -> None:
        now = time.monotonic()
        if now - child.started_at >= self.stable_after:
            child.backoff = 0.0
        child.backoff = (
            self.initial_backoff if not child.backoff else min(child.backoff * 2, self.max_backoff)
        )
        child.restarts += 1
        child.restart_at = now + child.backoff
        self.log(
            "system",
            f"{child.name} exited (rc={rc}) after {now - child.started_at:.1f}s; "
            f"restarting in {child.backoff:.0f}s (restart {child.restarts})",
        )
        child.popen = None

    def poll_once(self) -> None:
        """Notice exits, start what is due."""
        now = time.monotonic()
        for child in self.children:
            if child.popen is not None:
                rc = child.popen.poll()
                if rc is not None and not self._stopping.is_set():
                    for thread in child.threads:
                        thread.join(timeout=1)
                    self._on_exit(child, rc)
            elif (
                child.restart_at is not None
                and now >= child.restart_at
                and not self._stopping.is_set()
            ):
                self._start(child)

    def stop(self) -> None:
        """SIGTERM every child, SIGKILL (its group) whatever outlives ``stop_timeout``."""
        self._stopping.set()
        running = [c for c in self.children if c.popen is not None and c.popen.poll() is None]
        for child in running:
            with contextlib.suppress(ProcessLookupError):
                child.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        for child in running:
            try:
                rc = child.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.log("system", f"{child.name} still running after {self.stop_timeout:.0f}s")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.popen.pid, signal.SIGKILL)
                rc = child.popen.wait()
            for thread in child.threads:
                thread.join(timeout=2)
            self.log("system", f"{child.name} stopped (rc={rc})")

    def run(self) -> int:
        """Until SIGINT or SIGTERM: then stop all and return 0 (the signal's number + 128
        when it was not SIGINT, as a shell would)."""
        received: list[int] = []

        def on_signal(signum, frame):
            received.append(signum)

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            for child in self.children:
                self._start(child)
            while not received:
                self.poll_once()
                time.sleep(0.2)
            self.log("system", f"{signal.Signals(received[0]).name} received")
        finally:
            self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.returncode = 0 if received[0] == signal.SIGINT else 128 + received[0]
        return self.returncode
