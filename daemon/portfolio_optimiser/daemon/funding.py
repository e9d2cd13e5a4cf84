"""The portfolio's budget as the job floor sees it: what a wave of bundles may start, and a run's
hold on the budget from its start until it is charged (the ledger's, so every machine sees it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from portfolio_optimiser.config import Config
from portfolio_optimiser.pipeline.budget import PortfolioBudget, PortfolioMeter

from .ledger import Ledger
from .spend_book import spent_tokens
from .stamps import iso
from .workspace import Workspace

__all__ = ["Funding"]


@dataclass
class Funding:
    config: Config
    workspace: Workspace
    ledger: Ledger
    clock: Callable[[], float]

    def _meter(self) -> PortfolioMeter:
        """The portfolio's budget now: what is spent (strict: a corrupt spend file stops, never
        reads zero); what jobs in flight hold is the ledger's."""
        return PortfolioMeter(
            PortfolioBudget(
                total_tokens=self.config.budget.portfolio_tokens,
                per_run_claim=self.config.budget.run_tokens,
            ),
            spent=spent_tokens(self.workspace, self.ledger),
        )

    def left(self) -> int:
        """The tokens neither spent nor held by a job in flight."""
        return self._meter().remaining - self.ledger.budget.reserved_tokens()

    def holds(self, identity: str) -> bool:
        return identity in self.ledger.budget.holders()

    def hold(self, identity: str) -> bool:
        """A run's claim on the portfolio, held in the ledger until it is charged; False when
        another machine took what was left meanwhile."""
        meter = self._meter()
        return self.ledger.budget.reserve(
            identity,
            self.config.budget.run_tokens,
            cap=meter.budget.total_tokens,
            spent=meter.spent,
            now=iso(self.clock()),
        )

    def admit(self, entries: list[Path]) -> tuple[list[Path], list[tuple[Path, str]]]:
        """The ready bundles the portfolio can fund now, and those that wait (unclaimed), each
        with the sentence that says why."""
        if not entries:
            return [], []
        meter, held = self._meter(), self.ledger.budget.reserved_tokens()
        admitted, deferred = meter.admit_wave(entries, reserved=held)
        left = meter.remaining - held - len(admitted) * self.config.budget.run_tokens
        return admitted, [(entry, self.waiting(left)) for entry in deferred]

    def waiting(self, left: int) -> str:
        return (
            f"waiting for budget: {max(0, left)} portfolio tokens left, a run may use "
            f"{self.config.budget.run_tokens}; raise budget.portfolio_tokens to continue"
        )
