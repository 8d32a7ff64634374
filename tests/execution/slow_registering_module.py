"""Imported by test_registry: registers an executor only after a pause, like a module that is
slow to import, so threads racing the first lookup can be observed."""

import time

from movements.executors.base import Executor
from tests.execution import test_registry

time.sleep(0.3)


@test_registry.TARGET.register("slow_to_import")
class SlowToImport(Executor):
    pass
