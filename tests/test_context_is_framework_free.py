"""The context layer and the commons never import a model framework (DESIGN §2, §4 step 1).

The same bundles, IR and validator must serve any agent stack, so ``context/`` (and the small
modules it uses) may not import ``agent_framework`` or ``mcp``, directly or through another module
of the package, and ``shared/`` holds no code that does.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

PACKAGE = REPO / "daemon" / "portfolio_optimiser"
FORBIDDEN = ("agent_framework", "mcp")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports, relative imports resolved."""
    tree = ast.parse(path.read_text("utf-8"))
    package = _module_name(path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _closure(start: list[Path]) -> dict[str, set[str]]:
    """Every package module reachable from ``start``, with what it imports."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    todo = [_module_name(p) for p in start]
    seen: dict[str, set[str]] = {}
    while todo:
        name = todo.pop()
        if name in seen or name not in modules:
            continue
        seen[name] = _imports(modules[name])
        todo.extend(n for n in seen[name] if n in modules)
    return seen


@pytest.mark.loadbearing
def test_context_layer_imports_no_model_framework_even_indirectly() -> None:
    closure = _closure(sorted((PACKAGE / "context").rglob("*.py")))
    assert "portfolio_optimiser.context.navigate" in closure
    offenders = {
        module: sorted(n for n in imported if n.split(".")[0] in FORBIDDEN)
        for module, imported in closure.items()
    }
    assert {m: v for m, v in offenders.items() if v} == {}


@pytest.mark.loadbearing
def test_importing_the_context_layer_loads_no_model_framework() -> None:
    modules = sorted(_module_name(p) for p in (PACKAGE / "context").rglob("*.py"))
    script = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in modules)
        + f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_the_commons_hold_no_code_at_all() -> None:
    # shared/ is pure data (schemas, the skill, examples, goldens; DESIGN §2): no code there can
    # import a framework because there is no code there. The earlier form of this test looped over
    # shared/**/*.py, of which there are none, so it could not fail.
    code = sorted(
        str(p.relative_to(REPO))
        for p in (REPO / "shared").rglob("*")
        if p.suffix in {".py", ".pyi", ".pyx", ".so", ".ipynb"}
    )
    assert code == []
    assert any((REPO / "shared").rglob("*.json")), "the commons are there"
