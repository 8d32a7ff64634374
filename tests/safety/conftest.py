"""Money-safety tests run on the fast sandbox of the execution tests."""

from tests.execution.conftest import fast_sandbox  # noqa: F401  (autouse)
