"""The shape of a policy's answer, shared by the apps' policies (``movements.policies``,
``reservations.policies``): a policy returns a :class:`Refusal` naming the rule that refuses an
action, or None when the action is allowed. Services raise it with :func:`enforce`; consoles
show, hide and explain with it."""

from dataclasses import dataclass, field
from typing import Any

from qtg.core.actors import Actor
from qtg.core.errors import ActionRefused, NotPermitted, QTGError

# The code of a refusal for a missing permission, whichever app's policy gives it.
PERMISSION = "permission"


@dataclass(frozen=True)
class Refusal:
    """Why an action is not allowed now, before anything is raised.

    ``code`` names the rule that refused (stable, for consoles and tests); ``error`` is the
    domain error a service raises for it, which carries the API's error code and status;
    ``message`` and ``details`` are that error's.
    """

    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)
    error: type[QTGError] = ActionRefused

    def exception(self) -> QTGError:
        return self.error(self.message, details=dict(self.details))


def enforce(refusal: Refusal | None) -> None:
    """Raise the refusal's error, if there is a refusal."""
    if refusal is not None:
        raise refusal.exception()


def lacks_permission(actor: Actor, permission: str) -> Refusal | None:
    """The actor does not hold ``permission`` ("app_label.codename"); system actors hold all."""
    if actor.has_perm(permission):
        return None
    return Refusal(
        PERMISSION,
        f"{actor} lacks the permission {permission}",
        {"permission": permission},
        error=NotPermitted,
    )
