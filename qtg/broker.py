"""The embedded broker: kombu's filesystem transport, made safe for several processes.

Stock kombu (``kombu.transport.filesystem``, up to 5.7) creates a message file empty and then
writes it, and its consumers take any ``*.msg`` file they see: a worker that looks in between
reads an empty or half-written file and dies on ``JSONDecodeError`` (kombu issue #1551, open).
Its exchange tables (the control folder, used by ``celery inspect``/``ping``) are truncated and
rewritten in place with the same window, and a taken message is moved to the system's temporary
directory, which may be another file system (a copy, not an atomic move).

This transport keeps the stock one's layout and file names (a queue directory of
``<ms>_<uuid>.<queue>.msg`` files, JSON bodies) and changes how files change hands:

- a message is written to a hidden temporary file in the queue directory and renamed into
  place: a consumer sees a complete file or none;
- a consumer takes a message by renaming it into ``processed_folder`` (same file system, so
  atomic: of two consumers exactly one wins) and only then reads it;
- a file that still cannot be read (written by another program, a disk error) is moved to
  ``corrupt/`` beside the queue directory with a warning, never raised into the worker;
- an exchange table is rewritten as a new file renamed over the old one, under a lock file.

Chosen by ``bench/soak_broker.py`` (README, "The embedded broker"): many producers and
consumers in separate processes, stock against this one.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
import uuid
from contextlib import contextmanager, suppress
from pathlib import Path
from queue import Empty

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads
from kombu.utils.objects import cached_property

logger = logging.getLogger(__name__)

# The table of an exchange is read again this many times when it cannot be parsed (a file
# written by stock kombu while it rewrites it in place) before the broadcast is dropped.
TABLE_READ_ATTEMPTS = 5


def write_atomically(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file, the new one, or none."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


class Channel(filesystem.Channel):
    """The stock channel with atomic hand-overs (module docstring)."""

    @property
    def corrupt_folder(self) -> Path:
        return Path(
            self.transport_options.get(
                "corrupt_folder", Path(self.data_folder_in).parent / "corrupt"
            )
        )

    @cached_property
    def _processing_folder(self) -> str:
        # Must be on the queue directory's file system for os.rename to be atomic.
        folder = self.transport_options.get("processed_folder") or os.path.join(
            self.data_folder_in, os.pardir, "processed"
        )
        os.makedirs(folder, exist_ok=True)
        return folder

    # -- messages --------------------------------------------------------------------------
    def _put(self, queue, payload, **kwargs):
        name = f"{round(time.monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        try:
            write_atomically(os.path.join(self.data_folder_out, name), str_to_bytes(dumps(payload)))
        except OSError as exc:
            raise ChannelError(f"Cannot add file {name!r} to directory") from exc

    def _get(self, queue):
        wanted = f"{queue}.msg"
        processing = self._processing_folder
        for name in sorted(os.listdir(self.data_folder_in)):
            if name.startswith(".") or name.partition(".")[2] != wanted:
                continue
            taken = os.path.join(processing, name)
            try:
                os.rename(os.path.join(self.data_folder_in, name), taken)
            except OSError:
                continue  # another consumer took it first
            try:
                with open(taken, "rb") as f:
                    raw = f.read()
                payload = loads(bytes_to_str(raw))
            except (OSError, ValueError) as exc:
                self._quarantine(taken, name, exc)
                continue
            if not self.store_processed:
                with suppress(OSError):
                    os.remove(taken)
            return payload
        raise Empty()

    def _quarantine(self, path: str, name: str, exc: Exception) -> None:
        folder = self.corrupt_folder
        try:
            folder.mkdir(parents=True, exist_ok=True)
            os.replace(path, folder / name)
            where = folder / name
        except OSError:
            with suppress(OSError):
                os.remove(path)
            where = "(removed)"
        logger.warning(
            "embedded broker: unreadable message %s moved to %s (%s: %s)",
            name,
            where,
            type(exc).__name__,
            exc,
        )

    # -- exchange tables (fanout, celery control) -------------------------------------------
    @contextmanager
    def _table_lock(self, exchange):
        file = self._exchange_file(exchange)
        self.control_folder.mkdir(parents=True, exist_ok=True)
        with open(file.with_name(file.name + ".lock"), "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield file
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def get_table(self, exchange):
        file = self._exchange_file(exchange)
        for attempt in range(TABLE_READ_ATTEMPTS):
            try:
                raw = file.read_bytes()
            except FileNotFoundError:
                return []
            except OSError as exc:
                raise ChannelError(f"Cannot open {file}") from exc
            try:
                return [filesystem.exchange_queue_t(*q) for q in loads(bytes_to_str(raw))]
            except (ValueError, TypeError):
                time.sleep(0.01 * (attempt + 1))
        logger.warning("embedded broker: exchange table %s unreadable; broadcast dropped", file)
        return []

    def _write_table(self, file: Path, queues) -> None:
        write_atomically(file, str_to_bytes(dumps(list(queues))))

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        entry = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        try:
            with self._table_lock(exchange) as file:
                queues = self.get_table(exchange)
                if entry not in queues:
                    self._write_table(file, [entry, *queues])
        except OSError as exc:
            raise ChannelError(f"Cannot bind {queue!r} to {exchange!r}") from exc

    def _delete(self, queue, exchange, routing_key, pattern, *args, **kwargs):
        # The virtual channel's own bookkeeping, then this exchange's table.
        super(filesystem.Channel, self)._delete(
            queue, exchange, routing_key, pattern, *args, **kwargs
        )
        entry = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with self._table_lock(exchange) as file:
            queues = self.get_table(exchange)
            if entry in queues:
                self._write_table(file, [q for q in queues if q != entry])


class Transport(filesystem.Transport):
    """``filesystem://`` with :class:`Channel` (settings name it as ``CELERY_BROKER_TRANSPORT``)."""

    Channel = Channel
    global_state = filesystem.virtual.BrokerState()
