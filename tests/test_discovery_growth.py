"""A portfolio grown 8 → 20 → 60 projects through the daemon (issue 22): after every stage the
outbox's reference candidates are those the current classes give, each saving within the rerun
band of the current one (none stale beyond it; DESIGN §12), and an approval made at 8 projects
still applies at 60 (its id unchanged, counted as approved)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import structlog

from portfolio_optimiser.config import load_config
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.reference import MEASURE_TYPE, reference_candidates
from portfolio_optimiser.daemon.ledger import Ledger
from portfolio_optimiser.daemon.once import run_once
from portfolio_optimiser.daemon.references import read_reference_classes
from portfolio_optimiser.daemon.workspace import Workspace

from .synthetic_ns3451 import Portfolio3451, generate_ns3451

ENV = {"PORTFOLIO_OPTIMISER_REASONING_MODE": "ci"}
SEED = 22
STAGES = (8, 20, 60)


def once(ws: Workspace) -> None:
    report = run_once(ws, load_config(), log=structlog.get_logger("test"), environ=ENV)
    assert not report.pending


def published(ws: Workspace) -> dict[str, tuple[Path, dict[str, int]]]:
    """Each project's latest run (the ledger's) and its accepted reference candidates."""
    with Ledger.open(ws.state / "ledger.sqlite") as ledger:
        runs = ledger.records.project_runs()
    found = {}
    for project_id, _run_id, folder in runs:
        proposals = json.loads((Path(folder) / "proposals.json").read_text("utf-8"))
        found[project_id] = (
            Path(folder),
            {
                c["id"]: c["claimed_saving_nok"]
                for c in proposals["candidates"]
                if c["measure_type"] == MEASURE_TYPE and c["validator"]["outcome"] == "accepted"
            },
        )
    return found


def current(ws: Workspace) -> dict[str, dict[str, int]]:
    """What the published classes give every ingested project now."""
    index = read_reference_classes(
        ws.references, load_config().reference.rule(), log=structlog.get_logger("test")
    )
    found = {}
    for folder in sorted(ws.bundles_projects.iterdir()):
        if folder.is_dir() and not folder.name.startswith("."):
            project = load_ir_projections(folder)
            found[project.id] = {
                c.id: c.claimed_saving_nok
                for c in reference_candidates(project, index.assess(project))
            }
    return found


def approve(ws: Workspace, run: Path, candidate_id: str) -> None:
    template = json.loads((run / "verdicts" / f"{candidate_id}.json").read_text("utf-8"))
    template |= {
        "decision": "approved",
        "rationale": "The unit price is well above comparable projects; renegotiate.",
        "reviewer": "KE",
        "decided_at": "2026-12-03T10:00:00Z",
    }
    template.pop("$schema", None)
    (ws.inbox_verdicts / f"{candidate_id}.json").write_text(json.dumps(template), "utf-8")


def strongest_planted(portfolio: Portfolio3451, ws: Workspace) -> tuple[str, Path, str]:
    """A candidate on a line planted at +60 %: it stays overpriced however the portfolio grows."""
    best: tuple[float, str, Path, str] | None = None
    for project_id, (run, candidates) in published(ws).items():
        proposals = json.loads((run / "proposals.json").read_text("utf-8"))
        for c in proposals["candidates"]:
            if c["id"] not in candidates:
                continue
            code = c["affected_codes"][0]
            if portfolio.planted.get((project_id, code)) == 1.6:
                share = c["claimed_saving_nok"]
                if best is None or share > best[0]:
                    best = (share, project_id, run, c["id"])
    assert best is not None, "no +60 % line was found at 8 projects"
    return best[1], best[2], best[3]


@pytest.mark.loadbearing
def test_a_growing_portfolio_keeps_no_stale_candidate_and_its_approvals(tmp_path: Path) -> None:
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    portfolio = generate_ns3451(SEED, STAGES[-1])
    dropped = 0
    approved: tuple[str, str] | None = None
    for size in STAGES:
        for p in portfolio.projects[dropped:size]:
            p.write(ws.inbox_projects / p.project_id)
        dropped = size
        once(ws)
        outbox = {pid: cands for pid, (_run, cands) in published(ws).items()}
        now = current(ws)
        assert {p: set(c) for p, c in outbox.items()} == {p: set(c) for p, c in now.items()}, (
            f"stale reference candidates at {size} projects"
        )
        reference = load_config().reference
        beyond = {
            (project_id, cid): (held, now[project_id][cid])
            for project_id, cands in outbox.items()
            for cid, held in cands.items()
            if abs(now[project_id][cid] - held)
            > max(reference.rerun_band * held, reference.min_saving_nok / 2)
        }
        assert not beyond, f"savings moved beyond the band at {size} projects: {beyond}"
        assert len(outbox) == size
        if approved is None:
            project_id, run, candidate_id = strongest_planted(portfolio, ws)
            approve(ws, run, candidate_id)
            once(ws)
            approved = (project_id, candidate_id)
    assert approved is not None
    project_id, candidate_id = approved
    assert candidate_id in published(ws)[project_id][1], "the approved candidate's id moved"
    with Ledger.open(ws.state / "ledger.sqlite") as ledger:
        verdict = ledger.records.latest_verdict(candidate_id)
        row = ledger.records.candidate(candidate_id)
    assert verdict is not None and verdict.decision == "approved"
    assert row is not None and row.run_id == published(ws)[project_id][0].name
    saving = published(ws)[project_id][1][candidate_id]
    summary = (ws.outbox / "portfolio.md").read_text("utf-8")
    [row_text] = [ln for ln in summary.splitlines() if ln.startswith(f"| {project_id} |")]
    approved_nok = int(row_text.split("|")[4].replace(" ", ""))
    assert approved_nok == saving > 0, "the approval is not counted in portfolio.md"
