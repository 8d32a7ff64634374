"""A real HTTP receiver on 127.0.0.1 (http.server in a thread, port 0), eager delivery tasks,
and callback settings that make retries immediate so tests never wait for backoff."""

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from callbacks.events import EVENT_TYPES
from callbacks.models import Subscription
from qtg.celery import app as celery_app


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self):
        return json.loads(self.body)


@dataclass
class Receiver:
    """Answers each POST with the next scripted (status, delay); 200 once the script runs out."""

    url: str = ""
    script: list[tuple[int, float]] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, *statuses: int, delay: float = 0.0) -> None:
        self.script.extend((status, delay) for status in statuses)

    def _next(self) -> tuple[int, float]:
        with self.lock:
            return self.script.pop(0) if self.script else (200, 0.0)


def _serve(receiver: Receiver):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            status, delay = receiver._next()
            with receiver.lock:
                receiver.received.append(Received(self.path, dict(self.headers.items()), body))
            if delay:
                time.sleep(delay)
            payload = b"ok" if status < 300 else b"not now"
            try:
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", "http://127.0.0.1:9/elsewhere")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:
                pass  # the client gave up (timeout) before we answered

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/qtg"
    return server, thread


@pytest.fixture
def receiver():
    receiver = Receiver()
    server, thread = _serve(receiver)
    yield receiver
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.fixture
def another_receiver():
    receiver = Receiver()
    server, thread = _serve(receiver)
    yield receiver
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.fixture
def dead_url() -> str:
    """A URL on 127.0.0.1 where nothing listens: every attempt is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/hooks"


@pytest.fixture(autouse=True)
def callback_settings(settings):
    settings.QTG_CALLBACKS_ALLOW_PRIVATE_TARGETS = True  # the receiver lives on 127.0.0.1
    settings.QTG_CALLBACKS_MAX_ATTEMPTS = 3
    settings.QTG_CALLBACKS_BACKOFF_SECONDS = 0
    settings.QTG_CALLBACKS_TIMEOUT_SECONDS = 2
    return settings


@pytest.fixture
def eager_tasks():
    """Queued delivery tasks run at once, in this process (no broker, no worker)."""
    previous = celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates
    celery_app.conf.task_always_eager = True
    celery_app.conf.task_eager_propagates = True
    yield
    celery_app.conf.task_always_eager, celery_app.conf.task_eager_propagates = previous


@pytest.fixture
def subscribe(db):
    def _subscribe(url: str, *events: str, name: str = "receiver", **extra) -> Subscription:
        return Subscription.objects.create(
            name=name, url=url, event_types=list(events or EVENT_TYPES), **extra
        )

    return _subscribe
