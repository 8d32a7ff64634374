from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularSwaggerView

from access.one_time import one_time_secret_view
from ops import health, home
from ops.metrics import metrics_view
from qtg.api_docs import DOCS_VIEW_OPTIONS, SchemaView

# The console's site (its header, "View site" leading to its home, the sidebar grouped by task)
# is qtg.admin_site.QTGAdminSite; QTG serves no page at /.
urlpatterns = [
    # Under /admin/ (the console's session and its second-factor middleware), before the site.
    path("admin/one-time-secret/<str:ticket>/", one_time_secret_view, name="one-time-secret"),
    # The operations home in place of Django's stock index (same URL, so admin:index leads
    # to it), and its live part, fetched by the page to update in place.
    path("admin/", admin.site.admin_view(home.home), name="qtg-home"),
    path("admin/home/live/", admin.site.admin_view(home.home_live), name="qtg-home-live"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("movements.api.urls")),
    path("api/v1/", include("callbacks.urls")),
    path("api/schema/", SchemaView.as_view(**DOCS_VIEW_OPTIONS), name="api-schema"),
    path(
        "api/docs/",
        SpectacularSwaggerView.as_view(url_name="api-schema", **DOCS_VIEW_OPTIONS),
        name="api-docs",
    ),
    path("health/live", health.live, name="health-live"),
    path("health/ready", health.ready, name="health-ready"),
    path("health/", health.ready, name="health"),
    path("metrics", metrics_view, name="metrics"),
]

# Django's refusals before any view (an unknown Host, an unhandled failure in a middleware):
# under /api/ a problem document like every other answer, elsewhere Django's own page.
handler400 = "movements.api.exceptions.bad_request"
handler403 = "movements.api.exceptions.permission_denied"
handler404 = "movements.api.exceptions.page_not_found"
handler500 = "movements.api.exceptions.server_error"
