"""Money-safety tests run on the fast sandbox of the execution tests, and with its cluster of
real worker processes."""

from tests.execution.conftest import cluster, fast_sandbox  # noqa: F401  (fixtures)
