"""Requests per client: per token user, or per address for requests without one. The rates
are read per request (``QTG_API_THROTTLE_USER`` / ``_ANON``), counted in Django's cache."""

from django.conf import settings
from rest_framework.throttling import AnonRateThrottle, UserRateThrottle


class ClientRateThrottle(UserRateThrottle):
    def get_rate(self) -> str:
        return settings.QTG_API_THROTTLE_USER


class AnonymousRateThrottle(AnonRateThrottle):
    def get_rate(self) -> str:
        return settings.QTG_API_THROTTLE_ANON


class WebhookTestThrottle(UserRateThrottle):
    """Test deliveries per client (``QTG_WEBHOOK_TEST_RATE``): a client cannot flood the
    webhook queue, nor a slow receiver of its own, with them."""

    scope = "webhook_test"

    def get_rate(self) -> str:
        return settings.QTG_WEBHOOK_TEST_RATE
