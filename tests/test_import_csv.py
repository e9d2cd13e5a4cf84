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
    with pytest.raises(ImportRefused, match=r"account 2 says 1 000 but the 3 line\(s\) under it"):
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


# Issue 44, item 3: csv files as planners keep them.


@pytest.mark.loadbearing
def test_heading_rows_and_notes_are_context_named_in_the_report_not_lines(tmp_path: Path) -> None:
    source = tmp_path / "k.csv"
    source.write_text(
        "Konto;Tekst;Mengde;Enhet;Enhetspris;Sum\n"
        "2;Bygning;;;;\n"  # row 2: a heading, a code and a text
        "21;Grunn;100;m2;2 000;200 000\n"
        "22;Bæring;;;;150 000\n"
        "3;;;;;\n"  # row 5: a heading with a code only
        "31;Sanitær;1;rs;85 000;85 000\n"
        ";;;;;\n"
        ";Alle priser eks. mva.;;;;\n"  # row 8: a note under the table
        "Prisene gjelder per 1. mars;;;;;\n",  # row 9: a note in the code column
        "utf-8",
    )
    bundle = write_bundle(read_estimate(source), tmp_path)
    project = load_ir_projections(bundle)
    assert [(line.code, line.amount_nok) for line in project.cost_lines] == [
        ("21", 200_000),
        ("22", 150_000),
        ("31", 85_000),
    ]
    report = (bundle / "import.md").read_text("utf-8")
    assert "Headings taken as context, not as lines: row 2 (2 Bygning), row 5 (3)." in report
    assert (
        "Notes taken as context, not as lines: row 8 (Alle priser eks. mva.), "
        "row 9 (Prisene gjelder per 1. mars)." in report
    )


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    "row",
    [
        "24;Innervegger;1 200;m2;;",  # a quantity and a unit, no price, no sum
        "24;Innervegger;;;2 100;",  # a unit price only
        "24;Innervegger;;m2;;",  # a unit only
    ],
)
def test_a_row_with_a_code_and_a_figure_but_no_sum_is_still_a_problem(
    tmp_path: Path, row: str
) -> None:
    source = kalkyle_csv(tmp_path / "k.csv", subtotals=False, rows=[row])
    with pytest.raises(ImportRefused) as refused:
        read_estimate(source)
    assert "k.csv, row 13, column Sum: no sum; write the line's amount" in str(refused.value)


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    ("header", "row", "title", "description"),
    [
        ("Konto;Beskrivelse;Sum", "21;Grunn og fundamenter;1 000", "Grunn og fundamenter", None),
        ("Konto;Betegnelse;Sum", "21;Grunn og fundamenter;1 000", "Grunn og fundamenter", None),
        ("Account;Description;Amount", "21;Foundations;1000", "Foundations", None),
        ("Konto;Tekst;Beskrivelse;Sum", "21;Grunn;Plasstøpt betong;1 000", "Grunn", "Plasstøpt betong"),
        ("Konto;Beskrivelse;Tekst;Sum", "21;Plasstøpt betong;Grunn;1 000", "Grunn", "Plasstøpt betong"),
    ],
)  # fmt: skip
def test_a_description_column_is_the_title_unless_a_title_column_is_beside_it(
    tmp_path: Path, header: str, row: str, title: str, description: str | None
) -> None:
    source = tmp_path / "k.csv"
    source.write_text(f"{header}\n{row}\n", "utf-8")
    estimate = read_estimate(source)
    assert [(p.code, p.title, p.description) for p in estimate.posts] == [
        ("21", title, description)
    ]
    [line] = load_ir_projections(write_bundle(estimate, tmp_path)).cost_lines
    assert line.title == title


_POSTS_WITH_TRIPLES = (
    "Postnr;NS3451;NS3420;Tekst;Mengde;Enhet;Enhetspris;Sum;Min;Sannsynlig;Maks;Fordeling;"
    "Korrelasjonsgruppe\n"
    "01.22.1;222;KB2.11;Plasstøpt betong;250,5;m3;2 400;601 200;540 000;601 200;720 000,50;"
    "triangular;betong\n"
    "01.22.2;222;KB4.1;Forskaling;1 370;m2;400;548 000;500 000;550 000;610 000;;betong\n"
    "01.31.1;31;;Sanitær;1;rs;85 000;85 000;80 000;85 000;90 000;normal;\n"
)


@pytest.mark.loadbearing
@pytest.mark.parametrize("kind", ["accounts", "posts"])
def test_export_carries_every_field_so_an_import_of_it_gives_back_the_same_lines(
    tmp_path: Path, kind: str
) -> None:
    if kind == "accounts":
        source = kalkyle_csv(tmp_path / "nordvik.csv", triples=True)
    else:
        source = tmp_path / "nordvik.csv"
        source.write_text(_POSTS_WITH_TRIPLES, "utf-8")
        (tmp_path / "nordvik.toml").write_text("[correlation]\nbetong = 0.6\n", "utf-8")
    first, out, again = tmp_path / "first", tmp_path / "out", tmp_path / "again"
    for folder in (first, out, again):
        folder.mkdir()
    assert main(["import", str(source), "--into", str(first)]) == 0
    assert main(["import", "--export", "csv", str(first / "nordvik"), "--into", str(out)]) == 0
    assert main(["import", str(out / "nordvik.csv"), "--into", str(again)]) == 0

    def lines_of(bundle: Path) -> dict[str, dict[str, object]]:
        return {
            line.code: line.model_dump(exclude={"imported_from", "source"})
            for line in load_ir_projections(bundle).cost_lines
        }

    before = lines_of(first / "nordvik")
    assert all(line["min_nok"] is not None for line in before.values())
    if kind == "posts":
        assert before["01.22.1"]["ns3451"] == "222" and before["01.22.1"]["ns3420"] == "KB2.11"
        assert before["01.22.1"]["distribution"] == "triangular"
        assert before["01.22.2"]["correlation_group"] == "betong"
        assert before["01.31.1"]["distribution"] == "normal"
    assert lines_of(again / "nordvik") == before
    project_fields = {"id", "name", "category", "p50_nok", "p85_nok", "correlation"}
    assert load_ir_projections(again / "nordvik").model_dump(
        include=project_fields
    ) == load_ir_projections(first / "nordvik").model_dump(include=project_fields)


@pytest.mark.loadbearing
def test_an_unknown_unit_is_a_problem_at_import_naming_the_nearest_spelling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = ["24;Innervegger;1 200;kvm2;2 100;2 520 000", "25;Maling;10;bøtte;500;5 000"]
    source = kalkyle_csv(tmp_path / "k.csv", subtotals=False, rows=rows)
    into = tmp_path / "into"
    into.mkdir()
    assert main(["import", str(source), "--into", str(into)]) == 1
    err = capsys.readouterr().err
    assert (
        "k.csv, row 13, column Enhet: 'kvm2' is not a unit the product knows; did you mean "
        "'kvm' (m2)? write one of m2, m3, fm3, lm3, m, stk" in err
    )
    assert "row 14, column Enhet: 'bøtte' is not a unit the product knows; write one of" in err
    assert "or add it to [bundles] units" in err
    assert list(into.iterdir()) == []
    # The config's own units are units at import as in check-bundle.
    config = tmp_path / "po.toml"
    config.write_text('[bundles]\nunits = ["bøtte"]\n', "utf-8")
    fixed = kalkyle_csv(tmp_path / "fixed" / "k.csv", subtotals=False, rows=rows[1:])
    assert main(["--config", str(config), "import", str(fixed), "--into", str(into)]) == 0
    assert main(["--config", str(config), "check-bundle", str(into / "k")]) == 0


def test_the_imports_section_of_the_config_has_its_default_and_its_bound() -> None:
    import tomllib

    from portfolio_optimiser.config import ConfigError, overlay, parse_config
    from portfolio_optimiser.resources import default_config_path

    assert load_config().imports.max_bytes == 200 * 1024 * 1024
    default = tomllib.loads(default_config_path().read_text("utf-8"))
    with pytest.raises(ConfigError, match=r"imports.max_bytes: 0 must be at least 1"):
        parse_config(overlay(default, {"imports": {"max_bytes": 0}}))


@pytest.mark.loadbearing
def test_a_csv_past_the_size_limit_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = kalkyle_csv(tmp_path / "k.csv")
    size = source.stat().st_size
    config = tmp_path / "po.toml"
    config.write_text(f"[imports]\nmax_bytes = {size - 1}\n", "utf-8")
    into = tmp_path / "into"
    into.mkdir()
    assert main(["--config", str(config), "import", str(source), "--into", str(into)]) == 1
    said = capsys.readouterr().err
    shown, limit = (f"{n:,}".replace(",", " ") for n in (size, size - 1))
    assert f"k.csv: is {shown} bytes, past the {limit} bytes a csv may be" in said
    assert "[imports] max_bytes" in said and list(into.iterdir()) == []

    def unread(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the file was opened")

    # At the default limit, a sparse file past it: refused from its size alone.
    large = tmp_path / "large.csv"
    with large.open("wb") as handle:
        handle.truncate(274 * 1024 * 1024)
    monkeypatch.setattr(Path, "open", unread)
    monkeypatch.setattr(Path, "read_bytes", unread)
    monkeypatch.setattr("builtins.open", unread)
    with pytest.raises(ImportRefused) as refused:
        read_estimate(large)
    assert (
        "large.csv: is 274 MiB, past the 200 MiB a csv may be ([imports] max_bytes in the "
        "config)" in str(refused.value)
    )


@pytest.mark.loadbearing
def test_a_csv_is_read_as_a_stream_never_held_whole(tmp_path: Path) -> None:
    import tracemalloc

    # 4 000 lines, each with a 5 000-character column that is not read: 20 MB of file whose
    # lines are a few hundred kilobytes in memory.
    remark = "x" * 5_000
    source = tmp_path / "wide.csv"
    with source.open("w", encoding="utf-8") as out:
        out.write("Postnr;Tekst;Mengde;Enhet;Enhetspris;Sum;Kommentar\n")
        for i in range(4_000):
            out.write(f"01.01.{i};Post {i};2;stk;100,50;201;{remark}\n")
    size = source.stat().st_size
    tracemalloc.start()
    try:
        estimate = read_estimate(source)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(estimate.posts) == 4_000
    assert peak < size / 4, f"peak {peak / 1e6:.1f} MB for a {size / 1e6:.1f} MB file"


@pytest.mark.loadbearing
def test_a_csv_of_more_lines_than_a_bundle_holds_is_refused_while_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from portfolio_optimiser.context.imports import tabular_rows

    monkeypatch.setattr(tabular_rows, "MAX_LINES", 10)
    source = tmp_path / "big.csv"
    source.write_text(
        "Postnr;Tekst;Sum\n" + "".join(f"01.01.{i};Post {i};100\n" for i in range(100)), "utf-8"
    )
    with pytest.raises(ImportRefused) as refused:
        read_estimate(source)
    text = str(refused.value)
    assert "1 problem(s)" in text
    assert "big.csv, row 22: more than 10 cost lines, more than a bundle holds" in text
    exact = tmp_path / "exact.csv"
    exact.write_text(
        "Postnr;Tekst;Sum\n" + "".join(f"01.01.{i};Post {i};100\n" for i in range(11)), "utf-8"
    )
    with pytest.raises(ImportRefused, match=r"exact\.csv: 11 cost lines, more than the 10"):
        read_estimate(exact)


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    ("planted", "named"),
    [
        ("23;Yttervegger;1625,25;m2;6480;10 999 999 kr", "the sum 10 999 999 is not"),
        ("23;Yttervegger;1625,25;m2;6480;mange kr", "'mange kr' is not a number"),
        ("23;Yttervegger;1625,25;kvm2;6480;10 531 620 kr", "'kvm2' is not a unit"),
    ],
)
def test_a_line_with_a_problem_under_a_subtotal_is_named_once_not_again_as_the_subtotal(
    tmp_path: Path, planted: str, named: str
) -> None:
    source = kalkyle_csv(tmp_path / "k.csv")  # 2 Bygning, a subtotal of 21, 22 and 23
    text = source.read_text("utf-8-sig")
    text = text.replace("23;Yttervegger;1625,25;m2;6480;10 531 620 kr", planted)
    source.write_text(text, "utf-8")
    with pytest.raises(ImportRefused) as refused:
        read_estimate(source, units=())
    said = str(refused.value)
    assert "1 problem(s)" in said and "k.csv, row 8, column" in said and named in said
    assert "account 2" not in said


def test_the_printed_count_is_the_files_cost_lines_and_their_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = kalkyle_csv(tmp_path / "kalkyle.csv")
    into = tmp_path / "into"
    into.mkdir()
    assert main(["import", str(source), "--into", str(into)]) == 0
    out = capsys.readouterr().out
    assert f"{source} → {into / 'kalkyle'} (8 cost lines in 5 tables)" in out
    assert len(list((into / "kalkyle" / "cost").glob("*.md"))) == 5


@pytest.mark.loadbearing
def test_past_so_many_problems_the_rest_are_counted_not_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from portfolio_optimiser.context.imports import tabular_read

    monkeypatch.setattr(tabular_read, "MAX_PROBLEMS", 3)
    bad = [f"2{i};Linje {i};mye;m2;100;1 000" for i in range(5)]  # rows 13-17, each a word
    source = kalkyle_csv(tmp_path / "k.csv", subtotals=False, rows=bad)
    with pytest.raises(ImportRefused) as refused:
        read_estimate(source)
    said = str(refused.value)
    assert "k.csv, row 15, column Mengde: 'mye' is not a number" in said
    assert "row 16" not in said and "row 17" not in said
    assert "k.csv: and 2 more problem(s) after k.csv, row 15, not listed" in said


def test_a_row_the_csv_reader_cannot_read_is_named_with_its_row_not_a_crash(tmp_path: Path) -> None:
    source = tmp_path / "k.csv"
    source.write_text("Konto;Tekst;Sum\n21;Grunn;1 000\n22;" + "x" * 200_000 + ";2 000\n", "utf-8")
    with pytest.raises(ImportRefused, match=r"k\.csv, row 3: cannot be read as csv \(field larger"):
        read_estimate(source)


def test_a_distribution_the_frame_would_refuse_is_a_problem_at_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Imported with exit 0 before, then refused by the run: a normal draw around a skewed triple.
    source = tmp_path / "nordvik.csv"
    source.write_text(
        "Postnr;Tekst;Mengde;Enhet;Enhetspris;Sum;Min;Sannsynlig;Maks;Fordeling\n"
        "01.31.1;Sanitær;1;rs;85 000;85 000;80 000;85 000;99 999,99;normal\n"
        "01.31.2;VVS;1;rs;10 000;10 000;9 000;10 000;12 000;lognormal\n",
        "utf-8",
    )
    (tmp_path / "out").mkdir()
    assert main(["import", str(source), "--into", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "row 2, column Fordeling: a normal distribution is symmetric" in err
    assert "row 3, column Fordeling: 'lognormal' is not pert, triangular or normal" in err


def test_a_correlation_group_the_project_does_not_declare_is_a_problem_at_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "nordvik.csv"
    source.write_text(_POSTS_WITH_TRIPLES, "utf-8")
    (tmp_path / "out").mkdir()
    assert main(["import", str(source), "--into", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "row 2, column correlation group: 'betong' is not a group the project declares" in err
