"""The benchmark scripts (bench/) are not run by the suite; what is checked here, cheaply, is
that each refuses to print figures for something it did not measure."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from movements.models import MovementRequestNode

ROOT = Path(__file__).resolve().parents[2]


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(name: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / f"{name}.py"), *args],
        cwd=ROOT,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.django_db
def test_the_changelist_bench_fills_node_attempts_without_demo_hardcaps_and_counts_them():
    changelist = load("admin_changelist")

    changelist.fill(12)

    assert changelist.check_filled() == 12
    assert changelist.search_target(12) == "WD-bench-9"


@pytest.mark.django_db
def test_the_changelist_bench_refuses_a_table_without_node_attempts():
    changelist = load("admin_changelist")
    changelist.fill(5)
    MovementRequestNode.objects.filter(request__idempotency_key="bench-3").delete()

    with pytest.raises(changelist.BenchCheckFailed, match="12 node attempts for 5 movements"):
        changelist.check_filled()


@pytest.mark.django_db
def test_the_changelist_bench_refuses_an_empty_table():
    changelist = load("admin_changelist")

    with pytest.raises(changelist.BenchCheckFailed, match="no benchmark movements"):
        changelist.check_filled()


def test_the_api_load_counts_a_201_without_its_movement_as_an_error():
    api_load = load("api_load")
    results = {"creates": [0.01, 0.02], "replays": [0.005], "errors": [], "elapsed": 1.0}

    errors = api_load.report(
        "one asset",
        20,
        results,
        {"PENDING_APPROVAL": 3},
        {"PENDING_APPROVAL": 4, "FAILED": 1},
        {},
    )

    assert errors == [
        "database: 1 new PENDING_APPROVAL movements for 2 creates answered 201; "
        "other states {'FAILED': 1}"
    ]


def test_the_approve_bench_refuses_approvals_that_did_not_reach_the_state_it_measures(
    make_movement, operator
):
    approve = load("approve")
    movement = make_movement()

    with pytest.raises(approve.BenchCheckFailed, match="expected PENDING_APPROVAL"):
        approve.approve_all([movement], operator.pk, "PENDING_APPROVAL")


@pytest.mark.parametrize("script", ["api_load", "throughput", "approve"])
def test_the_postgresql_benches_refuse_to_run_without_postgresql(script):
    done = run_script(script)

    assert done.returncode != 0
    assert "PostgreSQL" in done.stderr


def test_the_throughput_bench_refuses_to_compare_fewer_than_two_workers():
    done = run_script(
        "throughput", "--workers", "1", DATABASE_URL="postgres://postgres@127.0.0.1:1/none"
    )

    assert done.returncode != 0
    assert "--workers is at least 2" in done.stderr
