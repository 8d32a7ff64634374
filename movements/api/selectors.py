"""Reads behind the API that load the route templates (a service) on first use; the
movement reads are in ``movements.selectors``."""

from movements.models import (
    RouteTemplate,
)
from movements.services.templates import route_templates_ensure_loaded


def route_templates_current() -> list[RouteTemplate]:
    """The newest active version of every template (the files are loaded on first use)."""
    route_templates_ensure_loaded()
    newest: dict[str, RouteTemplate] = {}
    for template in RouteTemplate.objects.filter(is_active=True).order_by("key", "-version"):
        newest.setdefault(template.key, template)
    return list(newest.values())
