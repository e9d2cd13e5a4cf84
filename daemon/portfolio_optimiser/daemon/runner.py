"""A bundle's run: its inputs, built once per job from the workspace (the learning store seeded
afresh, the portfolio's reference classes and projects, the spend so far, the admission), and the
pipeline run on them with this daemon's budgets."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from portfolio_optimiser.config import Config
from portfolio_optimiser.context.errors import BundleError
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.models import Project
from portfolio_optimiser.context.reference import ProjectReferences
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
)
from portfolio_optimiser.pipeline.outcome import RunResult
from portfolio_optimiser.pipeline.run import (
    ClientFactory,
    ReasoningSession,
    RunSettings,
    run_project,
)
from portfolio_optimiser.reasoning.availability import AdvisorState
from portfolio_optimiser.reasoning.environment import admission_for
from portfolio_optimiser.reasoning.store import Admission, Store, availability_now

from .ledger import Ledger
from .ledger_records import VerdictRow
from .spend_book import spent_tokens
from .workspace import Workspace

if TYPE_CHECKING:  # the portfolio imports the runner's learning store; typing only here
    from .portfolio import Portfolio

__all__ = [
    "RunInputs",
    "current_verdict",
    "learning_store",
    "open_circuits",
    "previous_version",
    "run_pipeline",
]


@dataclass(frozen=True)
class RunInputs:
    """Everything one bundle's run takes, built once for the job from the workspace's state:
    the runner reads nothing else (no processor, no folders of its own)."""

    config: Config
    admission: Admission
    spent_tokens: int
    verdicts: VerdictStore
    references: ProjectReferences
    """The project's lines measured against the portfolio: the snapshot its identity was
    computed against."""
    portfolio: Mapping[str, Project]
    reasoning_store: Store
    client_factory: ClientFactory
    log: Any
    charge: Callable[[int], None] | None = None
    """Keeps each billed amount durably as the run goes (the job's charges)."""
    previous: Project | None = None
    """The project's version ingested before this bundle, which a revision is compared with."""

    @classmethod
    def build(
        cls,
        *,
        workspace: Workspace,
        config: Config,
        ledger: Ledger,
        now: datetime,
        environ: dict[str, str] | None,
        reasoning_store: Store,
        portfolio: Portfolio,
        references: ProjectReferences,
        client_factory: ClientFactory,
        log: Any,
        bundle: Path | None = None,
        charge: Callable[[int], None] | None = None,
    ) -> RunInputs:
        verdicts = learning_store(workspace, ledger, log)
        approved = verdicts.approved()
        return cls(
            config=config,
            admission=admission_for(
                config, now=now, environ=environ, clock=lambda: datetime.now(UTC)
            ),
            spent_tokens=spent_tokens(workspace, ledger),
            verdicts=verdicts,
            references=references,
            portfolio=portfolio.sources(v.key.project_id or "" for v in approved)[0],
            reasoning_store=reasoning_store,
            client_factory=client_factory,
            log=log,
            charge=charge,
            previous=previous_version(workspace, bundle) if bundle is not None else None,
        )


def run_pipeline(inputs: RunInputs, bundle: Path, run_id: str) -> RunResult:
    config = inputs.config
    budget = Budget(
        run_tokens=config.budget.run_tokens,
        call_tokens=config.budget.call_tokens,
        max_rounds=max(config.stop.max_rounds, config.stop.max_attempts) * 4,
    )
    meter = PortfolioMeter(
        PortfolioBudget(
            total_tokens=config.budget.portfolio_tokens, per_run_claim=config.budget.run_tokens
        ),
        spent=inputs.spent_tokens,
        on_record=inputs.charge,
    )
    before = open_circuits(inputs.reasoning_store, inputs.admission)
    result = asyncio.run(
        run_project(
            bundle,
            verdicts=inputs.verdicts,
            budget=budget,
            settings=RunSettings.from_config(config),
            reasoning=ReasoningSession(inputs.reasoning_store, inputs.admission),
            run_id=run_id,
            portfolio_meter=meter,
            client_factory=inputs.client_factory,
            references=inputs.references,
            portfolio=inputs.portfolio,
            previous=inputs.previous,
        )
    )
    # A circuit opened by this run is an operator's business: the journal says so once, here.
    for advisor, state in open_circuits(inputs.reasoning_store, inputs.admission).items():
        if state.circuit is not None and (
            advisor not in before or before[advisor].circuit != state.circuit
        ):
            inputs.log.warning(
                "advisor circuit opened",
                advisor=advisor,
                opened_by=str(state.circuit.opened_by),
                failures=state.circuit.failures,
                until=state.circuit.until.strftime("%Y-%m-%dT%H:%M:%SZ"),
                reason=state.reason,
                run=run_id,
            )
    if result.budget_stop:
        inputs.log.warning(
            "run stopped by its budget",
            project=result.project_id,
            run=run_id,
            which=result.budget_stop,
        )
    return result


def previous_version(workspace: Workspace, bundle: Path) -> Project | None:
    """The version of the bundle's project ingested before it, when it is another folder (a
    revision dropped later); None for a first version, a rerun, or one that does not read."""
    try:
        project_id = load_ir_projections(bundle).id
        ingested = workspace.bundles_projects / project_id
        if not ingested.is_dir() or ingested.resolve() == bundle.resolve():
            return None
        return load_ir_projections(ingested)
    except (BundleError, OSError):
        return None


def open_circuits(store: Store, admission: Admission) -> dict[str, AdvisorState]:
    """The advisors whose circuit is open now (cooling down, not yet recovering), by id."""
    return {
        s.advisor: s
        for s in availability_now(store.load(), admission)
        if s.circuit is not None and not s.recovering
    }


def learning_store(workspace: Workspace, ledger: Ledger, log: Any) -> VerdictStore:
    """Seeded afresh for every run: the wiki's promoted verdicts, then each candidate's current
    verdict as the ledger recorded it. A file the daemon refused, or has not read since it
    changed, teaches nothing; a damaged wiki page is skipped and named, never fatal."""
    problems: list[tuple[str, str]] = []
    store = seed_store_from_bundle(workspace.wiki, problems=problems)
    for page, why in problems:
        log.warning("wiki page skipped by the learning fold", page=page, problem=why)
    for row in ledger.records.latest_verdicts():
        learned = _recorded(workspace, ledger, row, log)
        if learned is not None:
            store.add(learned)
    return store


def current_verdict(
    workspace: Workspace, ledger: Ledger, candidate_id: str, log: Any
) -> LearnedVerdict | None:
    """One candidate's verdict as :func:`learning_store` would fold it: its last recorded file
    while its bytes are the ones read, else what the wiki says (folded in full: rare)."""
    row = ledger.records.latest_verdict(candidate_id)
    learned = _recorded(workspace, ledger, row, log) if row is not None else None
    if learned is not None:
        return learned
    return learning_store(workspace, ledger, log).get(candidate_id)


def _recorded(
    workspace: Workspace, ledger: Ledger, row: VerdictRow, log: Any
) -> LearnedVerdict | None:
    """The verdict a ledger row recorded, while its file still holds the bytes read."""
    path = workspace.inbox_verdicts / row.name
    try:
        data = path.read_bytes()
    except OSError:
        return None  # taken away by the expert: the wiki keeps what was promoted
    if hashlib.sha256(data).hexdigest() != row.digest:
        return None  # edited since it was read; the daemon reads the new bytes first
    try:
        signed = ledger.records.signature(row.digest)
        return LearnedVerdict.from_verdict(
            parse_verdict(data, row.name),
            source=path,
            signed_with=signed.fingerprint if signed is not None else None,
        )
    except (VerdictError, VerdictFrontmatterError) as exc:
        log.warning("verdict skipped by the learning fold", file=row.name, problem=str(exc))
        return None
