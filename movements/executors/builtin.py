"""Executors that ship with QTG itself."""

from movements.executors.base import Executor
from movements.executors.registry import register


@register("manual_gate")
class ManualGateExecutor(Executor):
    """A manual gate is never dispatched: an operator releases it (``manual_gate_resume``)."""
