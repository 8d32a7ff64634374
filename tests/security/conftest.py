"""The API clients of tests/api, for the security tests that go through the API."""

from tests.api.conftest import integration, integration_client

__all__ = ["integration", "integration_client"]
