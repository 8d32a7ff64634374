"""A deadline for one whole HTTP exchange, which httpx's timeouts (each per read, write or
connect) do not give: a receiver sending a byte every few seconds never trips them.

httpx reports the connection it opened through its ``trace`` extension; when the deadline
passes, a timer shuts that socket down, which ends a read blocked on it at once (the exchange
then fails with an httpx error, and ``expired`` says why).
"""

import contextlib
import socket
import threading
from typing import Any


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpx's trace hook: remember each socket the exchange connects."""
        if event.endswith(("connect_tcp.complete", "start_tls.complete")):
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if sock is not None:
                with self._lock:
                    self._sockets.append(sock)
                    if self.expired:
                        self._shutdown(sock)

    def _shutdown(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError):  # already closed: nothing left to cut
            sock.shutdown(socket.SHUT_RDWR)

    def _cut(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                self._shutdown(sock)

    def __enter__(self) -> "Deadline":
        self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self._timer.cancel()
