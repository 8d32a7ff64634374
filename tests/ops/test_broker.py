"""The embedded broker (the transport the settings give ``filesystem://``) never hands a worker
a half-written message file, and survives one it finds (kombu #1551)."""

import os
import uuid
from pathlib import Path

import pytest
from kombu import Connection

from qtg.celery import app


@pytest.fixture
def broker(tmp_path, settings):
    if settings.CELERY_BROKER_URL != "filesystem://":
        pytest.skip("the embedded broker only")
    folders = {name: tmp_path / name for name in ("queue", "processed", "control", "corrupt")}
    for folder in folders.values():
        folder.mkdir()
    options = {
        "data_folder_in": str(folders["queue"]),
        "data_folder_out": str(folders["queue"]),
        "processed_folder": str(folders["processed"]),
        "control_folder": str(folders["control"]),
        "corrupt_folder": str(folders["corrupt"]),
    }
    # The transport exactly as the web, worker and beat processes are configured with it;
    # a queue name of its own (kombu keeps the bindings it made per process).
    with Connection(
        "filesystem://", transport=app.conf.broker_transport, transport_options=options
    ) as conn:
        yield conn, folders, f"q{uuid.uuid4().hex[:8]}"


def test_an_empty_or_half_written_message_file_is_quarantined_and_the_next_one_delivered(broker):
    conn, folders, q = broker
    queue = conn.SimpleQueue(q)
    # Older than any message put now (names sort by time). A producer died (or is still
    # writing) after creating its file: stock kombu creates
    # the file first and writes it after, so consumers can see exactly this.
    (folders["queue"] / f"0_aaaa.{q}.msg").write_bytes(b"")
    (folders["queue"] / f"0_bbbb.{q}.msg").write_bytes(b'{"body": "tr')
    queue.put({"hello": "world"})

    message = queue.get(timeout=2)

    assert message.payload == {"hello": "world"}
    message.ack()
    assert sorted(os.listdir(folders["corrupt"])) == [f"0_aaaa.{q}.msg", f"0_bbbb.{q}.msg"]
    assert os.listdir(folders["queue"]) == []


def test_a_message_appears_in_the_queue_only_once_it_is_complete(broker, monkeypatch):
    conn, folders, q = broker
    queue = conn.SimpleQueue(q)
    seen_while_writing: list[list[str]] = []
    real_open = open

    class Spy:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            # Half the body is on disk: what would a consumer listing the queue see now?
            self.f.write(data[: len(data) // 2])
            self.f.flush()
            seen_while_writing.append(
                [n for n in os.listdir(folders["queue"]) if n.endswith(f".{q}.msg")]
            )
            self.f.write(data[len(data) // 2 :])

    def spying_open(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        if "w" in mode and Path(path).parent == folders["queue"]:
            return Spy(f)
        return f

    monkeypatch.setattr("builtins.open", spying_open)
    queue.put({"n": 1})
    monkeypatch.undo()

    assert seen_while_writing == [[]]
    assert queue.qsize() == 1
    assert queue.get(timeout=2).payload == {"n": 1}


def test_two_consumers_never_both_take_one_message(broker, tmp_path):
    conn, folders, q = broker
    producer = conn.SimpleQueue(q)
    for n in range(50):
        producer.put({"n": n})
    with conn.clone() as other:
        first, second = conn.SimpleQueue(q), other.SimpleQueue(q)
        got = []
        for n in range(50):
            consumer = first if n % 2 else second
            message = consumer.get(timeout=2)
            message.ack()
            got.append(message.payload["n"])

    assert sorted(got) == list(range(50))
    assert os.listdir(folders["queue"]) == []
