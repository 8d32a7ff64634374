"""Executors: the code that talks to venues, registered by the name route templates use."""

from movements.executors.registry import (
    ExecutorRegistry,
    get_executor,
    is_registered,
    register,
    registry,
)

__all__ = ["ExecutorRegistry", "get_executor", "is_registered", "register", "registry"]
