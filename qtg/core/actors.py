"""Who acted: every state change records an actor (a user or a named system component)."""

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from qtg.core.choices import LabelledChoices


class ActorType(LabelledChoices):
    USER = "user", "User"
    SYSTEM = "system", "System"


@dataclass(frozen=True)
class Actor:
    type: str
    id: str
    user: Any = None

    @classmethod
    def system(cls, component: str) -> "Actor":
        return cls(type=ActorType.SYSTEM, id=component)

    @classmethod
    def sweep(cls, component: str) -> "Actor":
        """A periodic sweep's component, named with the worker process that ran it
        (``lease-reaper@worker:<host>:<pid>``)."""
        return cls.system(f"{component}@worker:{socket.gethostname()}:{os.getpid()}")

    @classmethod
    def for_user(cls, user: Any) -> "Actor":
        return cls(type=ActorType.USER, id=str(user.pk), user=user)

    @property
    def is_user(self) -> bool:
        return self.type == ActorType.USER

    def has_perm(self, perm: str) -> bool:
        """System components act on their own authority; users need the permission."""
        if not self.is_user:
            return True
        return bool(self.user and self.user.is_active and self.user.has_perm(perm))

    def __str__(self) -> str:
        if self.user is not None:
            return f"{self.type}:{self.user.get_username()}"
        return f"{self.type}:{self.id}"


def resolve_actor(
    actor: Actor | None = None, actor_type: str | None = None, actor_id: str | None = None
) -> Actor:
    """Accept either an Actor or the spec's (actor_type, actor_id) pair; default: the system."""
    if actor is not None:
        return actor
    return Actor(type=actor_type or ActorType.SYSTEM, id=actor_id or "system")


# The worker process, lease epoch and attempt a venue call runs under (set around every
# executor call by the worker): records written during it name them (``acting``).
_ACTING: ContextVar[str | None] = ContextVar("qtg_acting_worker", default=None)


@contextmanager
def acting_for(label: str) -> Iterator[None]:
    """Within the block, system actors are recorded as acting for ``label``."""
    token = _ACTING.set(label)
    try:
        yield
    finally:
        _ACTING.reset(token)


def acting(actor: Actor) -> Actor:
    """``actor``, naming the worker, lease epoch and attempt it acts for, if inside one, else
    the process it runs in (a sweep holds no lease): a component such as ``venues.evm`` alone
    does not say which process or attempt."""
    if actor.is_user or "@" in actor.id:
        return actor
    label = _ACTING.get() or f"worker:{socket.gethostname()}:{os.getpid()}"
    return Actor(type=actor.type, id=f"{actor.id}@{label}"[:128], user=actor.user)
