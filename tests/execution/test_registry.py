import sys
import threading

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
