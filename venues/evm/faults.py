"""A worker process that dies at a chosen point of a transfer (the exactly-once tests kill a
real worker between signing and broadcasting, and between broadcasting and recording it).

``QTG_EVM_CRASH_AT=<point>`` in a worker's environment makes it SIGKILL itself there;
``QTG_EVM_PAUSE_AT=<point>`` makes it stop itself there (SIGSTOP: a worker paused past its
lease, until the test sends SIGCONT). ``<point>@<chain>`` does so only for a transaction on
that chain (a CCTP mint on the destination, not the burn before it). Both are ignored under
``QTG_VENUES=live``: no production process can be told to die or stop this way.
"""

import os
import signal

from django.conf import settings

POINTS = ("after_sign", "before_broadcast", "after_broadcast")


def crash_point(name: str, chain: str = "") -> None:
    if name not in POINTS:
        raise ValueError(f"no crash point {name!r}")
    if settings.QTG_VENUES == "live":
        return
    here = {name, f"{name}@{chain}"} if chain else {name}
    if os.environ.get("QTG_EVM_CRASH_AT") in here:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("QTG_EVM_PAUSE_AT") in here:
        os.kill(os.getpid(), signal.SIGSTOP)
