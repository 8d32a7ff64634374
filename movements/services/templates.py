"""Route templates: reviewed YAML files in the repository, loaded into versioned rows."""

from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction

from movements.compiler import load_template_file
from movements.models import RouteTemplate
from qtg.core.errors import TemplateInvalid


def route_templates_sync(*, directory: Path | None = None) -> list[RouteTemplate]:
    """Load every template file; a new version becomes a new row, an unchanged one is kept.

    A file whose content changed without a version bump is refused: a reviewed version is
    immutable once loaded, because requests refer to it.
    """
    directory = Path(directory or settings.QTG_ROUTE_TEMPLATE_DIR)
    loaded = []
    for path in sorted(directory.glob("*.yaml")):
        definition, checksum = load_template_file(path)
        existing = RouteTemplate.objects.filter(
            key=definition["key"], version=definition["version"]
        ).first()
        if existing is None:
            try:
                with transaction.atomic():
                    existing = RouteTemplate.objects.create(
                        key=definition["key"],
                        version=definition["version"],
                        checksum=checksum,
                        name=definition["name"],
                        description=definition["description"],
                        definition=definition,
                        source_path=str(path.relative_to(settings.BASE_DIR))
                        if path.is_relative_to(settings.BASE_DIR)
                        else str(path),
                    )
            except IntegrityError:
                # Another process loaded the same version at the same moment.
                existing = RouteTemplate.objects.get(
                    key=definition["key"], version=definition["version"]
                )
        if existing.checksum != checksum:
            raise TemplateInvalid(
                f"route template {definition['key']} v{definition['version']} changed since it "
                f"was loaded: bump its version",
                details={"template": definition["key"]},
            )
        loaded.append(existing)
    return loaded


def route_templates_ensure_loaded() -> None:
    """Load the template files unless every one of them already has a row.

    Loading is idempotent and each file commits on its own, so a caller that arrives while
    another process is still loading loads too rather than trust a partial table.
    """
    files = len(list(Path(settings.QTG_ROUTE_TEMPLATE_DIR).glob("*.yaml")))
    if RouteTemplate.objects.values("key").distinct().count() < files:
        route_templates_sync()


def route_template_current(key: str) -> RouteTemplate | None:
    """The newest active version of a template (the files are loaded on first use)."""
    newest = RouteTemplate.objects.filter(key=key, is_active=True).order_by("-version")
    template = newest.first()
    if template is None:
        route_templates_ensure_loaded()
        template = newest.first()
    return template
