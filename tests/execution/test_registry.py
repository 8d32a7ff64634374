import os
import subprocess
import sys
import threading

import pytest
from django.core.exceptions import ImproperlyConfigured

from movements.executors.base import Executor
from movements.executors.registry import ExecutorRegistry

# The package re-exports an object named ``registry``, which hides the module of that name.
registry_module = sys.modules["movements.executors.registry"]
TARGET = ExecutorRegistry()


def test_threads_racing_the_first_lookup_all_see_the_fully_loaded_registry(monkeypatch):
    monkeypatch.setattr(
        registry_module, "EXECUTOR_MODULES", ("tests.execution.slow_registering_module",)
    )
    sys.modules.pop("tests.execution.slow_registering_module", None)
    start = threading.Barrier(6)
    seen: list[bool] = []

    def look_up() -> None:
        start.wait()
        seen.append(TARGET.is_registered("slow_to_import"))

    threads = [threading.Thread(target=look_up) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert seen == [True] * 6


def _two_providers() -> ExecutorRegistry:
    registry = ExecutorRegistry()

    @registry.register("withdraw", provider="sandbox")
    class Simulated(Executor):
        pass

    @registry.register("withdraw", provider="venues")
    class Real(Executor):
        pass

    return registry


def test_a_name_two_apps_provide_is_refused_until_the_deployment_chooses(settings):
    settings.QTG_EXECUTORS = {}
    settings.QTG_EXECUTOR_DEFAULT_PROVIDER = ""  # no QTG_VENUES default either
    registry = _two_providers()

    with pytest.raises(ImproperlyConfigured, match="choose one in QTG_EXECUTORS"):
        registry.get("withdraw")
    assert registry.problems() == [
        "executor 'withdraw' is provided by sandbox, venues: choose one in QTG_EXECUTORS"
    ]


def test_the_deployment_chooses_which_app_serves_a_name(settings):
    settings.QTG_EXECUTORS = {"withdraw": "venues"}
    registry = _two_providers()

    assert type(registry.get("withdraw")).__name__ == "Real"
    assert registry.problems() == []


def test_choosing_an_app_that_does_not_provide_the_name_is_a_start_up_error(settings):
    settings.QTG_EXECUTORS = {"withdraw": "elsewhere"}
    registry = _two_providers()

    assert not registry.is_registered("withdraw")
    assert registry.problems() == [
        "QTG_EXECUTORS chooses 'elsewhere' for 'withdraw': offered by sandbox, venues"
    ]


def test_without_the_sandbox_app_no_simulated_venue_serves_a_template():
    script = (
        "import django; django.setup()\n"
        "from django.conf import settings\n"
        "from movements.executors import registry\n"
        "providers = {p for n in registry.names() for p in registry.providers(n)}\n"
        "print('sandbox' in settings.INSTALLED_APPS, 'manual_gate' in registry.names(),"
        " sorted(providers))\n"
    )
    env = {**os.environ, "QTG_SANDBOX_ENABLED": "0", "DJANGO_SETTINGS_MODULE": "qtg.settings"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    ).stdout

    # Only movements' own executors and the real venues' remain.
    assert out.strip() == "False True ['movements', 'venues']"
