from django.urls import path
from rest_framework.routers import SimpleRouter

from movements.api.views import (
    MovementViewSet,
    RouteTemplateListView,
    TemplateListView,
    VenueListView,
)

app_name = "api"

router = SimpleRouter()
router.register("movements", MovementViewSet, basename="movement")

urlpatterns = [
    path("route-templates/", RouteTemplateListView.as_view(), name="route-template-list"),
    path("templates/", TemplateListView.as_view(), name="template-list"),
    path("venues/", VenueListView.as_view(), name="venue-list"),
    *router.urls,
]
