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


# --- a worksheet with no hidden step (issue 43, item 6) ---------------------------------------

NORDVIK = REPO / "shared" / "examples" / "learning" / "nordvik-school"
WINDOWS_DECIDE_BY = "2027-03-01, before the window supplier is chosen"  # only in this copy
LUMP_SUM = (
    "not recomputable: the kuttliste gives the saving as a lump sum, with no quantity × unit "
    "price or rate to recompute it from"
)


def _section(report: str, title: str) -> str:
    sheet = report.split("## The candidates, one by one")[1].split("\n## ")[0]
    return sheet.split(f"` {title}\n")[1].split("\n### ")[0]


def _row(report: str, title: str) -> str:
    return next(ln for ln in report.splitlines() if ln.startswith("| `") and f"| {title} |" in ln)


def _lillevik(ws: Workspace) -> None:
    """The example school, its window measure given a decision point no other measure has."""
    copy = ws.inbox_projects / "lillevik-school"
    shutil.copytree(LILLEVIK, copy)
    option = copy / "kuttliste" / "k-01-standard-window-sizes.md"
    text = option.read_text("utf-8")
    said = 'latest_decision_point: "2027-04-15, before the facade drawings are frozen in the forprosjekt"'
    assert said in text
    option.write_text(text.replace(said, f'latest_decision_point: "{WINDOWS_DECIDE_BY}"'), "utf-8")


def test_a_lump_sum_is_shown_as_not_recomputable_and_a_product_as_recomputed(
    ws: Workspace,
) -> None:
    shutil.copytree(LILLEVIK, ws.inbox_projects / "lillevik-school")
    _run(ws)
    [run] = _runs(ws)
    report = (run / "report.md").read_text("utf-8")
    cladding = _section(report, "Wood cladding instead of brick on upper floors")
    assert (
        "- Saving: 2 350 000 NOK, a lump sum (no quantity × unit price given); 7,9 % of the line "
        "(29 610 000 NOK), 0,67 % of the base estimate (350 395 000 NOK)" in cladding
    )
    assert f"- Validator: accepted, {LUMP_SUM}. What it checked: 2 350 000 NOK of " in cladding
    # What it did recompute is the line, said as the line's product, not as the saving's.
    assert "line 02.3: 3 150 × 9 400 = 29 610 000 NOK, matching its amount" in cladding
    assert "the affected lines' quantity × unit price match their amounts" not in report
    assert f"| accepted, {LUMP_SUM} |" in _row(
        report, "Wood cladding instead of brick on upper floors"
    )
    ventilation = _section(report, "Simplified ventilation zoning")  # no line product either
    assert f"- Validator: accepted, {LUMP_SUM}. What it checked: 1 850 000 NOK of" in ventilation
    assert "nothing to recompute" not in report
    windows = _section(report, "Standard window sizes")
    assert "- Validator: accepted (798 000 NOK of 29 610 000 NOK affected cost; 420 × 1 900 = " in (
        windows
    )
    assert "not recomputable" not in windows
    assert "| accepted | not run |" in _row(report, "Standard window sizes")
    assert "not recomputable" not in _row(report, "Reuse excavated masses on site")


@pytest.mark.loadbearing
def test_a_learned_measure_shows_its_rate_times_its_basis_and_its_sources_decision_point(
    ws: Workspace,
) -> None:
    _lillevik(ws)
    _run(ws)
    [first] = _runs(ws)
    windows = _templates(first)["Standard window sizes"]
    assert windows["candidate"]["decide_by"] == WINDOWS_DECIDE_BY
    _decide(
        ws,
        windows,
        decision="approved",
        rationale="Four formats are enough.",
        reviewer="KE",
        realization_rate=0.85,
        decided_at="2026-11-30T12:00:00Z",
    )
    _run(ws)  # promoted into the wiki
    page = ws.wiki / "verdicts" / f"{windows['id']}.md"
    assert f"decide_by: {WINDOWS_DECIDE_BY}" in page.read_text("utf-8")
    # The file leaves the inbox: what is learned now comes from the wiki page alone.
    (ws.inbox_verdicts / f"{windows['id']}.json").unlink()
    shutil.copytree(NORDVIK, ws.inbox_projects / "nordvik-school")
    _run(ws)
    [run] = sorted((ws.outbox / "runs" / "nordvik-school").iterdir())
    report = (run / "report.md").read_text("utf-8")
    learned = _section(report, "Learned: standardisation on 02.3")
    assert (
        "- Saving: 253,33 NOK/m2 (learned rate: 798 000 NOK over 3 150 m2 in lillevik-school) "
        "× 3 150 m2 × 85 % expected realisation = 678 300 NOK, rounded down to two significant "
        "figures: 670 000 NOK; 2,3 % of the line" in learned
    )
    assert (
        "- Validator: accepted, not recomputable: its rate was learned from lillevik-school's "
        "figures, which the validator does not hold;" in learned
    )
    assert (
        f"- Consequence: Approved by KE for candidate {windows['id']} in lillevik-school, and "
        "proposed here at the rate it saved there, scaled to this project's quantity in m2 and "
        "the realisation the expert expects.\n" in learned
    )
    assert "carried as" not in report
    assert f"- Decide by: {WINDOWS_DECIDE_BY} (that of the measure it was learned from)" in learned
    row = _row(report, "Learned: standardisation on 02.3")
    assert "| accepted, not recomputable: its rate was learned from lillevik-school's" in row
    frame_row = next(ln for ln in report.splitlines() if "` Learned: " in ln and ln[0] == "|")
    assert frame_row.endswith(f"| {WINDOWS_DECIDE_BY} |")  # the ΔP table orders by it too
    # A measure takes its sum off its lines unless it declares a share (effect: proportional):
    # no ΔP here is larger than its saving, and nothing needs explaining.
    assert "A cut larger than the saving itself" not in report


def test_a_verdicts_decision_point_reaches_the_store_from_its_file_and_from_its_page(
    tmp_path: Path,
) -> None:
    from portfolio_optimiser.context.verdict import parse_verdict
    from portfolio_optimiser.learning import LearnedVerdict, promote_verdict, seed_store_from_bundle

    raw = {
        "id": "c-d67b7045b6ae3f01",
        "decision": "approved",
        "rationale": "Checked.",
        "reviewer": "KE",
        "candidate": {
            "project_id": "lillevik-school",
            "affected_codes": ["02.3"],
            "measure_type": "standardisation",
            "claimed_saving_nok": 798000,
            "decide_by": WINDOWS_DECIDE_BY,
        },
    }
    verdict = parse_verdict(json.dumps(raw).encode(), "v.json")
    assert LearnedVerdict.from_verdict(verdict, source=tmp_path).decide_by == WINDOWS_DECIDE_BY
    wiki = tmp_path / "wiki"
    wiki.mkdir()
    (wiki / "index.md").write_text("# Wiki\n", "utf-8")
    promote_verdict(verdict, wiki_root=wiki, run_id="r-1", at="2026-11-30T12:00:00Z")
    stored = seed_store_from_bundle(wiki).get("c-d67b7045b6ae3f01")
    assert stored is not None and stored.decide_by == WINDOWS_DECIDE_BY


def _frame_report(high_nok: float, low_nok: float, effect: str = "proportional") -> str:
    """The report of a one-line project whose line is drawn between ``low_nok`` and
    ``high_nok`` around its 10 000 000 NOK, and one kuttliste item saving a tenth of it."""
    from portfolio_optimiser.context.decisions import Accepted, Receipt
    from portfolio_optimiser.context.frame import FrameRule, frame_of
    from portfolio_optimiser.context.models import Candidate, CostLine, MeasureOption, Project
    from portfolio_optimiser.outputs.report import Redactor, render_report
    from portfolio_optimiser.pipeline.checker import CheckerOutcome
    from portfolio_optimiser.pipeline.outcome import CandidateRun, RunResult

    line = CostLine(code="02.3", amount_nok=10_000_000, min_nok=low_nok, max_nok=high_nok)
    item = MeasureOption(
        id="k",
        measure_type="simplification",
        affected_codes=("02.3",),
        estimated_saving_nok=1_000_000,
        effect=effect,  # type: ignore[arg-type]
    )
    project = Project(id="hall", name="hall", cost_lines=(line,), measure_options=(item,))
    cut = Candidate(
        project_id="hall",
        affected_codes=("02.3",),
        measure_type="simplification",
        claimed_saving_nok=1_000_000,
        title="Simpler walls",
        evidence=("cost/02.3.md",),
        origin="measure-option:k",
    )
    frame = frame_of(project, [cut], accepted=frozenset({cut.id}), rule=FrameRule())
    receipt = Receipt(candidate_id=cut.id, project_id="hall", checks=())
    run = CandidateRun(
        candidate=cut,
        validator=Accepted(candidate_id=cut.id, receipt=receipt),
        checker=CheckerOutcome(outcome="not_run"),
        attempt=1,
        materiality="high",
    )
    result = RunResult(
        project_id="hall",
        run_id="r-1",
        task="t",
        ran_locally=True,
        proposer=None,
        candidates=(run,),
        stop_reason="local_rules",
        frame=frame,
    )
    return render_report(result, redactor=Redactor(), stamp="2026-12-01T00:00:00Z", templates=())


def test_a_cut_to_p50_or_p85_beyond_the_saving_is_explained_once_and_only_then() -> None:
    # Every draw at or above the amount: a tenth of each is at least the saving.
    above = _frame_report(high_nok=14_000_000, low_nok=10_000_000)
    note = above.split("A cut larger than the saving itself")
    assert len(note) == 2  # once
    assert note[1].startswith(" (1 of the 1 here; `")
    assert "against a saving of 1 000 000 NOK) is the model, not an error" in note[1]
    assert "same share of every simulated draw of its lines as its saving is of" in note[1]
    # Every draw at or below it: the cut never exceeds the saving, and nothing needs saying.
    below = _frame_report(high_nok=10_000_000, low_nok=6_000_000)
    assert "| candidate | ΔP50 (NOK) | ΔP85 (NOK) |" in below
    assert "A cut larger than the saving" not in below
    # A sum off the line (effect: fixed) leaves its spread: the cut is the saving, exactly.
    fixed = _frame_report(high_nok=14_000_000, low_nok=10_000_000, effect="fixed")
    assert "A cut larger than the saving" not in fixed
    assert "| -1 000 000 | -1 000 000 |" in fixed
