"""Fault injection for the simulated venues, chosen per request in its params:
``{"sandbox": {"<node_key>": "<fault>"}}``."""

from dataclasses import dataclass

FAULTS = (
    "submit_timeout_landed",
    "submit_timeout_lost",
    "fail",
    "observe_fail",
    "delay",
    "reorg",
    "submit_delay",
    "submit_stall",
)
# Faults that take seconds (``delay:5``), and the most a fault may ask for: ``delay`` only
# postpones what the venue shows; ``submit_delay`` holds the worker inside the call, so less.
TIMED_FAULTS = ("delay", "submit_delay", "submit_stall")
MAX_FAULT_SECONDS = {"delay": 3600.0, "submit_delay": 120.0, "submit_stall": 120.0}


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
    """``""`` -> no fault; ``"delay:2.5"`` -> Fault("delay", 2.5); anything unknown is refused.

    ``delay:<s>``: the venue shows the outcome only ``s`` seconds after the call (the call
    itself answers at once: no worker waits for it).
    ``submit_delay:<s>``: the submit call itself takes ``s`` seconds after carrying the request
    out (a slow venue, to prove a worker keeps the lease of a call in progress).
    ``submit_stall:<s>``: the venue holds the request ``s`` seconds BEFORE acting on it (a
    slow queue in front of it, or a worker paused with the request in hand), then carries it
    out, unless the request's own validity has passed by then (a withdrawal's)."""
    if not raw:
        return NO_FAULT
    name, _, arg = str(raw).partition(":")
    if name not in FAULTS:
        raise UnknownFault(f"unknown sandbox fault {raw!r} (known: {', '.join(FAULTS)})")
    if name in TIMED_FAULTS:
        try:
            seconds = float(arg)
        except ValueError:
            raise UnknownFault(f"sandbox fault {raw!r}: {name} takes seconds ({name}:5)") from None
        if not 0 <= seconds <= MAX_FAULT_SECONDS[name]:  # NaN and infinity fail this too
            raise UnknownFault(
                f"sandbox fault {raw!r}: {name} takes 0 to {MAX_FAULT_SECONDS[name]:g} seconds"
            )
        return Fault(name, seconds)
    if arg:
        raise UnknownFault(f"sandbox fault {raw!r} takes no argument")
    return Fault(name)
