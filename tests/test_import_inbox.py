"""A planner's own files dropped into the inbox as they are (issue 17): each source gives a run
whose report names the rows its candidates came from, and each bad file is set aside with every
problem in one report while nothing of it reaches ``bundles/projects/``."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import structlog

from portfolio_optimiser.config import load_config
from portfolio_optimiser.context.imports.xlsx_file import MAX_RATIO
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.daemon.once import OnceReport, run_once
from portfolio_optimiser.daemon.workspace import Workspace

from .estimates import (
    KUTTLISTE,
    NS3459_POSTS,
    kalkyle_csv,
    kalkyle_xlsx,
    kuttliste_csv,
    lines,
    ns3459_xml,
)

_TENDER_KUTTLISTE = "Nr;Tiltak;Postnr;Besparelse\n1;Enklere fasade;01.23.1;420 000 kr\n"
_PROJECT = 'id = "nordvik-school"\nname = "Nordvik skole"\ncategory = "school"\n'


def _workspace(tmp_path: Path) -> Workspace:
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    return ws


def _run(ws: Workspace) -> OnceReport:
    return run_once(ws, load_config(), log=structlog.get_logger("t"), environ={"CI": "true"})


def _folder(tmp_path: Path, files: dict[str, Callable[[Path], object]]) -> Path:
    folder = tmp_path / "drop" / "nordvik"
    folder.mkdir(parents=True)
    for name, make in files.items():
        make(folder / name)
    return folder


def _text(text: str) -> Callable[[Path], object]:
    return lambda path: path.write_text(text, "utf-8")


def _csv_folder(tmp_path: Path) -> Path:
    return _folder(
        tmp_path,
        {
            "nordvik.csv": kalkyle_csv,
            "kuttliste.csv": kuttliste_csv,
            "project.toml": _text(_PROJECT),
        },
    )


def _workbook(tmp_path: Path) -> Path:
    return kalkyle_xlsx(tmp_path / "nordvik-school.xlsx", kuttliste=True)


def _tender(tmp_path: Path, *, priced: bool = True) -> Path:
    return _folder(
        tmp_path,
        {
            "tilbud.xml": lambda p: ns3459_xml(p, priced=priced),
            "kuttliste.csv": _text(_TENDER_KUTTLISTE),
            "project.md": _text("---\ntype: project\nid: nordvik-school\nname: Nordvik\n---\n"),
        },
    )


_GUID_2 = "5f0c7a1e-0001-4c1e-9a11-000000000002"


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    ("make", "rows"),
    [
        pytest.param(
            _csv_folder,
            [
                "| 23 | nordvik.csv, row 8 |",
                "| kuttliste item k-1 | kuttliste.csv, row 2 |",
                "| 62 | nordvik.csv, row 12 |",
            ],
            id="semicolon-csv-with-a-kuttliste-beside-it",
        ),
        pytest.param(
            _workbook,
            [
                "| 23 | nordvik-school.xlsx, sheet 'Bygg', row 6 |",
                "| kuttliste item k-1 | nordvik-school.xlsx, sheet 'Kuttliste', row 2 |",
                "| 62 | nordvik-school.xlsx, sheet 'Tekniske anlegg', row 5 |",
            ],
            id="xlsx-two-sheets-subtotals-and-a-kuttliste-sheet",
        ),
        pytest.param(
            _tender,
            [
                f"| 01.23.1 | tilbud.xml, Post 2 (01.23.1), ID {_GUID_2} |",
                "| kuttliste item k-1 | kuttliste.csv, row 2 |",
            ],
            id="ns3459-priced-tender",
        ),
        pytest.param(
            lambda tmp: _tender(tmp, priced=False),
            [
                f"| 01.23.1 | tilbud.xml, Post 2 (01.23.1), ID {_GUID_2} |",
                "| kuttliste item k-1 | kuttliste.csv, row 2 |",
            ],
            id="ns3459-price-request",
        ),
    ],
)
def test_each_source_dropped_as_it_is_runs_and_its_report_names_the_source_rows(
    tmp_path: Path, make: Callable[[Path], Path], rows: list[str]
) -> None:
    ws = _workspace(tmp_path)
    dropped = make(tmp_path)
    dropped.rename(ws.inbox_projects / dropped.name)
    report = _run(ws)
    assert [(r.kind, r.state) for r in report.results] == [("bundle", "done")]
    project = load_ir_projections(ws.bundles_projects / "nordvik-school")
    tender = "tilbud.xml" in rows[0]
    assert len(project.measure_options) == (1 if tender else len(KUTTLISTE))
    assert len(project.cost_lines) == (len(NS3459_POSTS) if tender else len(lines()))
    [run] = (ws.outbox / "runs" / "nordvik-school").iterdir()
    shown = (run / "report.md").read_text("utf-8")
    sources = shown.split("## Where the lines come from")[1].split("\n## ")[0]
    for row in rows:
        assert row in sources
    assert list(ws.inbox_projects.iterdir()) == []


def _bad_csv(row: str) -> Callable[[Path], Path]:
    return lambda tmp: kalkyle_csv(tmp / "bad.csv", subtotals=False, rows=[row])


def _bomb(tmp: Path) -> Path:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bomb:
        bomb.writestr("xl/worksheets/sheet1.xml", b"0" * (MAX_RATIO * 20_000))
    (tmp / "bad.xlsx").write_bytes(buffer.getvalue())
    return tmp / "bad.xlsx"


def _cut(tmp: Path) -> Path:
    whole = kalkyle_xlsx(tmp / "whole.xlsx").read_bytes()
    (tmp / "bad.xlsx").write_bytes(whole[: len(whole) // 2])
    return tmp / "bad.xlsx"


def _locked(tmp: Path) -> Path:
    (tmp / "bad.xlsx").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(600))
    return tmp / "bad.xlsx"


def _twice(tmp: Path) -> Path:
    first = NS3459_POSTS[0]
    again = (first[0], "01.62.1", "NL1.1", "Heis", first[4], first[5])
    return ns3459_xml(tmp / "bad.xml", posts=[*NS3459_POSTS, again])


def _doctype(tmp: Path) -> Path:
    return ns3459_xml(tmp / "bad.xml", doctype='<!DOCTYPE NS3459 [<!ENTITY a "aaaa">]>\n')


def _bad_kuttliste(tmp: Path) -> Path:
    kalkyle_csv(tmp / "bad" / "bad.csv")
    kuttliste_csv(tmp / "bad" / "kuttliste.csv", rows=["3;Ingen slik linje;99;10 000 kr"])
    return tmp / "bad"


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    ("make", "named"),
    [
        pytest.param(
            _bad_csv("25;Dekker;3 600;m2;2 600;9 999 999"),
            "row 13, column Sum: the sum 9 999 999 is not 3 600 × 2 600",
            id="a-sum-that-is-not-quantity-times-price",
        ),
        pytest.param(
            _bad_csv("26;Yttertak;1 620;;3 200;5 184 000"),
            "row 13, column Enhet: a quantity (1 620) without a unit",
            id="a-missing-unit",
        ),
        pytest.param(
            _bad_csv("X9;Ukjent;;;;1 000"),
            "row 13, column Konto: 'X9' is not an NS 3451 or NS 3453 code",
            id="an-unknown-code",
        ),
        pytest.param(
            _bad_csv("27;Inventar;mye;m2;100;1 000"),
            "row 13, column Mengde: 'mye' is not a number",
            id="a-non-number",
        ),
        pytest.param(
            _twice, "GUID 5f0c7a1e-0001-4c1e-9a11-000000000001 again", id="a-duplicate-guid"
        ),
        pytest.param(_locked, "is encrypted (password-protected)", id="an-encrypted-workbook"),
        pytest.param(_cut, "is damaged or truncated", id="a-truncated-workbook"),
        pytest.param(_bomb, "would expand", id="a-zip-bomb"),
        pytest.param(_doctype, "has a DOCTYPE, which NS 3459 files never have", id="a-doctype"),
        pytest.param(
            _bad_kuttliste,
            "kuttliste.csv, row 4, column Konto: 99 is not a line of the estimate",
            id="a-kuttliste-item-on-no-line",
        ),
    ],
)
def test_each_problem_is_named_in_the_one_report_and_nothing_reaches_the_bundles(
    tmp_path: Path, make: Callable[[Path], Path], named: str
) -> None:
    ws = _workspace(tmp_path)
    source = make(tmp_path)
    source.rename(ws.inbox_projects / source.name)
    report = _run(ws)
    assert [(r.kind, r.state) for r in report.results] == [("bundle", "failed")]
    why = (ws.outbox / "failed" / f"{source.name}.error.txt").read_text("utf-8")
    assert named in why
    assert (ws.outbox / "failed" / source.name).exists()
    assert not ws.bundles_projects.exists() or list(ws.bundles_projects.iterdir()) == []
    assert not (ws.outbox / "runs").exists() or list((ws.outbox / "runs").iterdir()) == []


def test_a_zip_of_the_estimates_folder_is_imported_too(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    folder = _csv_folder(tmp_path)
    archive = tmp_path / "nordvik.zip"
    with zipfile.ZipFile(archive, "w") as packed:
        for path in sorted(folder.iterdir()):
            packed.write(path, f"nordvik/{path.name}")
    archive.rename(ws.inbox_projects / archive.name)
    report = _run(ws)
    assert [(r.kind, r.state) for r in report.results] == [("bundle", "done")]
    project = load_ir_projections(ws.bundles_projects / "nordvik-school")
    assert [o.imported_from for o in project.measure_options] == [
        "kuttliste.csv, row 2",
        "kuttliste.csv, row 3",
    ]


@pytest.mark.parametrize(
    ("names", "chosen"),
    [
        (["Kuttliste.csv"], "Kuttliste.csv"),
        (["nordvik-kuttliste.csv", "kuttliste.csv"], "nordvik-kuttliste.csv"),
        (["a-kuttliste.csv", "b-kuttliste.csv"], None),
    ],
)
def test_the_kuttliste_beside_an_estimate_is_found_by_its_name_in_any_case(
    tmp_path: Path, names: list[str], chosen: str | None
) -> None:
    from portfolio_optimiser.context.imports import ImportRefused, read_estimate

    folder = tmp_path / "drop"
    estimate = kalkyle_csv(folder / "nordvik.csv")
    for name in names:
        kuttliste_csv(folder / name)
    if chosen is None:
        with pytest.raises(ImportRefused, match="has 2 kuttliste files beside it"):
            read_estimate(estimate)
        return
    read = read_estimate(estimate)
    assert {m.origin.file for m in read.measures} == {chosen}
    assert len(read.measures) == len(KUTTLISTE)


@pytest.mark.loadbearing
def test_an_unknown_unit_is_refused_at_the_inbox_and_taken_once_the_config_names_it(
    tmp_path: Path,
) -> None:
    """The unit check the import makes is the one ``check-bundle`` makes: a unit neither knows is
    set aside at import with the nearest spelling, never imported to be refused later; a unit
    the workspace's config adds is taken by both."""
    row = "27;Inventar;12;bøtte;1 000;12 000"
    ws = _workspace(tmp_path)
    kalkyle_csv(ws.inbox_projects / "bad.csv", subtotals=False, rows=[row])
    [refused] = _run(ws).results
    assert refused.state == "failed"
    why = (ws.outbox / "failed" / "bad.csv.error.txt").read_text("utf-8")
    assert "row 13, column Enhet: 'bøtte' is not a unit the product knows" in why
    assert "[bundles] units" in why

    ws = Workspace.at(tmp_path / "own", environ={})
    ws.ensure()
    settings = tmp_path / "own.toml"
    settings.write_text('[bundles]\nunits = ["bøtte"]\n', "utf-8")
    kalkyle_csv(ws.inbox_projects / "bad.csv", subtotals=False, rows=[row])
    report = run_once(
        ws, load_config(settings), log=structlog.get_logger("t"), environ={"CI": "true"}
    )
    assert [(r.kind, r.state) for r in report.results] == [("bundle", "done")]
    [project] = ws.bundles_projects.iterdir()
    assert any(ln.unit == "bøtte" for ln in load_ir_projections(project).cost_lines)


@pytest.mark.loadbearing
def test_a_verdict_saved_before_its_run_settles_is_taken_in_once_it_has(tmp_path: Path) -> None:
    """A run's folder is published before its candidates are settled into the ledger: an expert
    quick enough to answer in between (or a verdict copied in with the estimate) is told its
    candidate is not known yet, and the verdict is taken in as soon as the run settles, not
    refused for good."""
    first = _workspace(tmp_path / "a")
    _csv_folder(tmp_path / "a").rename(first.inbox_projects / "nordvik")
    _run(first)
    [run] = (first.outbox / "runs" / "nordvik-school").iterdir()
    template = sorted((run / "verdicts").glob("*.json"))[0]
    verdict = json.loads(template.read_text("utf-8"))
    verdict |= {"decision": "rejected", "rationale": "Not here.", "reviewer": "KE"}

    ws = _workspace(tmp_path / "b")
    (ws.inbox_verdicts / template.name).write_text(json.dumps(verdict), "utf-8")
    _csv_folder(tmp_path / "b").rename(ws.inbox_projects / "nordvik")
    results = _run(ws).results
    states = [(r.kind, r.state) for r in results]
    assert states[0] == ("verdict", "reported")  # read first: no run has named it yet
    assert ("bundle", "done") in states
    assert states[-1] == ("verdict", "ingested")
    assert not (ws.inbox_verdicts / f"{template.name}.error.txt").exists()
