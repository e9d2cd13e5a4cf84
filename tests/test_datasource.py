"""The data source: tools in the run path, the same data over MCP, config that fails fast."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from mcp import Client

from portfolio_optimiser.config import ConfigError
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.pipeline.datasource import DataSource, build_mcp_server, datasource_tools

from .pipeline_helpers import small_bundle, write


@pytest.fixture
def source(tmp_path: Path) -> DataSource:
    root = small_bundle(tmp_path / "b")
    write(root, "v.md", "---\ntype: verdict\n---\nLEARNED\n")
    write(tmp_path, "outside.md", "---\ntype: note\n---\nOUTSIDE\n")
    return DataSource.from_config(
        {"kind": "bundle", "max_concept_chars": 400}, root=root, project=load_ir_projections(root)
    )


def test_the_tools_read_the_project(source: DataSource) -> None:
    assert [line["code"] for line in source.list_cost_lines()] == ["01", "02.3"]
    assert source.list_measure_options()[0]["id"] == "k-01"
    assert "unit_price_nok: 6000" in source.read_concept("cost/02.3.md")
    assert [c["path"] for c in source.list_concepts()][:2] == ["project.md", "cost/02.3.md"]


@pytest.mark.loadbearing
@pytest.mark.parametrize("path", ["../outside.md", "/../outside.md", "../../etc/passwd"])
def test_a_tool_never_reads_outside_the_bundle(source: DataSource, path: str) -> None:
    text = source.read_concept(path)
    assert text.startswith("refused") or text.startswith("not found")
    assert "OUTSIDE" not in text


@pytest.mark.loadbearing
def test_a_tool_never_reads_the_learned_layer(source: DataSource) -> None:
    assert "LEARNED" not in source.read_concept("v.md")


def test_a_long_concept_is_bounded(source: DataSource) -> None:
    write(source.root, "long.md", "---\ntype: note\n---\n" + "x" * 5000)
    assert source.read_concept("long.md").endswith("[truncated]")


def test_the_run_s_function_tools_read_through_the_data_source_and_say_their_arguments(
    source: DataSource,
) -> None:
    tools = {t.name: t for t in datasource_tools(source)}
    assert sorted(tools) == [
        "list_concepts",
        "list_cost_lines",
        "list_measure_options",
        "read_concept",
    ]
    assert tools["read_concept"].parameters() == {
        "properties": {
            "path": {
                "description": "bundle-relative path of the concept",
                "title": "Path",
                "type": "string",
            }
        },
        "required": ["path"],
        "title": "read_concept_input",
        "type": "object",
    }
    for name in ("list_concepts", "list_cost_lines", "list_measure_options"):
        assert tools[name].parameters() == {
            "properties": {},
            "title": f"{name}_input",
            "type": "object",
        }

    async def call(name: str, **arguments: str) -> str:
        result = await tools[name].invoke(arguments=arguments)
        return "".join(str(getattr(part, "text", "") or "") for part in result)

    assert "unit_price_nok: 6000" in asyncio.run(call("read_concept", path="cost/02.3.md"))
    assert '"02.3"' in asyncio.run(call("list_cost_lines"))
    with pytest.raises(Exception, match="path"):
        asyncio.run(call("read_concept"))


@pytest.mark.parametrize(
    ("settings", "needle"),
    [
        ({"kind": "sql"}, "kind"),
        ({"kind": "bundle", "max_concept_chars": 10}, "max_concept_chars"),
        ({"kind": "bundle", "colour": "red"}, "colour"),
        ({}, "kind"),
    ],
)
def test_a_bad_data_source_config_fails_fast(
    tmp_path: Path, settings: dict[str, object], needle: str
) -> None:
    root = small_bundle(tmp_path / "b")
    with pytest.raises(ConfigError, match=needle):
        DataSource.from_config(settings, root=root, project=load_ir_projections(root))


def test_the_same_data_source_is_served_over_mcp(source: DataSource) -> None:
    async def talk() -> tuple[list[str], str]:
        async with Client(build_mcp_server(source)) as client:
            tools = await client.list_tools()
            result = await client.call_tool("read_concept", {"path": "cost/02.3.md"})
            text = "".join(getattr(part, "text", "") for part in result.content)
            return sorted(t.name for t in tools.tools), text

    names, text = asyncio.run(talk())
    assert names == ["list_concepts", "list_cost_lines", "list_measure_options", "read_concept"]
    assert "unit_price_nok: 6000" in text
