"""One declared home for configuration (qtg/configuration.py): every environment variable the
code reads is declared there, nothing declared is unread, and docs/configuration.md is the
table as generated now."""

import ast
from pathlib import Path

from qtg.configuration import BY_NAME, render_markdown

ROOT = Path(__file__).resolve().parents[2]
# Code that is not the product's: the suite, benchmarks, the stand-ins (their own processes).
NOT_PRODUCT = {"tests", "bench", "standins", "node_modules", "migrations", ".venv"}
READERS = {
    "os.environ.get",
    "os.getenv",
    "env",
    "env_bool",
    "os.environ.setdefault",
    "environ.get",
}


def environment_reads() -> dict[str, set[str]]:
    """Each variable name read literally anywhere in the product's code, with where."""
    found: dict[str, set[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if NOT_PRODUCT & set(rel.parts) or rel.parts[0].startswith(".venv"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            name = None
            if isinstance(node, ast.Call) and ast.unparse(node.func) in READERS and node.args:
                name = getattr(node.args[0], "value", None)
            elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
                name = getattr(node.slice, "value", None)
            if isinstance(name, str):
                found.setdefault(name, set()).add(str(rel))
    return found


def test_every_environment_variable_read_is_declared():
    undeclared = {name: sorted(where) for name, where in environment_reads().items()}
    for name in BY_NAME:
        undeclared.pop(name, None)
    assert undeclared == {}, "declare these in qtg/configuration.py"


def test_every_declared_variable_is_read_somewhere():
    assert sorted(set(BY_NAME) - set(environment_reads())) == []


def test_docs_configuration_md_is_current():
    current = (ROOT / "docs" / "configuration.md").read_text()

    assert current == render_markdown(), (
        "regenerate: python -m qtg.configuration > docs/configuration.md"
    )


def test_settings_read_the_environment_only_through_the_table():
    import pytest

    from qtg.configuration import UndeclaredVariable, env

    settings_source = (ROOT / "qtg" / "settings.py").read_text()
    assert "os.environ.get(" not in settings_source and "os.getenv(" not in settings_source
    with pytest.raises(UndeclaredVariable, match="QTG_NOT_DECLARED"):
        env("QTG_NOT_DECLARED")
