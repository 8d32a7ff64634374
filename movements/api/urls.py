from django.urls import path
from rest_framework.routers import SimpleRouter

from movements.api.views import MovementViewSet, RouteTemplateListView

app_name = "api"

router = SimpleRouter()
router.register("movements", MovementViewSet, basename="movement")

urlpatterns = [
    path("route-templates/", RouteTemplateListView.as_view(), name="route-template-list"),
    *router.urls,
]
