"""The registry of executors by name. Route templates may only name registered executors."""

import threading
from collections.abc import Callable
from importlib import import_module
from typing import Any

# Modules whose import registers the shipped executors.
EXECUTOR_MODULES = ("movements.executors.builtin", "movements.executors.sandbox")


class ExecutorRegistry:
    def __init__(self) -> None:
        self._executors: dict[str, type] = {}
        self._loaded = False
        self._loading = False
        # Re-entrant: the modules being imported may look names up while they load.
        self._lock = threading.RLock()

    def _load(self) -> None:
        if self._loaded:
            return
        # Other threads wait until every module is imported: a half-loaded registry would call
        # a shipped executor unknown.
        with self._lock:
            if self._loaded or self._loading:
                return
            self._loading = True
            try:
                for module in EXECUTOR_MODULES:
                    import_module(module)
                self._loaded = True
            finally:
                self._loading = False

    def register(self, name: str) -> Callable[[type], type]:
        def decorator(cls: type) -> type:
            existing = self._executors.get(name)
            if existing is not None and existing is not cls:
                raise ValueError(f"executor {name!r} is already registered by {existing!r}")
            cls.name = name
            self._executors[name] = cls
            return cls

        return decorator

    def names(self) -> list[str]:
        self._load()
        return sorted(self._executors)

    def is_registered(self, name: str) -> bool:
        self._load()
        return name in self._executors

    def get(self, name: str) -> Any:
        self._load()
        try:
            return self._executors[name]()
        except KeyError:
            raise LookupError(f"no executor registered as {name!r}") from None


registry = ExecutorRegistry()
register = registry.register
is_registered = registry.is_registered
get_executor = registry.get
