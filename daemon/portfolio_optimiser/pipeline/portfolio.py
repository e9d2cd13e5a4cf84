"""Run a portfolio: every project concurrently, under one ledger that spans runs and restarts.

Decides: which projects start now. A project the ledger cannot fund is never started (it waits,
it has not failed); a wave reserves each member's claim; the spend file is read strictly at the
start and written atomically after the pass. A project whose bundle cannot be read ends as an
error with its sentence; it never takes its wave down.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from portfolio_optimiser.context.errors import BundleError
from portfolio_optimiser.learning.verdict_store import VerdictStore

from .budget import Budget, PortfolioBudget, PortfolioMeter, PortfolioOutcome, Spend, run_waves
from .outcome import RunResult
from .run import ClientFactory, ReasoningSession, RunSettings, default_client_factory, run_project

__all__ = ["ProjectRun", "run_portfolio"]


@dataclass(frozen=True)
class ProjectRun:
    bundle: Path
    result: RunResult | None = None
    error: str | None = None

    @property
    def tokens(self) -> int:
        if self.result is None:
            return 0
        return self.result.tokens["input_tokens"] + self.result.tokens["output_tokens"]

    @property
    def budget_stop(self) -> str | None:
        return self.result.budget_stop if self.result else None


async def run_portfolio(
    bundles: Sequence[Path],
    *,
    spend: Spend,
    portfolio_tokens: int,
    budget: Budget,
    settings: RunSettings,
    reasoning: ReasoningSession,
    verdicts: VerdictStore,
    run_id: str,
    concurrency: int = 4,
    client_factory: ClientFactory = default_client_factory,
) -> tuple[PortfolioOutcome[Path, ProjectRun], Spend]:
    """Run ``bundles``; return the pass and the spend ledger with every finished run added."""
    meter = PortfolioMeter(
        PortfolioBudget(total_tokens=portfolio_tokens, per_run_claim=budget.run_tokens),
        spent=spend.spent_tokens,
    )

    async def run_one(bundle: Path) -> ProjectRun:
        try:
            result = await run_project(
                bundle,
                verdicts=verdicts,
                budget=budget,
                settings=settings,
                reasoning=reasoning,
                run_id=run_id,
                portfolio_meter=meter,
                client_factory=client_factory,
            )
        except BundleError as exc:
            return ProjectRun(bundle=bundle, error=str(exc))
        return ProjectRun(bundle=bundle, result=result)

    outcome = await run_waves(bundles, run_one, meter=meter, concurrency=concurrency)
    for project_run in outcome.completed:
        if project_run.result is not None:
            spend = spend.add_run(
                run_id=f"{project_run.result.project_id}/{run_id}",
                project_id=project_run.result.project_id,
                tokens=project_run.tokens,
                budget_stop=project_run.budget_stop,
            )
    return outcome, spend
