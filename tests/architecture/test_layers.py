"""Layers the README's architecture section names, read from the source (every runtime import,
including those inside functions; ``if TYPE_CHECKING:`` blocks aside): the apps in one order,
no product module leaning on the test-support stand-ins, no import loop inside movements, the
layers inside movements (entry points -> services -> rules), and rule modules that never touch
a model."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Bottom to top: a module may import its own layer and those below it, never one above.
LAYERS = (
    ("qtg/core",),
    ("access",),
    ("movements",),
    ("reservations", "callbacks", "venues"),
    ("sandbox",),
    ("ops", "notifications"),
)
PRODUCT = [package for layer in LAYERS for package in layer] + ["qtg"]
# Inside movements, top to bottom: entry points (parse, call one service, present) -> services
# (the only writers) -> rules (pure). What movements offers the other apps (``public``) and
# its app wiring (``apps``) sit beside the entry points.
ENTRY_POINTS = ("movements.admin", "movements.api", "movements.tasks", "movements.management")
SERVICES = "movements.services"
BESIDE_ENTRY_POINTS = ("movements/apps.py", "movements/public.py")
# Pure rules: facts in, answers out, no database.
RULE_MODULES = (
    "movements/states.py",
    "movements/policies.py",
    "movements/services/derivation.py",
    "movements/services/execution/outcomes.py",
    "venues/solana/fate.py",
)


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_in(path: Path) -> list[str]:
    """The modules (and ``module.name``) ``path`` imports at run time, relative ones resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = []
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.append(module)
            found.extend(f"{module}.{alias.name}" for alias in node.names)
    return found


def sources(package: str) -> list[Path]:
    return [p for p in sorted((ROOT / package).rglob("*.py")) if "migrations" not in p.parts]


def layer_of(module: str) -> int | None:
    path = module.replace(".", "/")
    for index, layer in enumerate(LAYERS):
        if any(path == package or path.startswith(package + "/") for package in layer):
            return index
    return None


@pytest.mark.parametrize("layer", range(len(LAYERS)), ids=["/".join(lay) for lay in LAYERS])
def test_no_layer_imports_one_above_it(layer):
    offending = [
        (str(path.relative_to(ROOT)), name)
        for package in LAYERS[layer]
        for path in sources(package)
        for name in imports_in(path)
        if (layer_of(name) or 0) > layer
    ]
    assert offending == []


def standin_importers() -> set[str]:
    return {
        str(path.relative_to(ROOT))
        for package in PRODUCT
        for path in sources(package)
        if any(name.split(".")[0] == "standins" for name in imports_in(path))
    }


def test_no_product_module_imports_the_standins():
    """Local mode starts them from their own entry (``python -m standins.local``), which plugs
    them into movements' port for local services; the product never names them."""
    assert standin_importers() == set()


def movements_graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in sources("movements")}

    def owner(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    return {
        module: {owner(name) for name in imports_in(path) if owner(name)} - {module}
        for module, path in paths.items()
    }


def test_movements_has_no_import_cycle():
    """A loop hidden behind an import inside a function is still a loop: none, at any depth."""
    graph = movements_graph()
    done: set[str] = set()
    cycles = []

    def visit(module: str, trail: list[str]) -> None:
        if module in trail:
            cycles.append([*trail[trail.index(module) :], module])
            return
        if module in done:
            return
        for target in sorted(graph[module]):
            visit(target, [*trail, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    assert cycles == []


def _imports_from(path: Path, packages: tuple[str, ...]) -> list[str]:
    return [
        name
        for name in imports_in(path)
        if any(name == package or name.startswith(package + ".") for package in packages)
    ]


def test_movements_services_import_no_entry_point():
    offending = [
        (str(path.relative_to(ROOT)), name)
        for path in sources("movements/services")
        for name in _imports_from(path, ENTRY_POINTS)
    ]
    assert offending == []


def test_below_the_services_movements_imports_no_service_and_no_entry_point():
    """Models, states, selectors, policies, the compiler, the executor interface, the ports:
    none of them reaches up into a service or an entry point."""
    above = (*ENTRY_POINTS, SERVICES)
    offending = [
        (rel, name)
        for path in sources("movements")
        if not (rel := str(path.relative_to(ROOT))).startswith(
            tuple(name.replace(".", "/") for name in above)
        )
        and rel not in BESIDE_ENTRY_POINTS
        for name in _imports_from(path, above)
    ]
    assert offending == []


@pytest.mark.parametrize("path", RULE_MODULES)
def test_rule_modules_import_no_service_and_no_entry_point(path):
    own = module_name(ROOT / path)
    offending = [
        name
        for name in _imports_from(ROOT / path, (*ENTRY_POINTS, SERVICES))
        if name != own and not name.startswith(own + ".")
    ]
    assert offending == []


def _is_model_import(name: str) -> bool:
    return name.split(".")[-1] == "models" or ".models." in name or name.startswith("django.db")


def _product_file(name: str) -> Path | None:
    """The product module ``name`` (or the module holding ``name``) as a file, if ours."""
    while name:
        if name.split(".")[0] in {p.split("/")[0] for p in PRODUCT}:
            for candidate in (
                ROOT / f"{name.replace('.', '/')}.py",
                ROOT / name.replace(".", "/") / "__init__.py",
            ):
                if candidate.exists():
                    return candidate
        name = name.rpartition(".")[0]
    return None


def model_imports_reached(path: Path) -> list[tuple[str, str]]:
    """(module, import) for every model or ``django.db`` import that ``path`` makes, directly or
    through the product modules it imports (at run time), at any depth."""
    seen: set[Path] = set()
    stack, found = [path], []
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        for name in imports_in(current):
            if _is_model_import(name):
                found.append((str(current.relative_to(ROOT)), name))
            elif (target := _product_file(name)) is not None:
                stack.append(target)
    return sorted(set(found))


@pytest.mark.parametrize("path", RULE_MODULES)
def test_rule_modules_import_no_models(path):
    """Not even a model's choices, nor through a module of ours: a rule compares with the pure
    enums (``movements/choices.py``, ``qtg/core/choices.py``) and names rows only for the type
    checker."""
    assert model_imports_reached(ROOT / path) == []
