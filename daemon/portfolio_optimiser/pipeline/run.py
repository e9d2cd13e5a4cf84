"""One project run, steps 1–8 of DESIGN §4, bounded by stop criteria and budgets.

Decides: the candidates of one run and what each falsifier said of them. Navigates the bundle into
a bounded context, folds in what experts taught (the only path for verdicts), proposes (the local rules
always, then a model's additions when a plan selects a proposer), gates every
candidate through the deterministic validator with informed, bounded refinement, has the selected
checker advisors debate each valid candidate, and records each candidate as an assessment, a plan,
consultations and a conclusion. It never writes outputs (the daemon does) and never decides by vote.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path

from portfolio_optimiser.context.candidates import sources_of
from portfolio_optimiser.context.changes import line_changes
from portfolio_optimiser.context.correlation import FrameRefused
from portfolio_optimiser.context.frame import backtest_of, frame_of, frame_refusal
from portfolio_optimiser.context.frontmatter import Concept
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.models import Candidate, Project
from portfolio_optimiser.context.navigate import ProblemKind, navigate_bundle
from portfolio_optimiser.context.priced_request import price_request
from portfolio_optimiser.context.reference import ProjectReferences, references_of
from portfolio_optimiser.context.render import render_context
from portfolio_optimiser.context.tender import coverage
from portfolio_optimiser.learning.insights import fold
from portfolio_optimiser.learning.verdict_store import LearnedVerdict, VerdictStore
from portfolio_optimiser.pipeline.precedent import precedents
from portfolio_optimiser.reasoning.store import Refusal

from .budget import Budget, BudgetExceeded, BudgetMiddleware, PortfolioMeter, TokenMeter
from .outcome import Decided, LineFacts, RunResult, StopReason
from .prompts import hypothesis_prompt
from .propose import propose_locally, propose_with_model
from .review import review
from .state import (
    ClientFactory,
    ReasoningSession,
    RunSettings,
    RunState,
    default_client_factory,
    materiality_of,
)
from .why_none import why_none

__all__ = [
    "ClientFactory",
    "ReasoningSession",
    "RunSettings",
    "default_client_factory",
    "materiality_of",
    "run_project",
]


def reference_version_note(references: ProjectReferences, band: float) -> str:
    """What a run says of the version of the reference fit its figures come from: a later
    version runs it again only when it moves them by more than the band (DESIGN §12)."""
    said = f"reference prices: measured against version {references.portfolio_version} of the "
    if not band:
        return said + "portfolio's fit; any later version that moves a saving runs this again"
    floor = f"{references.min_saving_nok / 2:,.0f}".replace(",", " ")
    return (
        said + "portfolio's fit; later versions moved these savings by less than the rerun band "
        f"({band:.0%} of a saving, at least {floor} NOK) or this project would have run again "
        "([reference] rerun_band)"
    )


async def run_project(
    bundle: Path,
    *,
    verdicts: VerdictStore,
    budget: Budget,
    settings: RunSettings,
    reasoning: ReasoningSession,
    run_id: str,
    portfolio_meter: PortfolioMeter | None = None,
    client_factory: ClientFactory = default_client_factory,
    references: ProjectReferences | None = None,
    portfolio: Mapping[str, Project] | None = None,
    previous: Project | None = None,
) -> RunResult:
    """Run one project. Raises only for a bundle that cannot be read (``BundleError``)."""
    # The measure types experts have judged are offered when a kuttliste item names none.
    judged = {v.key.measure_type for v in verdicts.approved() if v.key.measure_type}
    read: dict[str, Concept] = {}
    project = load_ir_projections(bundle, known_types=judged, read=read)
    refused = frame_refusal(project, settings.frame)
    if refused is not None:
        raise FrameRefused(refused)
    navigation = navigate_bundle(bundle, read=read)
    context = render_context(navigation, budget_chars=settings.context_chars)
    meter = TokenMeter(budget)
    run = RunState(
        project=project,
        bundle=bundle,
        run_id=run_id,
        task=f"{project.id}--{run_id}",
        settings=settings,
        reasoning=reasoning,
        meter=meter,
        middleware=[BudgetMiddleware(meter, portfolio_meter)],
        client_factory=client_factory,
        references=references or ProjectReferences(project.id),
        portfolio=dict(portfolio or {}),
        teaching=precedents(verdicts.verdicts()),
    )
    # What navigation refused or could not find is said in the run's notes (and so in the report),
    # as check-bundle says it: a refused link is never followed, but never silent either.
    run.notes.extend(
        str(problem) for problem in navigation.problems if problem.kind is not ProblemKind.CYCLE
    )
    if run.references.lines:
        floor = run.references
        run.notes.append(
            "reference prices: a line is flagged only when its saving would be at least "
            f"{floor.min_saving_nok:,.0f} NOK and {floor.min_share:.1%} of the project "
            "([reference] min_saving_nok, min_share)".replace(",", " ")
        )
        if run.references.portfolio_version:
            run.notes.append(reference_version_note(floor, settings.rerun_band))
    learned = fold(verdicts, project)
    stop: StopReason = "no_candidates"
    budget_stop: str | None = None
    try:
        async with asyncio.timeout(settings.run_timeout_s):
            propose_locally(run, verdicts)
            stop = "local_rules" if run.outcomes else "no_candidates"
            model_stop = await propose_with_model(run, context, learned, verdicts)
            if model_stop is not None:
                stop = model_stop
            for outcome_index, outcome in enumerate(run.outcomes):
                try:
                    run.outcomes[outcome_index] = await review(run, outcome)
                except Refusal as refusal:
                    # A record the store will not keep (text from a model it cannot make safe):
                    # the candidate keeps its validator decision, unreviewed, and the run says so.
                    run.notes.append(
                        f"{outcome.candidate.id}: its review could not be recorded ({refusal})"
                    )
    except BudgetExceeded as exc:
        budget_stop = exc.which
    except TimeoutError:
        stop = "timeout"
    finally:
        await run.close_clients()
        await run.commit()
    if not run.prompts:
        # The prompt a proposer would have seen is kept when no model was asked: it is the proof
        # that the fold (and only the fold) carries what experts taught.
        run.prompts.append(
            hypothesis_prompt(context=context, fold=learned, max_candidates=settings.max_candidates)
        )
    if run.withheld:
        run.notes.append(
            "withheld from what was sent to models: " + ", ".join(sorted(run.withheld))
        )
    shown = [c.candidate for c in run.outcomes] + run.declined  # every candidate the report lists
    # Validated: accepted by the validator, not rejected by the checker (the report's totals).
    accepted = frozenset(c.candidate.id for c in run.outcomes if c.validated)
    # A risk claims nothing: it cuts no line of the frame.
    cuts = [c for c in shown if not c.is_risk]
    frame = frame_of(project, cuts, accepted=accepted, rule=settings.frame)
    return RunResult(
        project_id=project.id,
        run_id=run_id,
        task=run.task,
        ran_locally=run.proposer is None and not any(c.checker.advisors for c in run.outcomes),
        proposer=run.proposer,
        local_because=run.local_because,
        withheld=tuple(sorted(run.withheld)),
        learned=learned,
        changes=(
            tuple(line_changes(previous, project))
            if previous is not None and previous.id == project.id
            else None
        ),
        sources=sources_of(project, shown),
        frame=frame,
        backtest=backtest_of(project, frame),
        lines=_lines(project, shown),
        base_estimate_nok=project.cost_total_nok,
        decided=_decided(verdicts, shown),
        learned_from=_learned_from(verdicts, [c.candidate for c in run.outcomes]),
        declined=tuple(run.declined),
        references={
            c.candidate.id: ref
            for c in run.outcomes
            if c.awaits_verdict  # what the expert is asked about is shown with its reference
            for ref in references_of(c.candidate, run.references)
        },
        candidates=tuple(run.outcomes),
        reference_version=run.references.portfolio_version,
        stop_reason=stop,
        budget_stop=budget_stop,
        tokens={"input_tokens": meter.input_tokens, "output_tokens": meter.output_tokens},
        attempts=run.attempts,
        hypothesis_prompts=tuple(run.prompts),
        models=tuple(dict.fromkeys(run.models)),
        notes=tuple(run.notes),
        tender=coverage(project, run.references) if project.document == "tender" else None,
        priced=price_request(project, run.references),
        none_because=(
            ()
            if shown or project.document == "price-request"
            else why_none(
                project,
                run.references,
                verdicts.approved(),
                others=len([p for p in run.portfolio if p != project.id]),
            )
        ),
    )


def _lines(project: Project, candidates: Sequence[Candidate]) -> dict[str, LineFacts]:
    found = {}
    for candidate in candidates:
        for code in candidate.affected_codes:
            line = project.line(code)
            if line is not None:
                found[code] = LineFacts(
                    title=line.title,
                    amount_nok=line.amount_nok,
                    quantity=line.quantity,
                    unit=line.unit,
                    unit_price_nok=line.unit_price_nok,
                )
    return found


def _as_decided(verdict: LearnedVerdict) -> Decided:
    return Decided(
        decision=str(verdict.decision),
        reviewer=verdict.reviewer,
        decided_at=verdict.decided_at,
        adjusted_saving_nok=verdict.adjusted_saving_nok,
        rationale=verdict.rationale,
        candidate_id=verdict.candidate_id,
        project_id=verdict.key.project_id,
        signed_with=verdict.signed_with,
    )


def _decided(verdicts: VerdictStore, candidates: Sequence[Candidate]) -> dict[str, Decided]:
    """The candidates of this run an expert has decided (in an earlier run or version)."""
    return {
        c.id: _as_decided(verdict)
        for c in candidates
        if (verdict := verdicts.get(c.id)) is not None
    }


def _learned_from(verdicts: VerdictStore, candidates: Sequence[Candidate]) -> dict[str, Decided]:
    """Each learned candidate's source verdict."""
    found = {}
    for candidate in candidates:
        kind, _, source = candidate.origin.partition(":")
        verdict = verdicts.get(source) if kind == "verdict" else None
        if verdict is not None:
            found[candidate.id] = _as_decided(verdict)
    return found
