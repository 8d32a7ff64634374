from django.urls import path
from rest_framework.routers import SimpleRouter

from callbacks.api import EventFeedView, WebhookViewSet

router = SimpleRouter()
router.register("webhooks", WebhookViewSet, basename="webhook")

urlpatterns = [
    path("events/", EventFeedView.as_view(), name="event-feed"),
    *router.urls,
]
