"""A table of cost lines in one concept (``type: cost-lines``): read as the lines themselves, every
problem named with its file line and column, all at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from portfolio_optimiser.context.errors import IRError
from portfolio_optimiser.context.ir import load_ir_projections


def _bundle(root: Path, table: str, *, base: int, frontmatter: str = "") -> Path:
    root.mkdir()
    (root / "index.md").write_text("# Nordvik\n\n* [Project](project.md)\n", "utf-8")
    (root / "project.md").write_text(
        "---\ntype: project\nid: nordvik\nname: Nordvik\ncurrency: NOK\n"
        f"base_estimate_nok: {base}\n---\n",
        "utf-8",
    )
    (root / "cost").mkdir()
    (root / "cost" / "2.md").write_text(
        f"---\ntype: cost-lines\ntitle: 2 Bygning\n{frontmatter}---\n\n# 2 Bygning\n\n{table}",
        "utf-8",
    )
    return root


@pytest.mark.loadbearing
def test_each_row_of_the_table_is_a_cost_line(tmp_path: Path) -> None:
    table = (
        "| code | title | quantity | unit | unit_price_nok | amount_nok | imported_from |\n"
        "|---|---|---:|---|---:|---:|---|\n"
        "| 21 | Grunn \\| fundamenter | 1450.5 | m2 | 2410 | 3495705 | k.csv, row 6 |\n"
        "| 22 | Bæresystemer | | | | 13735800 | k.csv, row 7 |\n"
        "\nText after the table is prose.\n"
    )
    project = load_ir_projections(
        _bundle(tmp_path / "b", table, base=17231505, frontmatter="post: true\n")
    )
    got = {
        line.code: (line.title, line.quantity, line.unit_price_nok, line.amount_nok, line.post)
        for line in project.cost_lines
    }
    assert got == {
        "21": ("Grunn | fundamenter", 1450.5, 2410, 3495705, True),
        "22": ("Bæresystemer", None, None, 13735800, True),
    }
    assert project.line("21") is not None and project.line("21").imported_from == "k.csv, row 6"  # type: ignore[union-attr]
    assert {line.source for line in project.cost_lines} == {"cost/2.md"}


def test_every_problem_of_a_table_is_named_with_its_line_and_column(tmp_path: Path) -> None:
    table = (
        "| code | title | amount_nok | min_nok | max_nok |\n"
        "|---|---|---|---|---|\n"
        "| 21 | Grunn | 3 495 705 | | |\n"
        "| | Uten kode | 100 | | |\n"
        "| 23 | For få celler |\n"
        "| 24 | Innervegger | 500 | 900 | 400 |\n"
        "| 25 | Dekker | 100 | | |\n"
        "| 25 | Igjen | 100 | | |\n"
    )
    with pytest.raises(IRError) as refused:
        load_ir_projections(_bundle(tmp_path / "b", table, base=1))
    text = str(refused.value)
    assert "cost/2.md line 10 (code 21) column amount_nok: '3 495 705' is not a number" in text
    assert "cost/2.md line 11 column code: is empty; every row needs its code" in text
    assert "cost/2.md line 12: has 2 cells, the header 5" in text
    assert "cost/2.md line 13 (code 24): min_nok, likely_nok and max_nok must be in rising" in text
    assert "cost line code '25' is also used by cost/2.md" in text


def test_a_column_that_is_no_field_is_named_not_ignored(tmp_path: Path) -> None:
    table = "| code | title | amount |\n|---|---|---|\n| 21 | Grunn | 100 |\n"
    with pytest.raises(IRError) as refused:
        load_ir_projections(_bundle(tmp_path / "b", table, base=100))
    assert "cost/2.md line 8 column 'amount': is not a cost-line field; write one of code" in str(
        refused.value
    )


def test_a_table_concept_without_a_table_says_how_to_write_one(tmp_path: Path) -> None:
    with pytest.raises(IRError) as refused:
        load_ir_projections(_bundle(tmp_path / "b", "No table here.\n", base=0))
    assert "cost/2.md: a cost-lines concept has no table" in str(refused.value)


def test_the_tables_title_is_not_every_rows_title(tmp_path: Path) -> None:
    table = "| code | title | amount_nok |\n|---|---|---|\n| 21 | | 100 |\n"
    project = load_ir_projections(
        _bundle(tmp_path / "b", table, base=100, frontmatter="unit: m2\n")
    )
    [line] = project.cost_lines
    assert (line.title, line.unit) == ("", "m2")
