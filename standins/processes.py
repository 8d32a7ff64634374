"""Stand-ins run as child processes: each prints one line, ``LISTENING http://host:port``,
once it accepts connections (``python -m standins.exchange``, ``python -m standins.solana``)."""

from __future__ import annotations

import subprocess
import threading


def wait_listening(process: subprocess.Popen, *, what: str, timeout: float) -> str:
    """The URL the child announces; it is killed (and RuntimeError raised) when it says
    anything else or nothing within ``timeout`` seconds."""
    timer = threading.Timer(timeout, process.kill)
    timer.start()
    try:
        line = (process.stdout.readline() if process.stdout else "").strip()
    finally:
        timer.cancel()
    if not line.startswith("LISTENING "):
        stop_child(process)
        raise RuntimeError(f"{what} did not start (said {line!r})")
    return line.split(" ", 1)[1]


def stop_child(process: subprocess.Popen, *, timeout: float = 5) -> None:
    """SIGTERM, then SIGKILL if it has not stopped within ``timeout`` seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if process.stdout is not None:
        process.stdout.close()


def stop_server(server, thread: threading.Thread) -> None:
    """Stop a stand-in served from a thread of this process (``socketserver`` style)."""
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)
