"""Production process management (deploy/): the image's entrypoint runs the Procfile's own lines
with `exec` (the supervisor's pid is the program's), the systemd units verify, and the compose
file restarts each service on its own with stop timeouts longer than the graceful ones."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "deploy" / "entrypoint.sh"
UNITS = sorted((ROOT / "deploy" / "systemd").glob("*.service"))
GRACEFUL_SECONDS = 20  # gunicorn's --graceful-timeout in the Procfile


def procfile() -> dict[str, str]:
    lines = (ROOT / "Procfile").read_text().splitlines()
    return dict(line.split(":", 1) for line in lines if line.strip() and not line.startswith("#"))


# One worker per queue (qtg/queues.py).
WORKERS = ("worker", "worker-venues", "worker-webhooks")


def test_each_queue_has_its_own_worker_line():
    from qtg.queues import all_queues

    consumed = [
        re.search(r"-Q (\S+)", procfile()[name])[1].replace("${QTG_CELERY_QUEUE:-qtg}", "qtg")
        for name in WORKERS
    ]

    assert sorted(consumed) == sorted(all_queues("qtg"))


def entrypoint(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(ENTRYPOINT), *args],
        env={**os.environ, "QTG_HOME": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_every_procfile_line_execs_its_program():
    assert set(procfile()) == {"web", *WORKERS, "beat"}
    for name, command in procfile().items():
        assert command.strip().startswith("exec "), name
    assert f"--graceful-timeout {GRACEFUL_SECONDS}" in procfile()["web"]


@pytest.mark.parametrize("role", ["web", *WORKERS, "beat"])
def test_the_entrypoint_runs_exactly_the_procfile_line(role):
    result = entrypoint("print", role)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == procfile()[role].strip()


def test_the_entrypoint_refuses_an_unknown_role():
    assert entrypoint("scheduler").returncode == 64
    assert entrypoint().returncode == 64


def test_the_entrypoint_execs_so_the_process_it_starts_is_the_program(tmp_path):
    # a Procfile whose web line prints its own pid: with exec, the shell is replaced
    fake = tmp_path / "Procfile"
    fake.write_text(f"web: exec {sys.executable} -c 'import os; print(os.getpid())'\n")
    process = subprocess.Popen(
        [str(ENTRYPOINT), "web"],
        env={**os.environ, "QTG_HOME": str(ROOT), "QTG_PROCFILE": str(fake)},
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = process.communicate(timeout=30)

    assert int(out.strip()) == process.pid


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_the_systemd_units_verify_and_outlast_the_graceful_timeouts(tmp_path):
    # verify checks the executables and users exist: point the units at this checkout
    (tmp_path / "env").write_text("")
    for unit in UNITS:
        text = unit.read_text()
        if "prestart" not in unit.name:
            stop = int(re.search(r"^TimeoutStopSec=(\d+)$", text, re.M)[1])
            assert stop > GRACEFUL_SECONDS + 10, unit.name
            assert re.search(r"^Restart=always$", text, re.M), unit.name
        text = (
            text.replace("/opt/qtg/app", str(ROOT))
            .replace("/opt/qtg/venv", sys.prefix)
            .replace("/etc/qtg/env", str(tmp_path / "env"))
            .replace("User=qtg", "User=root")
            .replace("Group=qtg", "Group=root")
        )
        (tmp_path / unit.name).write_text(text)

    result = subprocess.run(
        ["systemd-analyze", "verify", *(str(tmp_path / u.name) for u in UNITS)],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == ""


def compose_command() -> list[str] | None:
    """Docker's compose plugin, or the standalone docker-compose (Debian's package, which CI
    installs): either validates the file without a Docker daemon."""
    if (
        shutil.which("docker")
        and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    ):
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_the_compose_file_restarts_each_service_on_its_own():
    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    services = compose["services"]

    assert {"postgres", "redis", "prestart", "web", *WORKERS, "beat"} <= set(services)
    for name in ("web", *WORKERS, "beat"):
        service = services[name]
        assert service["command"] == [name]
        assert service["restart"] == "unless-stopped"
        assert int(service["stop_grace_period"].rstrip("s")) > GRACEFUL_SECONDS + 10
        assert service["depends_on"]["prestart"]["condition"] == ("service_completed_successfully")
    assert services["beat"]["deploy"]["replicas"] >= 2  # no single scheduler
    compose_cli = compose_command()
    if compose_cli:
        result = subprocess.run(
            [*compose_cli, "-f", str(ROOT / "deploy" / "compose.yaml"), "config", "-q"],
            env={**os.environ, "DJANGO_SECRET_KEY": "x" * 60, "QTG_METRICS_TOKEN": "t" * 40},
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stderr
