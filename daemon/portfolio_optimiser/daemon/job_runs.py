"""What the daemon does around a bundle's job: hands it to its durable workflow (``durable``)
and waits for it, holds and admits the portfolio's budget, does what follows a settled job (the
portfolio it changed, the log), and runs again the ingested projects the portfolio moved under
(their identity is new). What the steps themselves run with is the host's (``host``).
"""

from __future__ import annotations

import errno
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from portfolio_optimiser.config import Config
from portfolio_optimiser.pipeline.budget import PortfolioBudget, PortfolioMeter, read_spend
from portfolio_optimiser.pipeline.run import ClientFactory

from .db import database_unavailable
from .host import GivenUp, RunHost, iso
from .job import Job, Stage
from .ledger import Ledger
from .portfolio import Portfolio
from .stores import stores_for
from .workspace import Workspace

if TYPE_CHECKING:  # DBOS is imported when a job first runs: commands that run none never pay it
    from .durable import Engine, Submitted

__all__ = [
    "ItemResult",
    "JobRuns",
    "transient",
]

TRANSIENT: Final = frozenset(
    {errno.ENOSPC, errno.EIO, errno.EBUSY, errno.EAGAIN, errno.EDQUOT, errno.ETIMEDOUT}
)


def transient(exc: BaseException) -> str | None:
    """Why a failure is worth a retry (a resource busy, full or away for now), or None."""
    if isinstance(exc, OSError) and exc.errno in TRANSIENT:
        return str(exc.strerror)
    if database_unavailable(exc):
        return f"the database is unavailable ({exc})"
    return None


@dataclass(frozen=True)
class ItemResult:
    name: str
    kind: str
    state: str
    message: str = ""
    output: Path | None = None


class JobRuns:
    """The run side of the processor; what it reads of the processor is declared here."""

    workspace: Workspace
    config: Config
    ledger: Ledger
    clock: Callable[[], float]
    log: Any
    client_factory: ClientFactory
    environ: dict[str, str] | None
    waiting: dict[str, str]
    host: RunHost
    """What this process's job steps run with, on a ledger connection of their own."""
    portfolio: Portfolio
    reruns_due: bool
    history: list[ItemResult]
    stopping: Callable[[], bool]
    """Whether a stop was asked for (a step's ``stop``): a wait for a job ends at once."""

    def engine(self) -> Engine:
        """The process's DBOS: on this state directory's SQLite (one executor on one machine), or
        on the shared PostgreSQL (``[scale]``), as this machine's executor."""
        from .durable import EngineSettings, engine_for

        stores = stores_for(self.config, self.environ)
        url = stores.database_url or f"sqlite:///{(self.workspace.state / 'dbos.sqlite').resolve()}"
        settings = EngineSettings(
            url, stores.executor_id, stores.shared, self.config.scale.jobs_at_once
        )
        return engine_for(settings, log=self.log)

    def publish_portfolio(self) -> None:
        """``outbox/portfolio.md`` after every run and verdict; a failure to write it is logged,
        never the run's (its own outputs are durable by now), and the next event writes it."""
        try:
            self.portfolio.publish_report(self.ledger, stamp=iso(self.clock()))
        except OSError as exc:
            self.log.warning("portfolio report not written", problem=str(exc))

    def _reruns(self, stop: Callable[[], bool]) -> list[ItemResult]:
        """A new run for each ingested project the portfolio moved under (its identity is new)."""
        self.reruns_due = False
        for waiting in [w for w in self.waiting if w.endswith(" (rerun)")]:
            del self.waiting[waiting]
        results = []
        for due in self.portfolio.due(self.ledger):
            if stop():
                self.reruns_due = True
                break
            folder, identity = due.folder, due.identity
            self._supersede_reruns(folder, identity)
            if due.restore:
                results.append(self._restore(folder, identity))
                continue
            refusal = self._hold_budget(identity)
            if refusal is not None:
                self.waiting[f"{folder.name} (rerun)"] = refusal
                self.log.info("rerun waits", project=folder.name, reason=refusal)
                break
            references = json.dumps(due.references.to_dict(), sort_keys=True)
            results.append(self._rerun(folder, identity, references))
        return results

    def _restore(self, folder: Path, identity: str) -> ItemResult:
        """The portfolio came back to what an earlier run of this project gave: that run is its
        latest again (run and charged once, never twice)."""
        stored = self.ledger.job(identity)
        job = Job.from_json(stored) if stored is not None else None
        summary = job.summary if job is not None else None
        run_folder = (
            self.host.job_context(job).run_folder(job) if job is not None and summary else None
        )
        if job is None or summary is None or run_folder is None or not run_folder.is_dir():
            why = "its earlier run's folder is gone from outbox/runs/"
            self.log.warning("earlier run not restored", project=folder.name, reason=why)
            return ItemResult(folder.name, "rerun", "failed", why)
        now = iso(self.clock())
        self.ledger.add_candidates(job.run_id, summary.project_id, summary.candidates, now=now)
        self.ledger.record_project_run(summary.project_id, job.run_id, str(run_folder), now=now)
        self.publish_portfolio()
        self.log.info("earlier run stands again", project=folder.name, run=job.run_id)
        return ItemResult(folder.name, "rerun", "done", "its earlier run stands again", run_folder)

    def _supersede_reruns(self, folder: Path, identity: str) -> None:
        """A rerun of this project that never ran, for an identity the portfolio has moved past,
        is given up: its hold on the budget goes with it (one that ran keeps both: its run
        stands, and is finished from its stage)."""
        for stored in self.ledger.jobs(unfinished=True):
            job = Job.from_json(stored)
            stale = job.rerun and job.bundle == str(folder) and job.identity != identity
            if stale and not job.done(Stage.RAN):
                self.ledger.drop_job(job.identity)
                self.ledger.release(job.identity)

    def _rerun(self, folder: Path, identity: str, references: str) -> ItemResult:
        name = folder.name
        known = self.ledger.get(identity) or self.ledger.begin(
            identity, kind="bundle", name=name, now=iso(self.clock())
        )
        stored = self.ledger.job(identity)
        if stored is None:  # checkpointed before it starts, so a cut-off start is recovered
            job = Job(
                identity,
                name,
                str(folder),
                str(folder),
                known.first_seen,
                rerun=True,
                references=references,
            )
            self.ledger.save_job(identity, job.stage.value, job.to_json(), now=iso(self.clock()))
        else:
            job = Job.from_json(stored)
        self.log.info("rerun: the portfolio moved under an ingested project", project=name)
        return self._rerun_job(job)

    def _rerun_job(self, job: Job) -> ItemResult:
        name = job.name
        try:
            done = self._advance(job)
            if done is None:
                return ItemResult(name, "rerun", "under way", "left to its workflow")
            return self._processed(done)
        except GivenUp as given_up:
            self.ledger.finish_run(job.identity)
            why = f"{name}: its rerun stopped the daemon {given_up.crashes} times; not run again"
        except Exception as exc:
            reason = transient(exc)
            if reason is not None:  # left unfinished: the next event or start tries again
                self.log.warning("rerun put off", project=name, reason=reason)
                return ItemResult(name, "rerun", "retry", reason)
            shown = str(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
            why = f"{name}: its rerun failed ({shown})"
        # The ingested project stays where it is; only this identity is given up.
        self.log.error("rerun failed", project=name, problem=why)
        self.ledger.release(job.identity)
        self.ledger.drop_job(job.identity)
        self.ledger.mark(job.identity, "failed", now=iso(self.clock()), error=why)
        return ItemResult(name, "rerun", "failed", why)

    def _advance(self, job: Job) -> Job | None:
        """The job's remaining stages, as its durable workflow (``durable``), waited for; None
        when a stop was asked for first."""
        submitted = self.engine().submit(job, self.host)
        self._finished_first(submitted)
        return self.engine().result(submitted, stop=self.stopping)

    def _finished_first(self, submitted: Submitted) -> None:
        for earlier in submitted.finished_first:  # cut off by a crash; finished at the launch
            self.history.append(self._processed(earlier))

    def _processed(self, job: Job) -> ItemResult:
        """What follows a settled job in this process: the portfolio it changed, and the log."""
        summary = job.summary
        assert summary is not None
        if not job.rerun:
            self._rebuild_references()
            self.reruns_due = True
        self.publish_portfolio()
        folder = self.host.job_context(job).run_folder(job)
        self.log.info(
            "bundle processed",
            bundle=job.name,
            project=summary.project_id,
            run=job.run_id,
            candidates=len(summary.candidates),
            budget_stop=summary.budget_stop,
            outputs=str(folder),
        )
        kind = "rerun" if job.rerun else "bundle"
        return ItemResult(job.name, kind, "done", f"{len(summary.candidates)} candidates", folder)

    def _budget(self) -> PortfolioMeter:
        """The portfolio's budget now: what is spent (strict: a corrupt spend file stops, never
        reads zero); what jobs in flight hold is the ledger's."""
        return PortfolioMeter(
            PortfolioBudget(
                total_tokens=self.config.budget.portfolio_tokens,
                per_run_claim=self.config.budget.run_tokens,
            ),
            spent=read_spend(self.workspace.spend_file).spent_tokens,
        )

    def _waiting_for_budget(self, remaining: int) -> str:
        return (
            f"waiting for budget: {max(0, remaining)} portfolio tokens left, a run may use "
            f"{self.config.budget.run_tokens}; raise budget.portfolio_tokens to continue"
        )

    def _hold_budget(self, identity: str) -> str | None:
        """A run's claim on the portfolio, held in the ledger from now until it is charged; the
        sentence a refusal gives, or None when held."""
        budget = self._budget()
        held = self.ledger.reserve(
            identity,
            self.config.budget.run_tokens,
            cap=budget.budget.total_tokens,
            spent=budget.spent,
            now=iso(self.clock()),
        )
        if held:
            return None
        return self._waiting_for_budget(budget.remaining - self.ledger.reserved_tokens())

    def admit(self, entries: list[Path]) -> tuple[list[Path], list[tuple[Path, str]]]:
        """The ready bundles the portfolio can fund now, and those that wait (unclaimed), each
        with the sentence that says why."""
        if not entries:
            return [], []
        budget, held = self._budget(), self.ledger.reserved_tokens()
        admitted, deferred = budget.admit_wave(entries, reserved=held)
        left = budget.remaining - held - len(admitted) * self.config.budget.run_tokens
        return admitted, [(entry, self._waiting_for_budget(left)) for entry in deferred]

    def abandon_run(self) -> None:
        self.host.abandon_run()

    def _rebuild_references(self) -> None:
        try:
            self.portfolio.rebuild()
        except OSError as exc:  # the run is durable by now; the next settle or start rebuilds
            self.log.warning("reference classes not rebuilt", problem=str(exc))
