from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from ops.health import HealthView
from ops.metrics import metrics_view
from qtg.api_docs import DOCS_VIEW_OPTIONS

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("movements.api.urls")),
    path("api/v1/", include("callbacks.urls")),
    path("api/schema/", SpectacularAPIView.as_view(**DOCS_VIEW_OPTIONS), name="api-schema"),
    path(
        "api/docs/",
        SpectacularSwaggerView.as_view(url_name="api-schema", **DOCS_VIEW_OPTIONS),
        name="api-docs",
    ),
    path("health/", HealthView.as_view(), name="health"),
    path("metrics", metrics_view, name="metrics"),
]
