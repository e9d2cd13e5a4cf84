"""The job desk: the running half of the daemon, one path for a fresh bundle, a retry, a recovered
claim and a rerun.

Decides the only safe order for one job: a claim (``claims``) is decided against what the ledger
knows of its identity (``decide``, pure), then handed to the engine (``engine``), waited for, and
a failure costs the claim what ``outcomes`` says. Its input leaves for ``bundles/projects/`` only
at the end of its job's stages (``job``). Recovery after a crash is here and only here: what a
crash cut off is finished by the engine as it starts and waited for, then each input still claimed
goes the same path as a fresh one (a job met under way on a machine that is gone, while it is
waited for, is handed to a live one by the engine's wait). What follows a settled job in this
process is here too: the reference classes it changed, the portfolio page, and the reruns the
portfolio moved under.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from portfolio_optimiser._atomic import sweep_temporaries

from .claim import STALE_TEMPORARY_S, original_name, recover, sweep_stale
from .claim import claim as claim_entry
from .claims import Claim, Floor, InboxClaim, take_claim
from .decide import Duplicate, LedgerView, New, Refused, Resume, TakeOver, Wait, decide
from .engine import EngineSettings, JobEngine, Submitted, open_engine
from .funding import Funding
from .host import GivenUp, RunHost
from .job import Job, Stage
from .ledger import Ledger
from .outcomes import UNDER_WAY, ItemResult, cost_of
from .portfolio import Portfolio
from .portfolio_page import PortfolioPage
from .reruns import run_due
from .stores import Stores

__all__ = ["JobDesk", "Started"]


@dataclass(frozen=True)
class Started:
    """A claim whose job was handed to the engine and is not waited for yet."""

    claim: Claim
    submitted: Submitted


class JobDesk:
    def __init__(
        self,
        floor: Floor,
        host: RunHost,
        portfolio: Portfolio,
        stores: Stores,
        claimed_dir: Path,
    ) -> None:
        self.floor = floor
        self.host = host
        self.portfolio = portfolio
        self.page = PortfolioPage(floor.workspace, portfolio, floor.log)
        """The process's one writer of ``outbox/portfolio.md``."""
        self.funding = Funding(floor.config, floor.workspace, floor.ledger, floor.clock)
        self.claimed_dir = claimed_dir
        url = stores.database_url or (
            f"sqlite:///{(floor.workspace.state / 'dbos.sqlite').resolve()}"
        )
        self.settings = EngineSettings(
            url, stores.executor_id, stores.shared, floor.config.scale.jobs_at_once
        )
        self.stopping: Callable[[], bool] = lambda: False
        """Whether a stop was asked for: a wait for a job ends at once, the job goes on."""
        self.reruns_due = True
        """Whether ingested projects may be due a new run (the portfolio moved under them); read
        from the ledger at the next look, so a crash loses nothing."""
        self._engine_opened = False

    def engine(self) -> JobEngine:
        """The process's engine, with this desk's host (one machine: on the state directory's
        SQLite; shared: on the PostgreSQL, as this machine's executor)."""
        self._engine_opened = True
        return open_engine(
            self.settings, host=self.host, ledger=self.floor.ledger, log=self.floor.log
        )

    def close_engine(self, *, idle_only: bool = False) -> None:
        """Stopped with the command, or at the daemon's first idle tick (``idle_only``: unless a
        job taken from the shared queue is under way here); a desk that never ran a job never
        started one."""
        if self._engine_opened:
            self.engine().close(idle_only=idle_only)

    # -- one path ---------------------------------------------------------------------------------

    def take(self, entry: Path) -> ItemResult | Started:
        """A ready bundle the portfolio's wave admitted: claimed by rename (so it is processed
        once), and its job handed to the engine (a wave's are waited for together)."""
        self.floor.waiting.pop(entry.name, None)
        claimed = claim_entry(entry, self.claimed_dir)
        if claimed is None:
            return ItemResult(
                entry.name, "bundle", "gone", "it left the inbox before it was claimed"
            )
        claim = self.claimed(claimed, name=entry.name)
        return claim if isinstance(claim, ItemResult) else self.start(claim)

    def claimed(self, claimed: Path, *, name: str | None = None) -> InboxClaim | ItemResult:
        """A claimed input with its identity, or what became of one that cannot have any."""
        self.host.fault("after-claim")
        return take_claim(self.floor, claimed, self.portfolio, name=name)

    def start(self, claim: Claim) -> ItemResult | Started:
        """The claim decided, and its job handed to the engine unless it is not to run."""
        floor, identity = self.floor, claim.identity
        decision = decide(claim.view(), self._view(identity))
        if isinstance(decision, Duplicate):
            return claim.duplicate(decision.first)
        if isinstance(decision, Refused):
            return claim.refused(decision.reason)
        if isinstance(decision, Wait):
            return claim.wait(self.funding.waiting(decision.left))
        if isinstance(decision, TakeOver):  # its run stands: never run or charged twice
            job = claim.take_over(decision.job)
            floor.ledger.jobs.save(identity, job.stage.value, job.to_json(), now=floor.now())
        elif isinstance(decision, Resume):
            job = decision.job
        else:
            fresh = self._new(claim, decision)
            if fresh is None:  # another machine took what was left since it was admitted
                return claim.wait(self.funding.waiting(self.funding.left()))
            job = fresh
        if not isinstance(decision, New):
            floor.log.info("job resumed", bundle=claim.name, stage=job.stage.value)
        try:
            return Started(claim, self.engine().submit(job))
        except Exception as exc:
            return self._failed(claim, exc)

    def finish(self, started: Started) -> ItemResult:
        """A started job, waited for: what it came to, or, when a stop is asked for first, left
        under way for the next start."""
        claim = started.claim
        try:
            done = self.engine().result(started.submitted, stop=self.stopping)
        except Exception as exc:
            return self._failed(claim, exc)
        if done is None:
            return claim.left(ItemResult(claim.name, claim.kind, UNDER_WAY, "left to its workflow"))
        return claim.left(self.processed(done))

    def run(self, claim: Claim | ItemResult) -> ItemResult:
        outcome = self.start(claim) if not isinstance(claim, ItemResult) else claim
        return self.finish(outcome) if isinstance(outcome, Started) else outcome

    def _view(self, identity: str) -> LedgerView:
        ledger = self.floor.ledger
        stored = ledger.jobs.get(identity)
        job = Job.from_json(stored) if stored is not None else None
        return LedgerView(
            job=job,
            item=ledger.get(identity),
            job_input_here=job is not None and Path(job.claimed).exists(),
            outputs_stand=job is not None and self._outputs_stand(job),
            held=self.funding.holds(identity),
            budget_left=self.funding.left(),
        )

    def _outputs_stand(self, job: Job) -> bool:
        context = self.host.job_context(job)
        if job.done(Stage.PUBLISHED):
            return (context.run_folder(job) / "proposals.json").is_file()
        return (context.staging(job) / job.run_id / "proposals.json").is_file()

    def _new(self, claim: Claim, decision: New) -> Job | None:
        ledger, identity = self.floor.ledger, claim.identity
        if decision.afresh:
            self.floor.log.warning(
                "a set-aside job's outputs are gone; it runs afresh", bundle=claim.name
            )
            ledger.jobs.drop(identity)
            ledger.budget.release(identity)
        if not self.funding.hold(identity):
            return None
        known = ledger.get(identity) or ledger.begin(
            identity, kind="bundle", name=claim.name, now=self.floor.now()
        )
        job = claim.new_job(known.first_seen)
        # Checkpointed before it is handed over, so a start cut off is recovered.
        ledger.jobs.save(identity, job.stage.value, job.to_json(), now=self.floor.now())
        return job

    def _failed(self, claim: Claim, exc: Exception) -> ItemResult:
        if isinstance(exc, GivenUp):
            self.floor.ledger.finish_run(claim.identity)
        return claim.failed(cost_of(exc, claim.name, rerun=claim.kind == "rerun"), exc)

    # -- what follows a settled job ---------------------------------------------------------------

    def processed(self, job: Job) -> ItemResult:
        """What follows a settled job in this process: the portfolio it changed, and the log."""
        summary = job.summary
        assert summary is not None
        if not job.rerun:  # scored against the current version; the next takes it in
            self.portfolio.arrived(job, self.floor.clock())
        self.publish_portfolio()
        folder = self.host.job_context(job).run_folder(job)
        self.floor.log.info(
            "bundle processed",
            bundle=job.name,
            project=summary.project_id,
            run=job.run_id,
            candidates=len(summary.candidates),
            budget_stop=summary.budget_stop,
            outputs=str(folder),
            report=str(folder / "report.md"),
        )
        kind = "rerun" if job.rerun else "bundle"
        return ItemResult(job.name, kind, "done", f"{len(summary.candidates)} candidates", folder)

    def publish_portfolio(
        self, ledger: Ledger | None = None, *, verdict: str | None = None
    ) -> None:
        """``outbox/portfolio.md`` after every run and every verdict on ``verdict`` (taken in
        through ``ledger``, the intake's connection); a failure to write it is logged, never the
        run's (its own outputs are durable by now), and the next event writes it."""
        try:
            self.page.publish(ledger or self.floor.ledger, stamp=self.floor.now(), verdict=verdict)
        except OSError as exc:
            self.floor.log.warning("portfolio report not written", problem=str(exc))

    def rebuild_references(self, *, start: bool = False) -> None:
        """The next version of the reference fit when arrivals call for it, or at a ``start``
        the current one again where its set is as it was (``Portfolio.start``); every project
        is then looked at again against it (``reruns``)."""
        portfolio, now = self.portfolio, self.floor.clock()
        try:
            if start:
                portfolio.start(now)
            else:
                portfolio.rebuild(now)
        except OSError as exc:  # the runs are durable; the next refit or start tries again
            self.floor.log.warning("reference classes not rebuilt", problem=str(exc))
            return
        version = portfolio.fit.version
        self.reruns_due = True
        if version is not None:
            self.floor.log.info("reference fit", version=version.id, projects=version.projects)

    def reruns(self, stop: Callable[[], bool]) -> list[ItemResult]:
        """A new run for each ingested project the portfolio moved under (its identity is new)."""
        # Cleared before the look, so a verdict taken in meanwhile (on the loop's thread) leaves
        # it set for the next step.
        self.reruns_due = False
        results, more = run_due(self, stop)
        self.reruns_due = self.reruns_due or more
        return results

    # -- recovery and retries ---------------------------------------------------------------------

    def _sweep_temporaries(self) -> None:
        """The temporary files killed processes left beside what they published, an hour old or
        more (a live writer renames or links its own within seconds), but any the reasoning store
        has still to publish. ``time.time``: they are measured against their mtimes."""
        now, store = time.time(), self.host.reasoning_store
        swept = store.sweep_temporaries(older_than_s=STALE_TEMPORARY_S, now=now)
        for folder in self.floor.workspace.published_folders():
            swept += sweep_temporaries(folder, older_than_s=STALE_TEMPORARY_S, now=now)
        if swept:
            self.floor.log.info("temporary files swept", count=len(swept), first=str(swept[0]))

    def recover(self) -> list[ItemResult]:
        """Finish what a crash left: the engine first finishes the jobs it had under way here
        (each from the stage its ledger row says), then each input still claimed goes the one
        path, on from its job's stage."""
        floor = self.floor
        # Output folders half-built by a crash: the writer's temp folders, an hour old or more.
        runs = floor.workspace.outbox / "runs"
        for project in sorted(runs.iterdir()) if runs.is_dir() else []:
            if project.is_dir():
                sweep_stale(project, older_than_s=STALE_TEMPORARY_S, now=floor.clock())
        self._sweep_temporaries()
        # The daemon is alone at start (one per workspace, one per shared database): a hold whose
        # job has ended or never began (a kill between the two) is given back.
        for identity in floor.ledger.budget.holders():
            stored = floor.ledger.jobs.get(identity)
            if stored is None or Job.from_json(stored).done(Stage.SETTLED):
                floor.ledger.budget.release(identity)
        results = []
        if floor.ledger.jobs.all(unfinished=True):
            engine = self.engine()
            # They share the host's ledger: waited for before anything else touches it.
            for submitted in engine.pending():
                job = submitted.job
                floor.log.info("job resumed", bundle=job.name, stage=job.stage.value)
                try:
                    done = engine.result(submitted, stop=self.stopping)
                except Exception as exc:  # its input is still claimed: the path below takes it
                    floor.log.warning("resumed job failed", bundle=job.name, problem=str(exc))
                    continue
                if done is not None:
                    results.append(self.processed(done))
        results += [self.run(self.claimed(path)) for path in recover(self.claimed_dir)]
        return results

    def retry(self, claimed: Path) -> ItemResult:
        return self.run(self.claimed(claimed, name=original_name(claimed)))

    def close(self) -> None:
        """The host's own connection to the ledger (the caller closes the one it passed in), and
        the reference fit's own process."""
        self.host.close()
        self.portfolio.fit.close()
