"""The apps depend on each other one way only: qtg.core <- movements <- reservations, callbacks,
sandbox, venues <- ops, notifications. Read from the source (every import, including those
inside functions), so a new import that bends the rule fails here rather than in a reviewer's
head."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPS = ("movements", "reservations", "callbacks", "sandbox", "venues", "ops", "notifications")
# What reservations, callbacks and venues may import from movements: what it offers
# (``public``), the ports they fill (``ports``) and the executor interface (for venue
# implementations). The sandbox, an app of demo venues that also seeds
# the demo's movements, is above movements and may use its services.
MOVEMENTS_INTERFACE = ("movements.public", "movements.ports", "movements.executors")


def imports_of(package: str) -> list[tuple[str, int, str]]:
    """(file, line, imported module) for every import in ``package``, migrations aside."""
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        if "migrations" in path.parts:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            rel = str(path.relative_to(ROOT))
            found.extend((rel, node.lineno, name) for name in names)
    return found


def top(module: str) -> str:
    return module.split(".")[0]


def test_the_kernel_depends_on_no_app():
    offending = [
        i
        for i in imports_of("qtg/core")
        if top(i[2]) in (*APPS, "qtg") and not i[2].startswith("qtg.core")
    ]
    assert offending == []


def test_movements_never_imports_the_apps_that_depend_on_it():
    offending = [i for i in imports_of("movements") if top(i[2]) in APPS[1:]]
    assert offending == []


@pytest.mark.parametrize("app", ["reservations", "callbacks", "venues"])
def test_reservations_and_callbacks_use_only_the_movements_interface(app):
    offending = [
        i
        for i in imports_of(app)
        if top(i[2]) == "movements"
        and i[2] != "movements"
        and not i[2].startswith(MOVEMENTS_INTERFACE)
    ]
    assert offending == []


def test_the_former_movements_interface_is_gone_for_good():
    """``movements/interface.py`` was both the port movements needs and the facade it offers
    (and so imported the API views lazily): it became ``ports`` and ``public``. Nothing may
    bring it back, as a module or a package, nor import it."""
    assert not (ROOT / "movements" / "interface.py").exists()
    assert not (ROOT / "movements" / "interface").exists()
    importers = [
        i
        for package in (*APPS, "access", "qtg", "standins", "tests")
        for i in imports_of(package)
        if i[2] == "movements.interface" or i[2].startswith("movements.interface.")
    ]
    assert importers == []


def test_the_app_graph_has_no_cycle():
    edges = {app: set() for app in APPS}
    for app in APPS:
        edges[app] = {top(name) for _, _, name in imports_of(app) if top(name) in APPS} - {app}
    # Kahn's algorithm: every app must come out.
    remaining = {app: set(deps) for app, deps in edges.items()}
    while remaining:
        free = [app for app, deps in remaining.items() if not deps]
        assert free, f"import cycle among {sorted(remaining)}: {remaining}"
        for app in free:
            del remaining[app]
        for deps in remaining.values():
            deps.difference_update(free)


@pytest.mark.parametrize("app", APPS)
def test_services_never_import_their_tasks(app):
    """Tasks are thin wrappers over services; a service that queues a task names it."""
    offending = [
        i
        for i in imports_of(app)
        if ("services" in i[0] or i[0].endswith(("public.py", "ports.py"))) and ".tasks" in i[2]
    ]
    assert offending == []


@pytest.mark.parametrize("app", [app for app in APPS if app != "ops"])
def test_no_app_imports_ops_which_reads_them_all(app):
    """Operability (health, metrics, logging) sits on top: the domain never depends on it."""
    assert [i for i in imports_of(app) if top(i[2]) == "ops"] == []


# Entry points that parse input and call one service: they write no row themselves.
WRITING_CALLS = {"save", "update", "delete", "create", "get_or_create", "update_or_create"}


@pytest.mark.parametrize("path", ["callbacks/api.py", "callbacks/admin.py"])
def test_the_webhook_entry_points_write_through_the_services(path):
    """A subscription is created, changed, deactivated and its secret rotated by
    ``callbacks.services`` (each with its audit record), never saved by a view or the admin."""
    tree = ast.parse((ROOT / path).read_text())
    offending = [
        (node.lineno, node.func.attr)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in WRITING_CALLS
    ]
    assert offending == []
