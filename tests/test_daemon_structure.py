"""The daemon's job floor keeps the shape issue 18 gave it: composed objects, small classes and
modules, and one module that knows the durable-execution engine.

No class in ``daemon/`` inherits behaviour from another class of the package (mixins spread one
object over several files); none has more than 20 methods; no module is over 400 lines; DBOS is
imported in ``durable`` alone, through its public API (no private call, no lookup of a module in
``sys.modules``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "daemon" / "portfolio_optimiser"
DAEMON = PACKAGE / "daemon"
MAX_METHODS = 20
MAX_LINES = 400


def _modules(root: Path) -> list[Path]:
    return sorted(root.rglob("*.py"))


def _classes(path: Path) -> list[ast.ClassDef]:
    return [n for n in ast.walk(ast.parse(path.read_text("utf-8"))) if isinstance(n, ast.ClassDef)]


def _package_classes() -> set[str]:
    return {c.name for path in _modules(PACKAGE) for c in _classes(path)}


def _is_error(name: str) -> bool:
    # An exception's hierarchy is how callers catch it, not an object spread over files.
    return name.endswith(("Error", "Exception"))


def test_no_class_in_the_daemon_is_spread_over_several_by_inheritance() -> None:
    ours = _package_classes()
    mixed = [
        f"{path.relative_to(PACKAGE)}: {c.name}({', '.join(ast.unparse(b) for b in c.bases)})"
        for path in _modules(DAEMON)
        for c in _classes(path)
        for base in c.bases
        if (name := ast.unparse(base).split(".")[-1]) in ours and not _is_error(name)
    ]
    assert mixed == []


def test_every_class_in_the_daemon_has_at_most_20_methods() -> None:
    large = [
        f"{path.relative_to(PACKAGE)}: {c.name} has {n} methods"
        for path in _modules(DAEMON)
        for c in _classes(path)
        if (n := sum(isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) for f in c.body))
        > MAX_METHODS
    ]
    assert large == []


def test_every_module_in_the_daemon_is_at_most_400_lines() -> None:
    long = [
        f"{path.relative_to(PACKAGE)}: {n} lines"
        for path in _modules(DAEMON)
        if (n := len(path.read_text("utf-8").splitlines())) > MAX_LINES
    ]
    assert long == []


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def test_dbos_is_imported_in_one_module() -> None:
    importers = [
        str(path.relative_to(PACKAGE))
        for path in _modules(PACKAGE)
        if any(name == "dbos" or name.startswith("dbos.") for name in _imports(path))
    ]
    assert importers == ["daemon/durable.py"]


@pytest.mark.parametrize("needle", ["_recover_pending_workflows", "sys.modules"])
def test_no_private_engine_call_and_no_module_lookup(needle: str) -> None:
    found = [
        str(path.relative_to(PACKAGE))
        for path in _modules(PACKAGE)
        if needle in path.read_text("utf-8")
    ]
    assert found == []
