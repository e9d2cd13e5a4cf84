"""A csv cost breakdown becomes a bundle (issue 17, first source): every figure kept exactly, how
the file was read stated, every problem of a bad file in one report, nothing half-imported."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
import structlog

from portfolio_optimiser.cli import main
from portfolio_optimiser.config import load_config
from portfolio_optimiser.context.frontmatter import read_concept
from portfolio_optimiser.context.imports import (
    ImportRefused,
    MappingNeeded,
    read_estimate,
    write_bundle,
)
from portfolio_optimiser.context.imports.numbers import NumberFormat, parse_number
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.daemon.once import run_once
from portfolio_optimiser.daemon.workspace import Workspace

from .estimates import imported_from, kalkyle_csv, lines


def test_a_semicolon_csv_with_decimal_commas_keeps_every_figure(tmp_path: Path) -> None:
    source = kalkyle_csv(tmp_path / "nordvik kalkyle.csv")
    (tmp_path / "nordvik kalkyle.toml").write_text(
        'id = "nordvik-school"\nname = "Nordvik skole"\ncategory = "school"\n', "utf-8"
    )
    bundle = write_bundle(read_estimate(source), tmp_path)
    project = load_ir_projections(bundle)
    assert (project.id, project.name, project.category) == (
        "nordvik-school",
        "Nordvik skole",
        "school",
    )
    got = {
        line.code: (line.title, line.quantity, line.unit, line.unit_price_nok, line.amount_nok)
        for line in project.cost_lines
    }
    want = {
        line.code: (
            line.title,
            None if line.quantity is None else float(line.quantity),
            line.unit,
            None if line.unit_price is None else float(line.unit_price),
            float(line.amount),
        )
        for line in lines()
    }
    assert {
        k: tuple(None if v is None else (float(v) if isinstance(v, int | float) else v) for v in t)
        for k, t in got.items()
    } == want
    report = (bundle / "import.md").read_text("utf-8")
    assert "semicolon-separated" in report and "decimal comma" in report
    assert "header on row 4" in report
    assert "a subtotal of 2 (3 lines under it)" in report and "a subtotal (Sum prosjekt)" in report
    assert imported_from(bundle, "23") == "nordvik kalkyle.csv, row 8"
    meta = read_concept(bundle / "cost" / "2.md", "cost/2.md").frontmatter
    assert (meta["type"], meta["title"]) == ("cost-lines", "2 Bygning")
    assert meta["ingest_manifest"]["importer"] == "portfolio-optimiser import"


@pytest.mark.parametrize(
    ("text", "decimal", "value"),
    [
        ("1 234 567,89 kr", ",", "1234567.89"),
        ("1.234.567,89", ",", "1234567.89"),
        ("kr 12 480 000", ",", "12480000"),
        ("1,234,567.89", ".", "1234567.89"),
        ("(1 500,50)", ",", "-1500.50"),
        ("−250", ",", "-250"),
        ("0,000125", ",", "0.000125"),
    ],
)
def test_figures_are_read_exactly_in_the_files_format(text: str, decimal: str, value: str) -> None:
    assert parse_number(text, NumberFormat(decimal, "test")) == Decimal(value)


@pytest.mark.loadbearing
def test_every_problem_of_a_file_is_named_at_once_and_nothing_is_imported(tmp_path: Path) -> None:
    bad = [
        "24;Innervegger;1 200;m2;2 100;2 520 000",  # sum fine: the control
        "25;Dekker;3 600;m2;2 600;9 999 999",  # sum is not quantity × unit price
        "26;Yttertak;1 620;;3 200;5 184 000",  # a quantity without a unit
        "27;Fast inventar;mye;m2;900;3 240 000",  # a word where a number belongs
        "X9;Ukjent;;;;100 000",  # not a code
        "23;Yttervegger igjen;;;;1 000",  # a code twice
    ]
    source = kalkyle_csv(tmp_path / "bad.csv", subtotals=False, rows=bad)
    into = tmp_path / "into"
    into.mkdir()
    with pytest.raises(ImportRefused) as refused:
        write_bundle(read_estimate(source), into)
    text = str(refused.value)
    assert "5 problem(s), nothing imported" in text
    assert "bad.csv, row 14, column Sum: the sum 9 999 999 is not 3 600 × 2 600 = 9 360 000" in text
    assert "bad.csv, row 15, column Enhet: a quantity (1 620) without a unit" in text
    assert "bad.csv, row 16, column Mengde: 'mye' is not a number" in text
    assert "bad.csv, row 17, column Konto: 'X9' is not an NS 3451 or NS 3453 code" in text
    assert "bad.csv, row 18: code 23 again (first at bad.csv, row 7)" in text
    assert list(into.iterdir()) == []


def test_a_subtotal_that_does_not_add_up_is_a_problem_not_a_line(tmp_path: Path) -> None:
    source = kalkyle_csv(tmp_path / "k.csv", subtotals=False, rows=["2;Bygning;;;;1 000 kr"])
    with pytest.raises(ImportRefused, match=r"account 2 says 1000 but the 3 line\(s\) under it"):
        read_estimate(source)


def test_unknown_headers_get_a_mapping_to_fill_in_and_then_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "eksport.csv"
    source.write_text("Kto;Hva;Kroner\n21;Grunn;1 000 000\n22;Bæring;2 000 000\n", "utf-8")
    with pytest.raises(MappingNeeded, match="no column recognised as code or amount"):
        read_estimate(source)
    into = tmp_path / "into"
    into.mkdir()
    assert main(["import", str(source), "--into", str(into)]) == 1
    template = tmp_path / "eksport.csv.mapping.toml"
    assert "A mapping to fill in is in" in capsys.readouterr().err
    filled = template.read_text("utf-8").replace('"Kto" = ""', '"Kto" = "code"')
    filled = filled.replace('"Kroner" = ""', '"Kroner" = "amount"')
    template.write_text(filled.replace('"Hva" = ""', '"Hva" = "title"'), "utf-8")
    assert main(["import", str(source), "--into", str(into), "--mapping", str(template)]) == 0
    project = load_ir_projections(into / "eksport")
    assert {(line.code, line.amount_nok) for line in project.cost_lines} == {
        ("21", 1_000_000),
        ("22", 2_000_000),
    }


def test_a_bad_side_file_is_named_with_its_field(tmp_path: Path) -> None:
    source = kalkyle_csv(tmp_path / "k.csv")
    (tmp_path / "project.toml").write_text('id = "Nordvik Skole"\nbudget = 3\n', "utf-8")
    with pytest.raises(ImportRefused) as refused:
        read_estimate(source)
    assert "project.toml, column budget: is not a project field" in str(refused.value)
    assert "column id: 'Nordvik Skole' is not a project id" in str(refused.value)


def test_an_imported_estimate_runs_through_the_daemon(tmp_path: Path) -> None:
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    source = kalkyle_csv(tmp_path / "nordvik.csv")
    assert main(["--workspace", str(ws.root), "import", str(source)]) == 0
    report = run_once(ws, load_config(), log=structlog.get_logger("t"), environ={"CI": "true"})
    assert [r.state for r in report.results] == ["done"]
    [run] = (ws.outbox / "runs" / "nordvik").iterdir()
    proposals = json.loads((run / "proposals.json").read_text("utf-8"))
    assert proposals["project_id"] == "nordvik"
    ingested = ws.bundles_projects / "nordvik" / "import.md"
    assert "decimal comma" in ingested.read_text("utf-8")


def test_a_csv_dropped_into_the_inbox_as_it_is_runs(tmp_path: Path) -> None:
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    source = kalkyle_csv(tmp_path / "lindvik-school.csv")
    source.rename(ws.inbox_projects / source.name)
    report = run_once(ws, load_config(), log=structlog.get_logger("t"), environ={"CI": "true"})
    assert [(r.kind, r.state) for r in report.results] == [("bundle", "done")]
    project = load_ir_projections(ws.bundles_projects / "lindvik-school")
    assert len(project.cost_lines) == len(lines())
    [run] = (ws.outbox / "runs" / "lindvik-school").iterdir()
    assert (run / "report.md").is_file()
    assert list(ws.inbox_projects.iterdir()) == []


@pytest.mark.loadbearing
def test_a_bad_csv_in_the_inbox_is_set_aside_with_every_problem(tmp_path: Path) -> None:
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    rows = ["25;Dekker;3 600;m2;2 600;9 999 999", "26;Yttertak;1 620;;3 200;5 184 000"]
    source = kalkyle_csv(tmp_path / "bad.csv", subtotals=False, rows=rows)
    source.rename(ws.inbox_projects / "bad.csv")
    report = run_once(ws, load_config(), log=structlog.get_logger("t"), environ={"CI": "true"})
    assert [r.state for r in report.results] == ["failed"]
    why = (ws.outbox / "failed" / "bad.csv.error.txt").read_text("utf-8")
    assert "2 problem(s), nothing imported" in why
    assert "row 13, column Sum" in why and "row 14, column Enhet" in why
    assert (ws.outbox / "failed" / "bad.csv").is_file()
    assert not ws.bundles_projects.exists() or list(ws.bundles_projects.iterdir()) == []


def test_a_post_level_kalkyle_keeps_its_ns3420_codes_and_compares_by_them(tmp_path: Path) -> None:
    source = tmp_path / "poster.csv"
    source.write_text(
        "Postnr;NS3420;Emne;Beskrivelse;Mengde;Enhet;Pris;Sum\n"
        "01.22;;Bæresystemer;;;;;1 149 200,00\n"
        "01.22.1;KB2.11;Plasstøpt betong;Dekker;250,5;m3;2 400,00;601 200,00\n"
        "01.22.2;KB4.1;Forskaling;;1 370;m2;400,00;548 000,00\n"
        "01.31.1;;Sanitær;;1;rs;85 000,00;85 000,00\n",
        "utf-8",
    )
    bundle = write_bundle(read_estimate(source), tmp_path)
    project = load_ir_projections(bundle)
    got = {line.code: (line.ns3420, line.post, line.compared_as) for line in project.cost_lines}
    assert got == {
        "01.22.1": ("KB2.11", True, "KB2.11"),
        "01.22.2": ("KB4.1", True, "KB4.1"),
        "01.31.1": (None, True, None),
    }
    assert "a subtotal of 01.22 (2 lines under it)" in (bundle / "import.md").read_text("utf-8")


@pytest.mark.loadbearing
def test_a_revised_estimate_runs_as_a_new_version_and_its_report_lists_what_changed(
    tmp_path: Path,
) -> None:
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    kalkyle_csv(tmp_path / "v1" / "nordvik.csv").rename(ws.inbox_projects / "nordvik.csv")
    run_once(ws, load_config(), log=structlog.get_logger("t"), environ={"CI": "true"})
    [first] = (ws.outbox / "runs" / "nordvik").iterdir()
    assert "What changed since the last version" not in (first / "report.md").read_text("utf-8")
    revised = kalkyle_csv(tmp_path / "v2" / "nordvik.csv", subtotals=False)
    text = revised.read_text("utf-8-sig").replace(
        "23;Yttervegger;1625,25;m2;6480;10 531 620 kr",
        "23;Yttervegger;1625,25;m2;6200;10 076 550 kr",
    )
    text = "\n".join(ln for ln in text.splitlines() if not ln.startswith("44;"))
    revised.write_text(text + "\n45;Elvarme;3600;m2;400;1 440 000 kr\n", "utf-8")
    revised.rename(ws.inbox_projects / "nordvik.csv")
    report = run_once(ws, load_config(), log=structlog.get_logger("t"), environ={"CI": "true"})
    assert [r.state for r in report.results if r.kind == "bundle"] == ["done"]
    [second] = [r for r in (ws.outbox / "runs" / "nordvik").iterdir() if r != first]
    shown = (second / "report.md").read_text("utf-8")
    changes = shown.split("## What changed since the last version")[1].split("\n## ")[0]
    assert "3 line(s) differ" in changes
    assert (
        "| 23 | changed | amount, unit price | amount 10531620, unit price 6480 | amount 10076550, unit price 6200 |"
        in changes
    )
    assert "| 44 | removed | Lys |" in changes and "| 45 | added | Elvarme |" in changes


@pytest.mark.parametrize("source_kind", ["csv", "xml"])
def test_import_then_export_gives_back_every_figure_of_the_source(
    tmp_path: Path, source_kind: str
) -> None:
    from .estimates import NS3459_POSTS, ns3459_xml

    if source_kind == "csv":
        source = kalkyle_csv(tmp_path / "nordvik.csv")
        want = {ln.code: (ln.quantity, ln.unit, ln.unit_price, ln.amount) for ln in lines()}
    else:
        source = ns3459_xml(tmp_path / "nordvik.xml")
        want = {
            postnr: (q, "m2", p, (q * p).quantize(Decimal("0.01")))
            for _g, postnr, _c, _t, q, p in NS3459_POSTS
        }
    bundles, out = tmp_path / "bundles", tmp_path / "out"
    bundles.mkdir()
    out.mkdir()
    assert main(["import", str(source), "--into", str(bundles)]) == 0
    assert main(["import", "--export", "csv", str(bundles / "nordvik"), "--into", str(out)]) == 0
    exported = read_estimate(out / "nordvik.csv")
    got = {p.code: (p.quantity, p.unit, p.unit_price, p.amount) for p in exported.posts}
    assert got == want  # Decimal equality: the figures themselves, not their spelling


def test_building_parts_that_slug_alike_never_share_a_file(tmp_path: Path) -> None:
    from decimal import Decimal

    from portfolio_optimiser.context.imports import Estimate
    from portfolio_optimiser.context.imports.posts import Origin, Post

    posts = tuple(
        Post(
            Origin("t.xml", row=i), f"01.2{i}.1", f"Post {i}", Decimal(100), ns3451=part, post=True
        )
        for i, part in enumerate(["2", "2 ", "21 fasade"])
    )
    estimate = Estimate("t", "T", "t.xml", "0" * 64, posts)
    bundle = write_bundle(estimate, tmp_path)
    assert len(load_ir_projections(bundle).cost_lines) == 3
