"""Route templates: reviewed YAML files in the repository, loaded into versioned rows."""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from django.conf import settings

from movements.compiler import load_template_file
from movements.models import RouteTemplate
from qtg.core.errors import TemplateInvalid


def route_templates_sync(*, directory: Path | None = None) -> list[RouteTemplate]:
    """Load every template file; a new version becomes a new row, an unchanged one is kept.

    A file whose content changed without a version bump is refused: a reviewed version is
    immutable once loaded, because requests refer to it.
    """
    directory = Path(directory or settings.QTG_ROUTE_TEMPLATE_DIR)
    files = [(path, *load_template_file(path)) for path in sorted(directory.glob("*.yaml"))]
    wanted = {(definition["key"], definition["version"]) for _, definition, _ in files}
    rows = _rows(wanted)
    missing = [
        RouteTemplate(
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
        for path, definition, checksum in files
        if (definition["key"], definition["version"]) not in rows
    ]
    if missing:
        # In one statement; a version another process loaded at the same moment is kept
        # (the unique key and version), and compared below like any loaded one.
        RouteTemplate.objects.bulk_create(missing, ignore_conflicts=True)
        rows = _rows(wanted)
    loaded = []
    for _, definition, checksum in files:
        existing = rows[(definition["key"], definition["version"])]
        if existing.checksum != checksum:
            raise TemplateInvalid(
                f"route template {definition['key']} v{definition['version']} changed since it "
                f"was loaded: bump its version",
                details={"template": definition["key"]},
            )
        loaded.append(existing)
    return loaded


def _rows(wanted: set[tuple[str, int]]) -> dict[tuple[str, int], RouteTemplate]:
    """The loaded rows of these (key, version) pairs, by pair."""
    found = RouteTemplate.objects.filter(key__in={key for key, _ in wanted})
    return {(row.key, row.version): row for row in found if (row.key, row.version) in wanted}


def route_templates_ensure_loaded() -> None:
    """Load the template files unless every one of them already has a row.

    Loading is idempotent and each file commits on its own, so a caller that arrives while
    another process is still loading loads too rather than trust a partial table.
    """
    files = len(list(Path(settings.QTG_ROUTE_TEMPLATE_DIR).glob("*.yaml")))
    if RouteTemplate.objects.values("key").distinct().count() < files:
        route_templates_sync()


_READ_ONCE: ContextVar[dict[str, RouteTemplate] | None] = ContextVar(
    "qtg_route_templates_read_once", default=None
)


@contextmanager
def route_templates_read_once() -> Iterator[None]:
    """Within the block, ``route_template_current`` reads a template once: the API's
    validation of the key and the create it precedes see the same version with one query."""
    token = _READ_ONCE.set({})
    try:
        yield
    finally:
        _READ_ONCE.reset(token)


def route_template_current(key: str) -> RouteTemplate | None:
    """The newest active version of a template (the files are loaded on first use)."""
    read = _READ_ONCE.get()
    if read is not None and key in read:
        return read[key]
    newest = RouteTemplate.objects.filter(key=key, is_active=True).order_by("-version")
    template = newest.first()
    if template is None:
        route_templates_ensure_loaded()
        template = newest.first()
    if read is not None and template is not None:
        read[key] = template
    return template
