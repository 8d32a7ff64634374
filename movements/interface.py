"""The former name of ``movements.public``, kept only for ``venues/evm`` (``tx/gaps``, ``watch``),
which other work is changing now; it moves to ``movements.public`` with that work, and then
this module goes. Nothing new imports it (tests/architecture lists who may)."""

from movements.public import (
    TERMINAL_NODE_STATES,
    TERMINAL_REQUEST_STATES,
    NodeState,
    node_conclusion_contradicted,
)

__all__ = [
    "TERMINAL_NODE_STATES",
    "TERMINAL_REQUEST_STATES",
    "NodeState",
    "node_conclusion_contradicted",
]
