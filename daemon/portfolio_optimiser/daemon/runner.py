"""The two things a bundle's run takes from the workspace: the learning store (seeded afresh for
every run) and the pipeline itself, with the budgets and the reasoning session of this daemon."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from portfolio_optimiser.context.verdict import VerdictError, parse_verdict
from portfolio_optimiser.learning import (
    LearnedVerdict,
    VerdictFrontmatterError,
    VerdictStore,
    seed_store_from_bundle,
)
from portfolio_optimiser.pipeline.budget import (
    Budget,
    PortfolioBudget,
    PortfolioMeter,
    read_spend,
)
from portfolio_optimiser.pipeline.outcome import RunResult
from portfolio_optimiser.pipeline.run import (
    ReasoningSession,
    RunSettings,
    run_project,
)
from portfolio_optimiser.reasoning.availability import AdvisorState
from portfolio_optimiser.reasoning.environment import admission_for
from portfolio_optimiser.reasoning.store import Admission, Store, availability_now

if TYPE_CHECKING:  # the processor calls these; typing only, no import cycle at run time
    from .processor import Processor

__all__ = ["learning_store", "open_circuits", "run_pipeline"]


def run_pipeline(processor: Processor, bundle: Path, run_id: str) -> RunResult:
    config = processor.config
    spend = read_spend(processor.workspace.spend_file)
    admission = admission_for(
        config,
        now=datetime.fromtimestamp(processor.clock(), UTC),
        environ=processor.environ,
        clock=lambda: datetime.now(UTC),
    )
    budget = Budget(
        run_tokens=config.budget.run_tokens,
        call_tokens=config.budget.call_tokens,
        max_rounds=max(config.stop.max_rounds, config.stop.max_attempts) * 4,
    )
    meter = PortfolioMeter(
        PortfolioBudget(
            total_tokens=config.budget.portfolio_tokens, per_run_claim=config.budget.run_tokens
        ),
        spent=spend.spent_tokens,
    )
    before = open_circuits(processor.reasoning_store, admission)
    result = asyncio.run(
        run_project(
            bundle,
            verdicts=learning_store(processor),
            budget=budget,
            settings=RunSettings.from_config(config),
            reasoning=ReasoningSession(processor.reasoning_store, admission),
            run_id=run_id,
            portfolio_meter=meter,
            client_factory=processor.client_factory,
            references=processor.portfolio.references(),
            portfolio=processor.portfolio.by_id(),
        )
    )
    # A circuit opened by this run is an operator's business: the journal says so once, here.
    for advisor, state in open_circuits(processor.reasoning_store, admission).items():
        if state.circuit is not None and (
            advisor not in before or before[advisor].circuit != state.circuit
        ):
            processor.log.warning(
                "advisor circuit opened",
                advisor=advisor,
                opened_by=str(state.circuit.opened_by),
                failures=state.circuit.failures,
                until=state.circuit.until.strftime("%Y-%m-%dT%H:%M:%SZ"),
                reason=state.reason,
                run=run_id,
            )
    if result.budget_stop:
        processor.log.warning(
            "run stopped by its budget",
            project=result.project_id,
            run=run_id,
            which=result.budget_stop,
        )
    return result


def open_circuits(store: Store, admission: Admission) -> dict[str, AdvisorState]:
    """The advisors whose circuit is open now (cooling down, not yet recovering), by id."""
    return {
        s.advisor: s
        for s in availability_now(store.load(), admission)
        if s.circuit is not None and not s.recovering
    }


def learning_store(processor: Processor) -> VerdictStore:
    """Seeded afresh for every run: the wiki's promoted verdicts, then each candidate's current
    verdict as the ledger recorded it. A file the daemon refused, or has not read since it
    changed, teaches nothing; a damaged wiki page is skipped and named, never fatal."""
    problems: list[tuple[str, str]] = []
    store = seed_store_from_bundle(processor.workspace.wiki, problems=problems)
    for page, why in problems:
        processor.log.warning("wiki page skipped by the learning fold", page=page, problem=why)
    for row in processor.ledger.latest_verdicts():
        path = processor.workspace.inbox_verdicts / row.name
        try:
            data = path.read_bytes()
        except OSError:
            continue  # taken away by the expert: the wiki keeps what was promoted
        if hashlib.sha256(data).hexdigest() != row.digest:
            continue  # edited since it was read; the daemon reads the new bytes first
        try:
            store.add(LearnedVerdict.from_verdict(parse_verdict(data, row.name), source=path))
        except (VerdictError, VerdictFrontmatterError) as exc:
            processor.log.warning(
                "verdict skipped by the learning fold", file=row.name, problem=str(exc)
            )
    return store
