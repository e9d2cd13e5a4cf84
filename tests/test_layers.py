"""The package's layers import only downwards, and the framework-free ones stay free of MAF.

The declared order (STYLE.md, "Direction": cli → daemon → pipeline → reasoning, context, never
back; README "Folders" lists the layers bottom-up: context, learning, reasoning, pipeline, outputs,
daemon, cli; ``outputs/`` renders the pipeline's ``RunResult``, ``learning/`` feeds the
pipeline's prompt through the fold and reads the context layer). Top-level modules are placed by
what they are; no document places them, so :data:`LAYERS` does, and a new one must be placed here:

| rank | unit | what it is |
|---|---|---|
| 0 | _libc | the C library's functions, looked up once: no import of the package |
| 1 | portfolio_optimiser, _atomic, _collector, _text, errors, resources, invocation | commons |
| 2 | context | bundles, the IR, the validator |
| 3 | config, persona | top-level modules that read the context layer's types |
| 4 | learning | verdicts, the fold, promotion |
| 5 | reasoning | advisors, policy, records (reads the config) |
| 6 | pipeline | the MAF pipeline |
| 7 | outputs | what a run writes |
| 8 | daemon | the inbox daemon |
| 9 | cli | the command line |
| 10 | __main__, simulation | entry points |

A module may import its own unit and units of a lower rank; units of one rank are peers and
import neither each other nor anything above. Every ``import`` and ``from … import`` counts,
absolute or relative, at module level or inside a function, and under ``if TYPE_CHECKING:`` too:
an annotation-only import is still a dependency of what the module means (``outputs/`` may name
``pipeline.outcome.RunResult`` that way because it sits above the pipeline; the pipeline may not
name an output type that way). Imports by string (``importlib.import_module``) are not seen.

Apart from the order: ``context/``, ``learning/``, ``reasoning/`` and ``outputs/`` say they import
no model framework (their package docstrings), so nothing they import when they run — directly or
through another module of the package — may be ``agent_framework`` or ``mcp``; there,
``TYPE_CHECKING`` imports do not count, since they never run. And ``shared/`` holds no code.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from .conftest import REPO
from .fresh import fresh_python

PACKAGE = REPO / "daemon" / "portfolio_optimiser"
ROOT: Final = "portfolio_optimiser"

LAYERS: Final[tuple[tuple[str, ...], ...]] = (
    ("_libc",),
    (ROOT, "_atomic", "_collector", "_text", "errors", "resources", "invocation"),
    ("context",),
    ("config", "persona"),
    ("learning",),
    ("reasoning",),
    ("pipeline",),
    ("outputs",),
    ("daemon",),
    ("cli",),
    ("__main__", "simulation"),
)
RANK: Final = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}

FRAMEWORK_FREE: Final = ("context", "learning", "reasoning", "outputs")
FRAMEWORKS: Final = ("agent_framework", "mcp")


@dataclass(frozen=True)
class Import:
    module: str
    """The absolute name of the module the statement names (``portfolio_optimiser.context.ir``
    for ``from .ir import Project`` in ``context/``; ``portfolio_optimiser.config`` for ``from
    portfolio_optimiser import config``)."""
    line: int
    typing_only: bool
    """Under ``if TYPE_CHECKING:``: read by type checkers, never run."""
    statement: str
    """The import as written, its relative part resolved."""
    names: tuple[str, ...] = ()
    """What a ``from … import`` brings in, as absolute names (some may be modules)."""


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(path: Path, package: Path = PACKAGE) -> list[Import]:
    """Every import of the file, wherever it stands, relative ones resolved to absolute names."""
    tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            typing_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    here = module_name(path, package).split(".")
    anchor = here if path.name == "__init__.py" else here[:-1]
    found: list[Import] = []
    for node in ast.walk(tree):
        typing = id(node) in typing_only
        if isinstance(node, ast.Import):
            found += [
                Import(alias.name, node.lineno, typing, f"import {alias.name}")
                for alias in node.names
            ]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            brought = tuple(f"{base}.{alias.name}" for alias in node.names)
            said = f"from {base} import {', '.join(alias.name for alias in node.names)}"
            if base == ROOT:  # ``from portfolio_optimiser import config``: the module config
                found += [Import(name, node.lineno, typing, said, (name,)) for name in brought]
            else:
                found.append(Import(base, node.lineno, typing, said, brought))
    return found


def unit_of(name: str) -> str | None:
    """The unit a module of the package belongs to (None for anything outside the package)."""
    parts = name.split(".")
    if parts[0] != ROOT:
        return None
    return ROOT if len(parts) == 1 else parts[1]


def violations(package: Path = PACKAGE) -> list[str]:
    """Each import that does not go downwards, as ``file:line: what and why``."""
    found = []
    for path in sorted(package.rglob("*.py")):
        unit = unit_of(module_name(path, package))
        assert unit is not None
        where = path.relative_to(package.parent.parent)
        if unit not in RANK:
            found.append(f"{where}: its unit {unit!r} has no place in LAYERS; place it there")
            continue
        for imp in imports(path, package):
            target = unit_of(imp.module)
            if target is None or target == unit or target not in RANK:
                continue
            if RANK[target] >= RANK[unit]:
                how = "beside" if RANK[target] == RANK[unit] else "above"
                found.append(
                    f"{where}:{imp.line}: `{imp.statement}`"
                    f"{' (under TYPE_CHECKING)' if imp.typing_only else ''}: {unit} may not "
                    f"import the layer {target}, which is {how} it"
                )
    return found


@pytest.mark.loadbearing
def test_every_import_of_the_package_goes_downwards() -> None:
    found = violations()
    assert not found, "imports against the layer order:\n" + "\n".join(found)


def test_every_layer_the_readme_lists_is_ranked_in_its_order() -> None:
    readme = (REPO / "README.md").read_text("utf-8")
    block = readme.split("the Python package portfolio_optimiser:", 1)[1].split("\nconfig/", 1)[0]
    listed = re.findall(r"^\s+(\w+)/\s", block, flags=re.MULTILINE)
    folders = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert sorted(listed) == folders  # the README lists every layer, and only layers
    assert sorted(listed, key=RANK.__getitem__) == listed  # bottom-up, as ranked here


def test_the_table_in_the_docstring_is_layers() -> None:
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \|", __doc__ or "", flags=re.MULTILINE)
    documented = tuple(tuple(u.strip() for u in units.split(",")) for _rank, units in rows)
    assert documented == LAYERS


@pytest.mark.loadbearing
def test_an_upward_import_is_named_with_its_file_line_and_layer(tmp_path: Path) -> None:
    """The check finds what it is for, in every form an import takes (it is not green by
    construction)."""
    package = tmp_path / "daemon" / ROOT
    for folder in ("context", "daemon", "pipeline", "outputs"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "daemon" / "ledger.py").write_text("")
    (package / "context" / "ir.py").write_text(
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "from portfolio_optimiser.daemon import ledger\n"  # 3: absolute, upwards
        "def later() -> None:\n"
        "    from ..pipeline import run\n"  # 5: relative, inside a function
        "if TYPE_CHECKING:\n"
        "    import portfolio_optimiser.outputs.writer\n"  # 7: annotation only
    )
    (package / "outputs" / "writer.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from portfolio_optimiser.pipeline.outcome import RunResult\n"  # downwards: allowed
    )
    (package / "persona.py").write_text("")
    (package / "config.py").write_text("from . import persona\n")  # a peer: neither is below
    found = violations(package)
    assert found == [
        f"daemon/{ROOT}/config.py:1: `from {ROOT} import persona`: config may not import the "
        "layer persona, which is beside it",
        f"daemon/{ROOT}/context/ir.py:3: `from {ROOT}.daemon import ledger`: context may not "
        "import the layer daemon, which is above it",
        f"daemon/{ROOT}/context/ir.py:5: `from {ROOT}.pipeline import run`: context may not "
        "import the layer pipeline, which is above it",
        f"daemon/{ROOT}/context/ir.py:7: `import {ROOT}.outputs.writer` (under TYPE_CHECKING): "
        "context may not import the layer outputs, which is above it",
    ]


def _closure(start: list[Path]) -> dict[str, set[str]]:
    """Every package module reachable from ``start`` by imports that run, with what each imports."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    todo = [module_name(p) for p in start]
    seen: dict[str, set[str]] = {}
    while todo:
        name = todo.pop()
        if name in seen or name not in modules:
            continue
        ran = [imp for imp in imports(modules[name]) if not imp.typing_only]
        seen[name] = {imp.module for imp in ran} | {n for imp in ran for n in imp.names}
        todo.extend(n for n in seen[name] if n in modules)
    return seen


@pytest.mark.loadbearing
@pytest.mark.parametrize("layer", FRAMEWORK_FREE)
def test_a_framework_free_layer_imports_no_model_framework_even_indirectly(layer: str) -> None:
    closure = _closure(sorted((PACKAGE / layer).rglob("*.py")))
    assert f"{ROOT}.{layer}" in closure
    offenders = {
        module: sorted(n for n in imported if n.split(".")[0] in FRAMEWORKS)
        for module, imported in closure.items()
    }
    assert {m: v for m, v in offenders.items() if v} == {}


@pytest.mark.loadbearing
@pytest.mark.parametrize("layer", FRAMEWORK_FREE)
def test_importing_a_framework_free_layer_loads_no_model_framework(layer: str) -> None:
    modules = sorted(module_name(p) for p in (PACKAGE / layer).rglob("*.py"))
    script = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in modules)
        + f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS!r}))\n"
    )
    assert fresh_python(script).strip() == "[]"


def test_the_commons_hold_no_code_at_all() -> None:
    # shared/ is pure data (schemas, the skill, examples, goldens; DESIGN §2): no code there can
    # import a framework because there is no code there. An earlier form of this test looped over
    # shared/**/*.py, of which there are none, so it could not fail.
    code = sorted(
        str(p.relative_to(REPO))
        for p in (REPO / "shared").rglob("*")
        if p.suffix in {".py", ".pyi", ".pyx", ".so", ".ipynb"}
    )
    assert code == []
    assert any((REPO / "shared").rglob("*.json")), "the commons are there"
