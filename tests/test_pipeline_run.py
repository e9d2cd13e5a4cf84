"""run_project: the two falsifiers, informed refinement, the local path, budgets (DESIGN §4)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from portfolio_optimiser.context import ir as ir_module
from portfolio_optimiser.context import navigate as navigate_module
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.navigate import navigate_bundle
from portfolio_optimiser.context.render import render_context
from portfolio_optimiser.learning import VerdictStore, fold
from portfolio_optimiser.pipeline.outcome import RunResult
from portfolio_optimiser.pipeline.prompts import hypothesis_prompt
from portfolio_optimiser.pipeline.run import run_project
from portfolio_optimiser.reasoning.modes import Mode
from portfolio_optimiser.reasoning.records import DisagreementInput, StoredConclusion
from portfolio_optimiser.reasoning.store import open_disagreements

from .pipeline_helpers import (
    CHECKER,
    PROPOSER,
    budget,
    factory,
    measure,
    proposal,
    session,
    settings,
    small_bundle,
)


def run(bundle: Path, reasoning: Any, handlers: dict[str, Any], **kwargs: Any) -> RunResult:
    return asyncio.run(
        run_project(
            bundle,
            verdicts=kwargs.pop("verdicts", VerdictStore()),
            budget=kwargs.pop("budget", budget()),
            settings=kwargs.pop("settings", settings()),
            reasoning=reasoning,
            run_id=kwargs.pop("run_id", "r1"),
            client_factory=factory(handlers),
            **kwargs,
        )
    )


def approve(_m: Any, _o: Any) -> str:
    return "Figures hold.\nVERDICT: APPROVE"


def reject(_m: Any, _o: Any) -> str:
    return "It counts 02.3 twice.\nVERDICT: REJECT — counts 02.3 twice"


@pytest.mark.loadbearing
def test_a_run_reads_each_file_of_its_bundle_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its figures and its navigation come from one read of each file: never two versions of
    a file saved while the run read it."""
    reads: list[str] = []
    for module in (ir_module, navigate_module):
        real = module.read_concept

        def counted(path: Path, rel: str, real: Any = real) -> Any:
            reads.append(rel)
            return real(path, rel)

        monkeypatch.setattr(module, "read_concept", counted)
    reasoning = session(tmp_path, PROPOSER, CHECKER)
    result = run(
        small_bundle(tmp_path / "b"),
        reasoning,
        {"p1": lambda m, o: proposal(measure()), "k1": approve},
    )
    assert result.candidates, "the run ran"
    assert "cost/02.3.md" in reads
    assert sorted(reads) == sorted(set(reads)), "a file read twice"


@pytest.mark.loadbearing
def test_checker_reject_blocks_a_valid_candidate(tmp_path: Path) -> None:
    reasoning = session(tmp_path, PROPOSER, CHECKER)
    result = run(
        small_bundle(tmp_path / "b"),
        reasoning,
        {"p1": lambda m, o: proposal(measure()), "k1": reject},
    )
    [only] = result.candidates
    assert only.validator.outcome == "accepted"  # the validator's decision is untouched
    assert only.checker.outcome == "rejected"
    assert only.checker.reason == "counts 02.3 twice"
    assert only.blocked
    loaded = reasoning.store.load()
    [disagreement] = open_disagreements(loaded, only.assessment or "")
    assert isinstance(disagreement.body, DisagreementInput)
    assert only.conclusion is None  # refused while the disagreement is open


@pytest.mark.loadbearing
def test_checker_approval_concludes_with_a_computed_review(tmp_path: Path) -> None:
    reasoning = session(tmp_path, PROPOSER, CHECKER)
    result = run(
        small_bundle(tmp_path / "b"),
        reasoning,
        {"p1": lambda m, o: proposal(measure()), "k1": approve},
    )
    [only] = result.candidates
    assert (only.validator.outcome, only.checker.outcome) == ("accepted", "approved")
    conclusion = reasoning.store.load().by_id(only.conclusion or "")
    assert conclusion is not None and isinstance(conclusion.body, StoredConclusion)
    assert conclusion.body.reviewed_by == ("k1",)
    assert conclusion.body.independent_review_count == 1


def test_a_checker_without_a_verdict_line_fails_open(tmp_path: Path) -> None:
    reasoning = session(tmp_path, PROPOSER, CHECKER)
    result = run(
        small_bundle(tmp_path / "b"),
        reasoning,
        {"p1": lambda m, o: proposal(measure()), "k1": lambda m, o: "Looks plausible."},
    )
    [only] = result.candidates
    assert only.checker.outcome == "no_verdict"
    assert not only.blocked


@pytest.mark.loadbearing
def test_a_validator_rejection_is_never_reported_as_the_checkers(tmp_path: Path) -> None:
    reasoning = session(tmp_path, PROPOSER, CHECKER)
    too_much = measure(saving=9_000_000)
    result = run(
        small_bundle(tmp_path / "b", kuttliste=False),
        reasoning,
        {"p1": lambda m, o: proposal(too_much), "k1": approve},
        settings=settings(max_attempts=1),
    )
    [only] = result.candidates
    assert only.validator.outcome == "rejected"
    assert only.checker.outcome == "not_run"  # a rejected candidate never reaches the checker


@pytest.mark.loadbearing
def test_refinement_carries_the_latest_rejection_reason_and_the_proposer_corrects(
    tmp_path: Path,
) -> None:
    prompts: list[str] = []

    def proposer(messages: list[Any], _o: Any) -> str:
        prompt = messages[-1].text or ""
        prompts.append(prompt)
        if "saving_within_cost" in prompt:
            return proposal(measure(saving=144000))
        return proposal(measure(saving=9_000_000))

    result = run(
        small_bundle(tmp_path / "b", kuttliste=False),
        session(tmp_path, PROPOSER, CHECKER),
        {"p1": proposer, "k1": approve},
    )
    assert [c.validator.outcome for c in result.candidates] == ["rejected", "accepted"]
    assert result.attempts == 2
    rejection = result.candidates[0].validator
    assert rejection.outcome == "rejected"
    assert rejection.reason in prompts[1]  # verbatim, the latest reason only
    assert (
        "9000000"
        not in prompts[1].split("rejected by the deterministic validator", 1)[1].split("rule", 1)[0]
    )
    assert "rejected by the deterministic validator" not in prompts[0]


def test_refinement_is_bounded_by_max_attempts(tmp_path: Path) -> None:
    result = run(
        small_bundle(tmp_path / "b", kuttliste=False),
        session(tmp_path, PROPOSER, CHECKER),
        {"p1": lambda m, o: proposal(measure(saving=9_000_000)), "k1": approve},
        settings=settings(max_attempts=2),
    )
    assert result.stop_reason == "max_attempts"
    assert result.attempts == 2
    # The same measure is gated once; proposed again unchanged, the model is told again why.
    assert [c.validator.outcome for c in result.candidates] == ["rejected"]


@pytest.mark.loadbearing
def test_the_hypothesis_prompt_is_the_context_and_the_fold_and_nothing_else(tmp_path: Path) -> None:
    bundle = small_bundle(tmp_path / "b")
    result = run(
        bundle,
        session(tmp_path, PROPOSER, CHECKER),
        {"p1": lambda m, o: proposal(measure()), "k1": approve},
    )
    context = render_context(navigate_bundle(bundle), budget_chars=settings().context_chars)
    expected = hypothesis_prompt(
        context=context, fold=fold(VerdictStore(), load_ir_projections(bundle)), max_candidates=5
    )
    assert result.hypothesis_prompts[0] == expected


@pytest.mark.loadbearing
def test_with_no_advisor_the_run_completes_locally_and_says_so(tmp_path: Path) -> None:
    reasoning = session(tmp_path, PROPOSER, CHECKER, mode=Mode.CI)
    result = run(small_bundle(tmp_path / "b"), reasoning, {})
    assert result.ran_locally
    assert result.proposer is None
    assert result.stop_reason == "local_rules"
    [only] = result.candidates
    assert (only.validator.outcome, only.checker.outcome, only.plan_outcome) == (
        "accepted",
        "not_run",
        "decide_locally",
    )
    conclusion = reasoning.store.load().by_id(only.conclusion or "")
    assert conclusion is not None and isinstance(conclusion.body, StoredConclusion)
    assert "Structured local review" in conclusion.body.rationale
    assert conclusion.body.independent_review_count == 0


@pytest.mark.loadbearing
def test_rerunning_an_unchanged_project_consults_nobody(tmp_path: Path) -> None:
    reasoning = session(tmp_path, PROPOSER, CHECKER)
    calls: list[int] = []

    def checker(m: Any, o: Any) -> str:
        calls.append(1)
        return approve(m, o)

    bundle = small_bundle(tmp_path / "b")
    run(bundle, reasoning, {"p1": lambda m, o: proposal(measure()), "k1": checker}, run_id="r1")
    first = len(calls)
    second = run(
        bundle, reasoning, {"p1": lambda m, o: proposal(measure()), "k1": checker}, run_id="r2"
    )
    assert first > 0 and len(calls) == first
    assert [c.plan_outcome for c in second.candidates] == ["reuse_prior"]
    assert second.candidates[0].checker.outcome == "approved"


@pytest.mark.loadbearing
def test_a_budget_stop_is_its_own_field_and_keeps_finished_work(tmp_path: Path) -> None:
    result = run(
        small_bundle(tmp_path / "b"),
        session(tmp_path, PROPOSER, CHECKER),
        {"p1": lambda m, o: proposal(measure()), "k1": approve},
        budget=budget(run_tokens=400),
    )
    assert result.budget_stop is not None
    assert result.stop_reason != result.budget_stop


def test_the_proposer_reads_the_bundle_through_tools(tmp_path: Path) -> None:
    from agent_framework import ChatResponse, Content, Message

    seen: list[str] = []

    def proposer(messages: list[Any], options: Any) -> Any:
        results = [
            c for m in messages for c in m.contents if getattr(c, "type", "") == "function_result"
        ]
        if not results:
            call = Content.from_function_call(
                call_id="c1", name="read_concept", arguments={"path": "cost/02.3.md"}
            )
            return ChatResponse(messages=[Message(role="assistant", contents=[call])])
        seen.append(str(results[0].result))
        return proposal(measure())

    result = run(
        small_bundle(tmp_path / "b"),
        session(tmp_path, PROPOSER, CHECKER),
        {"p1": proposer, "k1": approve},
    )
    assert "unit_price_nok: 6000" in seen[0]
    assert result.candidates[0].validator.outcome == "accepted"


def test_candidate_ids_keep_the_proposers_literal(tmp_path: Path) -> None:
    result = run(
        small_bundle(tmp_path / "b"),
        session(tmp_path, PROPOSER, CHECKER, mode=Mode.CI),
        {},
    )
    [local] = result.candidates
    model = run(
        small_bundle(tmp_path / "c", kuttliste=False),
        session(tmp_path / "other", PROPOSER, CHECKER),
        {"p1": lambda m, o: json.dumps({"candidates": [measure(saving=144000.0)]}), "k1": approve},
    )
    assert local.candidate.saving_literal == "144000"
    assert model.candidates[0].candidate.saving_literal == "144000.0"
    assert local.candidate.id != model.candidates[0].candidate.id


@pytest.mark.loadbearing
def test_a_measure_proposed_again_after_acceptance_is_not_gated_twice(tmp_path: Path) -> None:
    calls: list[int] = []

    def proposer(_m: Any, _o: Any) -> str:
        calls.append(1)  # first answer: a good one and a bad one; then the good one again
        if len(calls) == 1:
            return proposal(measure(), measure(saving=9_000_000, measure_type="scope-reduction"))
        return proposal(measure())

    result = run(
        small_bundle(tmp_path / "b"),
        session(tmp_path, PROPOSER, CHECKER),
        {"p1": proposer, "k1": approve},
    )
    ids = [c.candidate.id for c in result.candidates]
    accepted = [c for c in result.candidates if c.validator.outcome == "accepted"]
    assert len(accepted) == 1
    assert ids.count(accepted[0].candidate.id) == 1
    assert any("already checked in this run" in note for note in result.notes)


@pytest.mark.loadbearing
def test_a_model_repeating_a_rejected_local_candidate_is_not_gated_twice(tmp_path: Path) -> None:
    # Seen against a real server: the model proposed, verbatim, a kuttliste item the validator
    # had just rejected; gating it again recorded a second conclusion on the same subject.
    bundle = small_bundle(tmp_path / "b")
    cut = bundle / "k" / "k-01.md"
    cut.write_text(cut.read_text().replace("144000", "9000000"))
    too_much = measure(saving=9000000)
    result = run(
        bundle,
        session(tmp_path, PROPOSER, CHECKER),
        {"p1": lambda m, o: proposal(too_much), "k1": approve},
        settings=settings(max_attempts=2),
    )
    assert [c.candidate.origin for c in result.candidates] == ["measure-option:k-01"]
    assert result.candidates[0].validator.outcome == "rejected"
    assert any("already checked in this run" in note for note in result.notes)


def judged_once(tmp_path: Path, decision: str, rationale: str) -> tuple[RunResult, RunResult]:
    """The small bundle run, its one candidate judged, then run again on a fresh store."""
    from portfolio_optimiser.context.verdict import Decision
    from portfolio_optimiser.learning import LearnedVerdict
    from portfolio_optimiser.learning.verdict_store import CandidateKey

    bundle = small_bundle(tmp_path / "b")
    first = run(bundle, session(tmp_path, PROPOSER, CHECKER, mode=Mode.CI), {})
    [only] = first.candidates
    store = VerdictStore()
    store.add(
        LearnedVerdict(
            candidate_id=only.candidate.id,
            decision=Decision(decision),
            rationale=rationale,
            reviewer="KE",
            key=CandidateKey.from_candidate(only.candidate),
            source=tmp_path / "v.json",
        )
    )
    second = run(
        bundle, session(tmp_path / "s2", PROPOSER, CHECKER, mode=Mode.CI), {}, verdicts=store
    )
    return first, second


@pytest.mark.loadbearing
def test_a_candidate_an_expert_rejected_is_not_proposed_again(tmp_path: Path) -> None:
    _first, second = judged_once(tmp_path, "rejected", "A deferral, not a saving.")
    assert second.candidates == ()
    assert any("an expert rejected it" in note for note in second.notes)


@pytest.mark.loadbearing
def test_what_experts_taught_is_kept_as_the_prompt_carried_it(tmp_path: Path) -> None:
    first, second = judged_once(
        tmp_path, "approved", "Checked against the framework agreement (marker QX-1)."
    )
    assert first.learned == ""  # nothing taught yet: nothing claimed
    assert "QX-1" in second.learned
    assert second.learned in second.hypothesis_prompts[0]
