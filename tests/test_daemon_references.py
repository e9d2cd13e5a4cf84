"""A generated portfolio through the daemon: the reference classes are published, every planted
line gets its graded candidate with what it was measured against, and a moved portfolio reruns
what it moved."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from portfolio_optimiser.config import load_config
from portfolio_optimiser.context.frontmatter import read_concept
from portfolio_optimiser.context.reference import ReferenceRule
from portfolio_optimiser.daemon.ledger import Ledger
from portfolio_optimiser.daemon.once import run_once
from portfolio_optimiser.daemon.references import read_reference_classes
from portfolio_optimiser.daemon.workspace import Workspace

from .synthetic import SyntheticPortfolio, generate

ENV = {"PORTFOLIO_OPTIMISER_REASONING_MODE": "ci"}


def once(ws: Workspace) -> list[object]:
    report = run_once(ws, load_config(), log=structlog.get_logger("test"), environ=ENV)
    assert not report.pending
    return report.results


def latest_runs(ws: Workspace) -> dict[str, Path]:
    """Each project's newest run folder (run ids sort by the day, then by nothing: use mtime)."""
    found = {}
    for project in sorted((ws.outbox / "runs").iterdir()):
        runs = sorted(project.iterdir(), key=lambda p: (p / "proposals.json").stat().st_mtime_ns)
        found[project.name] = runs[-1]
    return found


@pytest.fixture(scope="module")
def portfolio_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Workspace, SyntheticPortfolio, list[object]]]:
    root = tmp_path_factory.mktemp("refs")
    ws = Workspace.at(root / "ws", environ={})
    ws.ensure()
    portfolio = generate(7, n_projects=15)
    for p in portfolio.projects:
        p.write(ws.inbox_projects / p.project_id)
    results = once(ws)
    yield ws, portfolio, results


@pytest.mark.loadbearing
def test_every_planted_line_gets_its_graded_candidate_and_what_it_was_measured_against(
    portfolio_run: tuple[Workspace, SyntheticPortfolio, list[object]],
) -> None:
    ws, portfolio, _results = portfolio_run
    found: set[tuple[str, str]] = set()
    likely: set[tuple[str, str]] = set()
    for project_id, run in latest_runs(ws).items():
        proposals = json.loads((run / "proposals.json").read_text("utf-8"))
        report = (run / "report.md").read_text("utf-8")
        for c in proposals["candidates"]:
            if c["measure_type"] == "reference_price" and c["validator"]["outcome"] == "accepted":
                found.add((project_id, c["affected_codes"][0]))
                if c["grade"] == "likely":
                    likely.add((project_id, c["affected_codes"][0]))
                # graded, with what it was measured against under it
                assert f"### {c['grade']}: `{c['id']}`" in report
        if any(pid == project_id for pid, _code in portfolio.planted):
            assert "## Reference prices" in report and "| measured against | value |" in report
    assert portfolio.planted <= found  # each planted line, likely or possible
    assert len(likely & portfolio.planted) >= 0.8 * len(likely)  # what it calls likely, mostly is


def test_the_classes_are_generated_pages_outside_the_wiki(
    portfolio_run: tuple[Workspace, SyntheticPortfolio, list[object]],
) -> None:
    ws, portfolio, _results = portfolio_run
    pages = sorted(p for p in ws.references.glob("*.md") if p.name != "index.md")
    assert pages and not list(ws.wiki.rglob("*reference*"))
    meta = read_concept(pages[0], pages[0].name).frontmatter
    assert meta["generated"] is True and meta["type"] == "reference-class"
    classes = read_reference_classes(ws.references, ReferenceRule(), log=structlog.get_logger())
    built_from = [c.project_id for c in classes.classes[(str(meta["code"]), str(meta["unit"]))]]
    assert meta["ingest_manifest"]["projects"] == len(built_from)
    assert sorted(built_from) == sorted(p.project_id for p in portfolio.projects)


@pytest.mark.loadbearing
def test_projects_the_portfolio_moved_under_get_a_new_run_and_a_second_once_does_nothing(
    portfolio_run: tuple[Workspace, SyntheticPortfolio, list[object]],
) -> None:
    ws, _portfolio, results = portfolio_run
    reruns = [r for r in results if getattr(r, "kind", "") == "rerun"]
    assert reruns and all(getattr(r, "state", "") == "done" for r in reruns)
    ledger = Ledger.open(ws.ledger_file)
    try:
        runs = [i for i in ledger.items() if i.kind == "bundle"]
        assert all(i.state == "done" for i in runs)
    finally:
        ledger.close()
    spend = json.loads((ws.outbox / "spend.json").read_text("utf-8"))
    assert len({r["run_id"] for r in spend["runs"]}) == len(spend["runs"]) == len(runs)
    assert once(ws) == []  # nothing moved: no rerun, no duplicate


def validated_total(ws: Workspace) -> int:
    total = 0
    for run in latest_runs(ws).values():
        for c in json.loads((run / "proposals.json").read_text("utf-8"))["candidates"]:
            if c["validator"]["outcome"] == "accepted" and c["checker"]["outcome"] != "rejected":
                total += int(c["claimed_saving_nok"])
    return total


def nok(value: float) -> str:
    return f"{value:,.0f}".replace(",", " ")


@pytest.mark.loadbearing
def test_the_portfolio_report_counts_each_projects_latest_run_once_and_follows_verdicts(
    portfolio_run: tuple[Workspace, SyntheticPortfolio, list[object]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from portfolio_optimiser.cli import main
    from portfolio_optimiser.daemon.desk import JobDesk

    ws, portfolio, _results = portfolio_run
    report = (ws.outbox / "portfolio.md").read_text("utf-8")
    assert (ws.outbox / "portfolio.svg").read_text("utf-8").startswith("<svg")
    assert f"**{nok(validated_total(ws))} NOK** in all" in report  # reruns replace, never add
    for p in portfolio.projects:
        assert f"| {p.project_id} | " in report
    assert "## By cost code" in report and "## Largest candidates awaiting a verdict" in report
    # An expert approves the largest open candidate at 50 %: the report follows at once.
    [template] = [
        t
        for run in latest_runs(ws).values()
        for t in (run / "verdicts").glob("*.json")
        if f"`{t.stem}`"
        in report.split("## Largest candidates awaiting a verdict")[1].split("\n")[4]
    ]
    data = json.loads(template.read_text("utf-8"))
    data |= {
        "decision": "approved",
        "rationale": "Checked.",
        "reviewer": "KE",
        "realization_rate": 0.5,
    }
    (ws.inbox_verdicts / template.name).write_text(json.dumps(data), "utf-8")
    looks: list[int] = []
    real_reruns = JobDesk.reruns

    def reruns(desk: JobDesk, stop: Any) -> Any:
        looks.append(1)
        return real_reruns(desk, stop)

    monkeypatch.setattr(JobDesk, "reruns", reruns)
    assert [getattr(r, "kind", "") for r in once(ws)] == ["verdict"]  # nothing moved
    assert looks == [1]  # looked at in the same call: `once` waits for no more verdicts
    after = (ws.outbox / "portfolio.md").read_text("utf-8")
    saving = data["candidate"]["claimed_saving_nok"]
    assert f"experts approved {nok(saving)} NOK and expect {nok(saving * 0.5)} NOK" in after
    assert main(["--workspace", str(ws.root), "status"]) == 0
    assert "portfolio: outbox/portfolio.md" in capsys.readouterr().out
