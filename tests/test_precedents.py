"""Rejections teach: a measure type rejected twice on the same codes is not proposed again by the
learned rules or a model there; the planner's own item is checked and flagged with its precedent,
and the experts' words reach no prompt but through the fold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from portfolio_optimiser.context.verdict import Decision
from portfolio_optimiser.learning import LearnedVerdict, VerdictStore
from portfolio_optimiser.learning.verdict_store import CandidateKey
from portfolio_optimiser.outputs.report import Redactor, render_report

from .pipeline_helpers import CHECKER, PROPOSER, measure, proposal, session, small_bundle
from .test_pipeline_run import run

WHY = "Standard panels never fit this depot's bays (marker PX-3)"


def rejected(n: int, saving: int, *, measure_type: str = "standardisation") -> LearnedVerdict:
    key = CandidateKey(
        project_id=f"other-{n}",
        affected_codes=("02.3",),
        measure_type=measure_type,
        saving_literal=str(saving),
    )
    return LearnedVerdict(
        candidate_id=key.candidate_id() or "",
        decision=Decision.REJECTED,
        rationale=f"{WHY}. More words.",
        reviewer=f"R{n}",
        key=key,
        source=Path(f"v{n}.json"),
        decided_at=f"2026-11-0{n}T12:00:00Z",
    )


def store(*verdicts: LearnedVerdict) -> VerdictStore:
    found = VerdictStore()
    for verdict in verdicts:
        found.add(verdict)
    return found


@pytest.mark.loadbearing
def test_the_planners_own_item_is_checked_and_flagged_with_who_when_why(tmp_path: Path) -> None:
    heard: list[str] = []

    def checker(messages: list[Any], _o: Any) -> str:
        heard.extend(m.text or "" for m in messages)
        return "Figures hold.\nVERDICT: APPROVE"

    result = run(
        small_bundle(tmp_path / "b"),
        session(tmp_path, PROPOSER, CHECKER),
        {"p1": lambda m, o: proposal(), "k1": checker},
        verdicts=store(rejected(1, 100), rejected(2, 200)),
    )
    [own] = result.candidates
    assert own.candidate.origin == "measure-option:k-01" and own.validator.outcome == "accepted"
    assert own.precedent is not None
    assert "R1 on 2026-11-01" in own.precedent and "R2 on 2026-11-02" in own.precedent
    assert WHY in own.precedent
    assert heard and not any("PX-3" in text for text in heard)  # the checker never hears it
    report = render_report(result, redactor=Redactor(), stamp="s", templates=())
    assert "## Rejected before" in report and "⚠ rejected before" in report


def test_one_rejection_is_not_yet_a_lesson(tmp_path: Path) -> None:
    result = run(
        small_bundle(tmp_path / "b"),
        session(tmp_path, PROPOSER, CHECKER),
        {"p1": lambda m, o: proposal(), "k1": lambda m, o: "VERDICT: APPROVE"},
        verdicts=store(rejected(1, 100)),
    )
    assert [c.precedent for c in result.candidates] == [None]


@pytest.mark.loadbearing
def test_a_model_proposing_the_rejected_measure_there_is_not_heard_and_not_told_why(
    tmp_path: Path,
) -> None:
    prompts: list[str] = []

    def proposer(messages: list[Any], _o: Any) -> str:
        prompts.append("\n".join(m.text or "" for m in messages))
        return proposal(measure(saving=99_000, title="Narrow panels"))

    result = run(
        small_bundle(tmp_path / "b", kuttliste=False),
        session(tmp_path, PROPOSER, CHECKER),
        {"p1": proposer, "k1": lambda m, o: "VERDICT: APPROVE"},
        verdicts=store(rejected(1, 100), rejected(2, 200)),
    )
    assert result.candidates == ()
    assert any(
        "was not proposed: experts rejected standardisation on 02.3 2 times" in n
        for n in result.notes
    )
    # The fold may carry the experts' words; nothing else in a prompt may.
    for prompt in prompts:
        outside = prompt.replace(result.learned, "") if result.learned else prompt
        assert "PX-3" not in outside


@pytest.mark.loadbearing
def test_the_learned_rules_do_not_propose_a_measure_rejected_twice_there(tmp_path: Path) -> None:
    from portfolio_optimiser.context.ir import load_ir_projections

    bundle = small_bundle(tmp_path / "b", kuttliste=False)
    source = load_ir_projections(small_bundle(tmp_path / "src", project_id="src"))
    approved_key = CandidateKey(
        project_id="src", affected_codes=("02.3",), measure_type="phasing", saving_literal="144000"
    )
    approval = LearnedVerdict(
        candidate_id=approved_key.candidate_id() or "",
        decision=Decision.APPROVED,
        rationale="Good.",
        reviewer="KE",
        key=approved_key,
        source=Path("a.json"),
    )
    teach = store(
        approval, rejected(1, 100, measure_type="phasing"), rejected(2, 200, measure_type="phasing")
    )
    result = run(
        bundle,
        session(tmp_path, PROPOSER, CHECKER),
        {"p1": lambda m, o: proposal(), "k1": lambda m, o: "VERDICT: APPROVE"},
        verdicts=teach,
        portfolio={"src": source},
    )
    assert result.candidates == ()
    assert any("Learned: phasing on 02.3" in n and "was not proposed" in n for n in result.notes)
    untaught = run(
        bundle,
        session(tmp_path / "s2", PROPOSER, CHECKER),
        {"p1": lambda m, o: proposal(), "k1": lambda m, o: "VERDICT: APPROVE"},
        verdicts=store(approval),
        portfolio={"src": source},
    )
    assert [c.candidate.origin for c in untaught.candidates] == [f"verdict:{approval.candidate_id}"]
