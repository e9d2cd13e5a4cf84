"""The report as the cost expert's worksheet (issue 23, item 1), through the daemon: every
candidate with its line, its working in Norwegian figures, its consequence and decision point;
and a candidate an expert decided is shown as decided in the next version's run, never asked for
again, with an adjusted saving above the claim flagged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import structlog

from portfolio_optimiser.config import load_config
from portfolio_optimiser.daemon.once import run_once
from portfolio_optimiser.daemon.workspace import Workspace

REPO = Path(__file__).resolve().parent.parent
LILLEVIK = REPO / "shared" / "examples" / "portfolio" / "lillevik-school"


def _run(ws: Workspace) -> None:
    run_once(ws, load_config(), log=structlog.get_logger("t"), environ={"CI": "true"})


def _runs(ws: Workspace) -> list[Path]:
    return sorted((ws.outbox / "runs" / "lillevik-school").iterdir())


def _templates(run: Path) -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted((run / "verdicts").glob("*.json")):
        data = json.loads(path.read_text("utf-8"))
        found[data["candidate"]["title"]] = data
    return found


def _decide(ws: Workspace, template: dict[str, Any], **fields: Any) -> None:
    filled = dict(template) | fields
    filled.pop("$schema", None)
    path = ws.inbox_verdicts / f"{template['id']}.json"
    path.write_text(json.dumps(filled, ensure_ascii=False, indent=2), "utf-8")


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    workspace = Workspace.at(tmp_path / "ws", environ={})
    workspace.ensure()
    return workspace


def test_each_candidate_shows_its_line_its_working_consequence_and_decision_point(
    ws: Workspace, tmp_path: Path
) -> None:
    shutil.copytree(LILLEVIK, ws.inbox_projects / "lillevik-school")
    _run(ws)
    [run] = _runs(ws)
    report = (run / "report.md").read_text("utf-8")
    sheet = report.split("## The candidates, one by one")[1].split("\n## ")[0]
    windows = sheet.split("Standard window sizes")[1].split("### ")[0]
    assert "- Line: 02.3 Yttervegger: 3 150 m2 × 9 400 NOK/m2 = 29 610 000 NOK" in windows
    assert (
        "- Saving: 420 m2 × 1 900 NOK/m2 = 798 000 NOK; 2,7 % of the line, 0,23 % of the base "
        "estimate (350 395 000 NOK)" in windows
    )
    assert "420 × 1 900 = 798 000 NOK" in windows
    assert "- Consequence: Fewer window formats" in windows
    assert "- Decide by: 2027-04-15, before the facade drawings are frozen" in windows
    assert "- Verdict: awaiting a verdict" in windows
    assert "| 02.3 Yttervegger |" in report
    template = _templates(run)["Standard window sizes"]["candidate"]
    assert template["consequence"].startswith("Fewer window formats")
    assert template["decide_by"].startswith("2027-04-15")
    assert "proposal_rationale" not in template


@pytest.mark.loadbearing
def test_a_decided_candidate_is_shown_as_decided_in_the_next_version_and_not_asked_again(
    ws: Workspace,
) -> None:
    shutil.copytree(LILLEVIK, ws.inbox_projects / "lillevik-school")
    _run(ws)
    [first] = _runs(ws)
    templates = _templates(first)
    windows = templates["Standard window sizes"]
    cladding = templates["Wood cladding instead of brick on upper floors"]
    _decide(
        ws,
        windows,
        decision="approved_with_adjustment",
        rationale="Four formats are enough.",
        reviewer="KE",
        adjusted_saving_nok=900000,
        decided_at="2026-12-01T10:00:00Z",
    )
    _decide(ws, cladding, decision="rejected", rationale="Brick stays.", reviewer="KE")
    _run(ws)
    revised = ws.inbox_projects / "lillevik-school"
    shutil.copytree(LILLEVIK, revised)
    (revised / "context" / "revision.md").write_text("# Revision 2\n\nNew site plan.\n", "utf-8")
    _run(ws)
    [second] = [r for r in _runs(ws) if r != first]
    report = (second / "report.md").read_text("utf-8")
    row = next(
        ln for ln in report.splitlines() if f"`{windows['id']}`" in ln and ln.startswith("|")
    )
    assert "approved by KE on 2026-12-01, at 900 000 NOK ⚠ above the claim" in row
    row = next(
        ln for ln in report.splitlines() if f"`{cladding['id']}`" in ln and ln.startswith("|")
    )
    assert "rejected by KE" in row
    assert windows["candidate"]["title"] not in _templates(second)
    assert cladding["candidate"]["title"] not in _templates(second)
    steps = report.split("## What to do next")[1]
    assert "Already decided, so not asked for again" in steps
    assert f"verdicts/{windows['id']}" not in steps
    page = (ws.outbox / "portfolio.md").read_text("utf-8")
    above = page.split("## Approved above the claim")[1].split("\n## ")[0]
    assert f"| lillevik-school | `{windows['id']}` | 798 000 | 900 000 ⚠ |" in above
