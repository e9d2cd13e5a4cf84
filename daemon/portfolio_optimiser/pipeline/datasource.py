"""The data source: how agents read a project, through tools, instead of having it stuffed in.

Decides: what an agent may read of a bundle and how much. The in-process function tools are the
seam the run path uses; ``build_mcp_server`` serves the same data source over MCP as an extension
point (tested, not wired into the run path). Reads go through ``safe_resolve``: nothing outside the
bundle, and never the learned layer (``type: verdict``), which reaches a run only through the fold.
Configuration is validated against ``shared/schemas/datasource.schema.json`` and fails fast.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import jsonschema
from pydantic import BaseModel, Field, create_model

from portfolio_optimiser.config import ConfigError
from portfolio_optimiser.context.errors import BundleError
from portfolio_optimiser.context.frontmatter import read_concept
from portfolio_optimiser.context.models import Project
from portfolio_optimiser.context.navigate import navigate_bundle, safe_resolve
from portfolio_optimiser.context.render import concept_figures
from portfolio_optimiser.resources import load_schema

__all__ = ["DataSource", "build_mcp_server", "datasource_tools"]

_ARGUMENTS: Final[dict[str, type[BaseModel]]] = {
    name: create_model(f"{name}_input")
    for name in ("list_cost_lines", "list_measure_options", "list_concepts")
} | {
    "read_concept": create_model(
        "read_concept_input",
        path=(str, Field(description="bundle-relative path of the concept")),
    )
}
"""Each tool's arguments, as the framework would infer them from its signature: built once, not
for every run (inferring them was 1.1 ms of a run's own time)."""


@dataclass(frozen=True)
class DataSource:
    root: Path
    project: Project
    max_concept_chars: int = 20_000
    max_list_items: int = 500

    @classmethod
    def from_config(
        cls, settings: Mapping[str, Any], *, root: Path, project: Project
    ) -> DataSource:
        validator = jsonschema.Draft202012Validator(load_schema("datasource.schema.json"))
        errors = sorted(
            validator.iter_errors(dict(settings)), key=lambda e: list(map(str, e.absolute_path))
        )
        if errors:
            path = ".".join(str(p) for p in errors[0].absolute_path) or "data_source"
            raise ConfigError(f"data_source: {path}: {errors[0].message}")
        return cls(
            root=Path(settings.get("root") or root),
            project=project,
            max_concept_chars=int(settings.get("max_concept_chars", 20_000)),
            max_list_items=int(settings.get("max_list_items", 500)),
        )

    def list_cost_lines(self) -> list[dict[str, Any]]:
        lines = [line.model_dump(exclude_none=True) for line in self.project.cost_lines]
        return lines[: self.max_list_items]

    def list_measure_options(self) -> list[dict[str, Any]]:
        options = [
            option.model_dump(exclude_none=True, mode="json")
            for option in self.project.measure_options
        ]
        return options[: self.max_list_items]

    def list_concepts(self) -> list[dict[str, str]]:
        navigation = navigate_bundle(self.root)
        return [
            {"path": c.rel, "type": c.type or "", "title": c.title}
            for c in navigation.concepts
            if c.type != "verdict"
        ][: self.max_list_items]

    def read_concept(self, path: str) -> str:
        """One concept, its figures and body, bounded; a refusal is returned as text, not raised."""
        try:
            resolved, rel = safe_resolve(self.root, "/" + path.lstrip("/"), from_rel="index.md")
        except BundleError:
            return f"refused: {path} is outside the bundle"
        if not rel.endswith(".md") or not resolved.is_file():
            return f"not found: {path} (list_concepts names the files)"
        try:
            concept = read_concept(resolved, rel)
        except BundleError as exc:
            return f"unreadable: {exc}"
        if concept.type == "verdict":
            return f"refused: {path} belongs to the learned layer"
        text = f"# {concept.title}\ntype: {concept.type}\n{concept_figures(concept)}\n\n{concept.body.strip()}\n"
        if len(text) > self.max_concept_chars:
            return text[: self.max_concept_chars] + "\n[truncated]"
        return text


def datasource_tools(source: DataSource) -> list[Any]:
    """The in-process function tools over ``source``: the run path's data access."""
    from agent_framework import tool

    @tool(
        name="list_cost_lines",
        description="List the project's cost lines (code, title, amount_nok, quantity, unit price).",
        schema=_ARGUMENTS["list_cost_lines"],
    )
    def list_cost_lines() -> list[dict[str, Any]]:
        return source.list_cost_lines()

    @tool(
        name="list_measure_options",
        description="List the project's kuttliste (known reduction options).",
        schema=_ARGUMENTS["list_measure_options"],
    )
    def list_measure_options() -> list[dict[str, Any]]:
        return source.list_measure_options()

    @tool(
        name="list_concepts",
        description="List the bundle's concepts in navigation order (path, type, title).",
        schema=_ARGUMENTS["list_concepts"],
    )
    def list_concepts() -> list[dict[str, str]]:
        return source.list_concepts()

    @tool(
        name="read_concept",
        description="Open one concept of the bundle by its path, e.g. cost/02-bygning/02.3.md.",
        schema=_ARGUMENTS["read_concept"],
    )
    def read_concept_tool(path: str) -> str:
        return source.read_concept(path)

    return [list_cost_lines, list_measure_options, list_concepts, read_concept_tool]


def build_mcp_server(source: DataSource, *, name: str = "portfolio-optimiser-bundle") -> Any:
    """The same data source served over MCP (an extension point; the run path uses the tools)."""
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError as exc:  # pragma: no cover - depends on the optional extra
        raise ImportError("build_mcp_server needs the MCP SDK: uv sync --extra mcp") from exc
    server = MCPServer(name)
    server.tool(name="list_cost_lines", description="List the project's cost lines.")(
        source.list_cost_lines
    )
    server.tool(name="list_measure_options", description="List the project's kuttliste.")(
        source.list_measure_options
    )
    server.tool(
        name="list_concepts", description="List the bundle's concepts in navigation order."
    )(source.list_concepts)
    server.tool(name="read_concept", description="Open one concept of the bundle by its path.")(
        source.read_concept
    )
    return server
