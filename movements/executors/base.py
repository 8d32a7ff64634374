"""The executor interface. Executors talk to venues and return results; they never write state."""


class Executor:
    """Base class for executors; the worker maps their results and errors to node transitions."""

    name: str = ""
