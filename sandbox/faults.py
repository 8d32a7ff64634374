"""Fault injection for the simulated venues, chosen per request in its params:
``{"sandbox": {"<node_key>": "<fault>"}}``."""

from dataclasses import dataclass

FAULTS = ("submit_timeout_landed", "submit_timeout_lost", "fail", "observe_fail", "delay", "reorg")


class UnknownFault(ValueError):
    pass


@dataclass(frozen=True)
class Fault:
    name: str = ""
    seconds: float = 0.0

    def __bool__(self) -> bool:
        return bool(self.name)

    def is_(self, name: str) -> bool:
        return self.name == name


NO_FAULT = Fault()


def parse_fault(raw: str | None) -> Fault:
    """``""`` -> no fault; ``"delay:2.5"`` -> Fault("delay", 2.5); anything unknown is refused."""
    if not raw:
        return NO_FAULT
    name, _, arg = str(raw).partition(":")
    if name not in FAULTS:
        raise UnknownFault(f"unknown sandbox fault {raw!r} (known: {', '.join(FAULTS)})")
    if name == "delay":
        try:
            seconds = float(arg)
        except ValueError:
            raise UnknownFault(f"sandbox fault {raw!r}: delay takes seconds (delay:5)") from None
        if seconds < 0:
            raise UnknownFault(f"sandbox fault {raw!r}: delay must not be negative")
        return Fault(name, seconds)
    if arg:
        raise UnknownFault(f"sandbox fault {raw!r} takes no argument")
    return Fault(name)
