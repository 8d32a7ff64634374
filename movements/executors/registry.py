"""The registry of executors by name. Route templates may only name registered executors.

An executor name (``cex_withdraw``) is what a template asks for; an implementation of it is
provided by an app (the ``sandbox`` app's simulated venues, the real venues' app), which
registers its classes when Django starts (``AppConfig.ready``). Where more than one app
provides a name, the deployment chooses in ``settings.QTG_EXECUTORS`` (name -> app); a name
left ambiguous is a start-up error (the ``movements`` system checks), never a guess.
"""

import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# Modules whose import registers the executors that ship with movements itself. Other apps
# import their own executors from ``ready()``.
EXECUTOR_MODULES = ("movements.executors.builtin",)


@dataclass(frozen=True)
class _Declared:
    """An executor named ahead of its module's import (``ExecutorRegistry.declare``)."""

    module: str


class ExecutorRegistry:
    def __init__(self) -> None:
        # name -> providing app -> class
        self._providers: dict[str, dict[str, type]] = {}
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

    def declare(self, name: str, *, provider: str, module: str) -> None:
        """Declare that ``module``, once imported, registers ``provider``'s implementation of
        ``name``: the name is known (checks, choices) without importing the module, which is
        imported the first time the executor is used (its venue clients load only then)."""
        with self._lock:
            providers = self._providers.setdefault(name, {})
            if provider not in providers:
                providers[provider] = _Declared(module)

    def register(self, name: str, *, provider: str | None = None) -> Callable[[type], type]:
        """Register the decorated class as ``provider``'s implementation of ``name`` (the
        provider defaults to the top-level package of the class's module: its app)."""

        def decorator(cls: type) -> type:
            by = provider or cls.__module__.split(".")[0]
            providers = self._providers.setdefault(name, {})
            existing = providers.get(by)
            if existing is not None and not isinstance(existing, _Declared) and existing is not cls:
                raise ValueError(f"executor {name!r} is already registered by {existing!r}")
            cls.name = name
            providers[by] = cls
            return cls

        return decorator

    def providers(self, name: str) -> list[str]:
        """The apps that provide ``name``."""
        self._load()
        return sorted(self._providers.get(name, {}))

    def names(self) -> list[str]:
        self._load()
        return sorted(self._providers)

    def _chosen(self, name: str) -> type | None:
        found = self._choice(name)
        if isinstance(found, _Declared):
            with self._lock:
                import_module(found.module)  # its @register replaces the declaration
            found = self._choice(name)
            if isinstance(found, _Declared):
                raise ImproperlyConfigured(
                    f"{found.module} was declared to register executor {name!r} and did not"
                )
        return found

    def _choice(self, name: str) -> "type | _Declared | None":
        providers = self._providers.get(name) or {}
        choice = getattr(settings, "QTG_EXECUTORS", {}).get(name) or self._default(providers)
        if choice:
            return providers.get(choice)
        if len(providers) > 1:
            raise ImproperlyConfigured(
                f"executor {name!r} is provided by {', '.join(sorted(providers))}: "
                f"choose one in QTG_EXECUTORS"
            )
        return next(iter(providers.values()), None)

    @staticmethod
    def _default(providers: dict[str, type]) -> str | None:
        """The deployment's default provider (``QTG_EXECUTOR_DEFAULT_PROVIDER``: the sandbox
        or the real venues, by ``QTG_VENUES``) where it is one of several."""
        default = getattr(settings, "QTG_EXECUTOR_DEFAULT_PROVIDER", "")
        return default if len(providers) > 1 and default in providers else None

    def is_registered(self, name: str) -> bool:
        self._load()
        return self._chosen(name) is not None

    def get(self, name: str) -> Any:
        self._load()
        cls = self._chosen(name)
        if cls is None:
            raise LookupError(f"no executor registered as {name!r}")
        return cls()

    def problems(self) -> list[str]:
        """What makes the deployment's choice of executors ambiguous or impossible."""
        self._load()
        found = []
        for name, choice in sorted(getattr(settings, "QTG_EXECUTORS", {}).items()):
            if choice not in self._providers.get(name, {}):
                offered = ", ".join(sorted(self._providers.get(name, {}))) or "no installed app"
                found.append(f"QTG_EXECUTORS chooses {choice!r} for {name!r}: offered by {offered}")
        for name, providers in sorted(self._providers.items()):
            chosen = name in getattr(settings, "QTG_EXECUTORS", {}) or self._default(providers)
            if len(providers) > 1 and not chosen:
                found.append(
                    f"executor {name!r} is provided by {', '.join(sorted(providers))}: "
                    f"choose one in QTG_EXECUTORS"
                )
        return found


registry = ExecutorRegistry()
register = registry.register
is_registered = registry.is_registered
get_executor = registry.get
