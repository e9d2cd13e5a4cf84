"""A project's run follows what the portfolio gives it now (issue 22): a run reads the snapshot of
the reference fit its identity was computed against, and a project whose reference candidates
go back to none is never left showing the ones it had."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import structlog

from portfolio_optimiser.config import load_config
from portfolio_optimiser.context.line_references import LineReference, ProjectReferences
from portfolio_optimiser.daemon.claims import RerunClaim
from portfolio_optimiser.daemon.ledger import Ledger
from portfolio_optimiser.daemon.once import run_once
from portfolio_optimiser.daemon.processor import Processor
from portfolio_optimiser.daemon.versions import run_identity
from portfolio_optimiser.daemon.workspace import Workspace

ENV = {"PORTFOLIO_OPTIMISER_REASONING_MODE": "ci"}


def one_line_project(ws: Workspace, pid: str, price: int, quantity: int = 1000) -> None:
    root = ws.inbox_projects / pid
    (root / "cost").mkdir(parents=True)
    (root / "project.md").write_text(
        f"---\ntype: project\nid: {pid}\nname: {pid}\ncurrency: NOK\n---\n\n# {pid}\n", "utf-8"
    )
    (root / "cost" / "23.md").write_text(
        f'---\ntype: cost-line\ncode: "23"\ntitle: Yttervegger\namount_nok: {price * quantity}\n'
        f"quantity: {quantity}\nunit: m2\nunit_price_nok: {price}\n---\n\n# 23\n",
        "utf-8",
    )
    (root / "index.md").write_text(
        f"# {pid}\n\n* [Project](project.md)\n* [23](cost/23.md)\n", "utf-8"
    )


def once(ws: Workspace) -> None:
    report = run_once(ws, load_config(), log=structlog.get_logger("test"), environ=ENV)
    assert not report.pending


def latest(ws: Workspace, project_id: str) -> tuple[str, list[str]]:
    """The project's latest run (the ledger's) and its accepted reference candidates' ids."""
    with Ledger.open(ws.ledger_file) as ledger:
        [(run_id, folder)] = [
            (r, f) for p, r, f in ledger.records.project_runs() if p == project_id
        ]
    proposals = json.loads((Path(folder) / "proposals.json").read_text("utf-8"))
    return run_id, [
        c["id"]
        for c in proposals["candidates"]
        if c["measure_type"] == "reference_price" and c["validator"]["outcome"] == "accepted"
    ]


@pytest.mark.loadbearing
@pytest.mark.parametrize("first_run_lost", [False, True], ids=["kept", "deleted"])
def test_a_project_whose_candidates_go_back_to_none_shows_none_again(
    tmp_path: Path, first_run_lost: bool
) -> None:
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    one_line_project(ws, "dear", 9000)
    for i in range(2):  # two comparables: too few for a reference
        one_line_project(ws, f"fair-{i}", 6000 + 10 * i)
    once(ws)
    first_run, first = latest(ws, "dear")
    assert first == []
    for i in range(2, 6):  # six: the line is well above them
        one_line_project(ws, f"fair-{i}", 6000 + 10 * i)
    once(ws)
    flagged_run, flagged = latest(ws, "dear")
    assert len(flagged) == 1 and flagged_run != first_run
    if first_run_lost:  # someone cleared it out of the outbox: it cannot stand again
        shutil.rmtree(ws.outbox / "runs" / "dear" / first_run)
    for i in range(14):  # many more at its own price: it is fair after all
        one_line_project(ws, f"peer-{i}", 8900 + 15 * i)
    once(ws)
    runs = sorted(p.name for p in (ws.outbox / "runs" / "dear").iterdir())
    if first_run_lost:  # run anew, once
        now_run, now = latest(ws, "dear")
        assert now == [] and now_run not in {first_run, flagged_run} and len(runs) == 2
        once(ws)
        assert latest(ws, "dear") == (now_run, [])
    else:  # the first run stands again: each version run once, never again
        assert latest(ws, "dear") == (first_run, []), "the stale candidate is still shown"
        assert len(runs) == 2
    summary = (ws.outbox / "portfolio.md").read_text("utf-8")
    [row] = [ln for ln in summary.splitlines() if ln.startswith("| dear |")]
    assert row.split("|")[2].strip() == "0"


@pytest.mark.loadbearing
def test_a_run_reads_the_snapshot_its_identity_was_computed_against(tmp_path: Path) -> None:
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    one_line_project(ws, "dear", 9000)
    for i in range(5):
        one_line_project(ws, f"peer-{i}", 8950 + 10 * i)  # today's classes flag nothing
    once(ws)
    assert latest(ws, "dear")[1] == []
    # The snapshot an identity was computed against, while the classes moved on since: the run
    # must price the line as the snapshot did, never as the classes do now.
    snapshot = ProjectReferences(
        "dear",
        (
            LineReference(
                code="23",
                unit="m2",
                category=None,
                n=5,
                median_nok=6000.0,
                expected_nok=6000.0,
                level=1.0,
                spread=0.05,
                sigmas=8.1,
                grade="likely",
            ),
        ),
        min_comparables=4,
        min_saving_nok=50_000,
        min_share=0.001,
    )
    folder = ws.bundles_projects / "dear"
    identity = run_identity("snapshot-test", "v1")
    with Ledger.open(ws.ledger_file) as ledger:
        processor = Processor(
            ws,
            load_config(),
            ledger,
            lambda: 1_790_000_000.0,
            structlog.get_logger("t"),
            environ=ENV,
        )
        claim = RerunClaim(processor.floor, folder, identity, json.dumps(snapshot.to_dict()))
        result = processor.desk.run(claim)
    assert result.state == "done", result
    run_id, found = latest(ws, "dear")
    assert run_id.endswith(identity[:10]) and len(found) == 1
    proposals = json.loads((Path(result.output or "") / "proposals.json").read_text("utf-8"))
    [candidate] = [c for c in proposals["candidates"] if c["id"] == found[0]]
    assert candidate["claimed_saving_nok"] == 3_000_000  # (9000 − 6000) × 1000
