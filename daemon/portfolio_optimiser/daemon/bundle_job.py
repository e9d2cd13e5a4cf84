"""A bundle's lifecycle in the daemon, around its job's stages (``job``).

Decides: the only safe order for one bundle. It is claimed by atomic rename (so it is processed
once) and given its run identity, which the claim keeps (content, and the portfolio inputs that
shape its candidates). The identity's job, if any, says where it stood: its own job cut off goes
on from its stage; another's (an identity run or under way) makes this a duplicate, not re-run,
not re-charged. Otherwise a new job runs its stages: ran, published, charged, settled — the
input leaves for ``bundles/projects/`` only at the end. A permanent problem quarantines it with a
report saying what, where and how to fix; a transient one retries with back-off from its claimed
place; a project the budget cannot fund waits in the inbox, unclaimed and not failed. Ingested
projects the portfolio moved under are run again in place. The processor decides when.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from portfolio_optimiser._atomic import publish_text
from portfolio_optimiser.config import Config
from portfolio_optimiser.context.errors import BundleError
from portfolio_optimiser.pipeline.budget import read_spend
from portfolio_optimiser.pipeline.run import ClientFactory
from portfolio_optimiser.reasoning.redaction import safe_text
from portfolio_optimiser.reasoning.store import Store

from .archive import ArchiveError, extract_bundle
from .claim import ClaimError, content_digest, original_name, release
from .claim import claim as claim_entry
from .job import Job, JobContext, Stage
from .ledger import Ledger, LedgerError, next_backoff_s
from .portfolio import Portfolio
from .runner import RunInputs
from .stability import StabilityTracker, snapshot
from .workspace import Workspace

if TYPE_CHECKING:  # DBOS is imported when a job first runs: commands that run none never pay it
    from .durable import Engine

__all__ = ["CRASHES_TO_QUARANTINE", "BundleLifecycle", "ItemResult"]

CRASHES_TO_QUARANTINE: Final = 2
"""Runs of one bundle that ended the process; at the next start it is quarantined, not re-run."""
_TRANSIENT = frozenset(
    {errno.ENOSPC, errno.EIO, errno.EBUSY, errno.EAGAIN, errno.EDQUOT, errno.ETIMEDOUT}
)


class _GivenUp(Exception):
    """A run that took the process down too often: never started again."""

    def __init__(self, crashes: int) -> None:
        super().__init__(crashes)  # its only argument: DBOS keeps a step's error pickled
        self.crashes = crashes

    def __str__(self) -> str:
        return f"stopped the process {self.crashes} times"


@dataclass(frozen=True)
class ItemResult:
    name: str
    kind: str
    state: str
    message: str = ""
    output: Path | None = None


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class BundleLifecycle:
    """The bundle side of the processor; what it reads of the processor is declared here."""

    workspace: Workspace
    config: Config
    ledger: Ledger
    clock: Callable[[], float]
    log: Any
    client_factory: ClientFactory
    environ: dict[str, str] | None
    waiting: dict[str, str]
    bundles: StabilityTracker
    claimed_dir: Path
    running_digest: str | None
    reasoning_store: Store
    portfolio: Portfolio
    reruns_due: bool
    retry_due_at: float | None
    """When the next back-off runs out (None: read it from the ledger at the next look)."""
    _test_fault: str
    """The processor reads PORTFOLIO_OPTIMISER_TEST_FAULT once (see its ``__post_init__``)."""

    def _fault(self, point: str) -> None:
        """TEST-ONLY: die here, without cleanup, when the test fault hook names ``point``."""
        if self._test_fault == point:
            os._exit(137)

    def engine(self) -> Engine:
        """The process's DBOS on this state directory's SQLite (one executor on one machine)."""
        from .durable import engine_for

        return engine_for(self.workspace.state, executor_id="local", log=self.log)

    def publish_portfolio(self) -> None:
        """``outbox/portfolio.md`` after every run and verdict; a failure to write it is logged,
        never the run's (its own outputs are durable by now), and the next event writes it."""
        try:
            self.portfolio.publish_report(self.ledger, stamp=_iso(self.clock()))
        except OSError as exc:
            self.log.warning("portfolio report not written", problem=str(exc))

    def _reruns(self, stop: Callable[[], bool]) -> list[ItemResult]:
        """A new run for each ingested project the portfolio moved under (its identity is new)."""
        self.reruns_due = False
        for waiting in [w for w in self.waiting if w.endswith(" (rerun)")]:
            del self.waiting[waiting]
        results = []
        for folder, identity in self.portfolio.due(self.ledger):
            if stop():
                self.reruns_due = True
                break
            refusal = self._budget_refusal()
            if refusal is not None:
                self.waiting[f"{folder.name} (rerun)"] = refusal
                self.log.info("rerun waits", project=folder.name, reason=refusal)
                break
            results.append(self._rerun(folder, identity))
        return results

    def _rerun(self, folder: Path, identity: str) -> ItemResult:
        name = folder.name
        known = self.ledger.get(identity) or self.ledger.begin(
            identity, kind="bundle", name=name, now=_iso(self.clock())
        )
        stored = self.ledger.job(identity)
        job = (
            Job.from_json(stored)
            if stored is not None
            else Job(identity, name, str(folder), str(folder), known.first_seen, rerun=True)
        )
        self.log.info("rerun: the portfolio moved under an ingested project", project=name)
        return self._rerun_job(job)

    def _rerun_job(self, job: Job) -> ItemResult:
        name = job.name
        try:
            return self._advance(job)
        except OSError as exc:
            if exc.errno in _TRANSIENT:  # left unfinished: the next event or start tries again
                self.log.warning("rerun put off", project=name, reason=exc.strerror)
                return ItemResult(name, "rerun", "retry", str(exc.strerror))
            why = f"{name}: its rerun failed ({exc})"
        except _GivenUp as given_up:
            self.ledger.finish_run(job.identity)
            why = f"{name}: its rerun stopped the daemon {given_up.crashes} times; not run again"
        except Exception as exc:
            why = f"{name}: its rerun failed ({type(exc).__name__}: {exc})"
        # The ingested project stays where it is; only this identity is given up.
        self.log.error("rerun failed", project=name, problem=why)
        self.ledger.drop_job(job.identity)
        self.ledger.mark(job.identity, "failed", now=_iso(self.clock()), error=why)
        return ItemResult(name, "rerun", "failed", why)

    def _advance(self, job: Job) -> ItemResult:
        """The job's remaining stages, as its durable workflow (``durable``)."""
        return self._processed(self.engine().run(job, self))

    def _processed(self, job: Job) -> ItemResult:
        """What follows a settled job in this process: the portfolio it changed, and the log."""
        summary = job.summary
        assert summary is not None
        if not job.rerun:
            self._rebuild_references()
            self.reruns_due = True
        self.publish_portfolio()
        folder = self.job_context(job).run_folder(job)
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

    # -- what the job's steps take from this process (durable.JobHost) ---------------------------

    def job_context(self, job: Job) -> JobContext:
        ws = self.workspace
        built: list[RunInputs] = []

        def inputs() -> RunInputs:
            if not built:  # once per job, and only when it runs
                built.append(
                    RunInputs.build(
                        workspace=ws,
                        config=self.config,
                        ledger=self.ledger,
                        now=datetime.fromtimestamp(self.clock(), UTC),
                        environ=self.environ,
                        reasoning_store=self.reasoning_store,
                        portfolio=self.portfolio,
                        client_factory=self.client_factory,
                        log=self.log,
                    )
                )
            return built[0]

        return JobContext(
            ws, self.ledger, inputs, lambda: _iso(self.clock()), self.log, self._fault
        )

    def begin_run(self, job: Job) -> None:
        """Counted durably before it starts: a run that takes the process down twice is given
        up, never recovered into a third crash."""
        crashes = self.ledger.unfinished_starts(job.identity)
        if crashes >= CRASHES_TO_QUARANTINE:
            raise _GivenUp(crashes)  # counted until the job is set aside
        self.ledger.start_run(job.identity)
        self.running_digest = job.identity

    def end_run(self, job: Job) -> None:
        self.ledger.finish_run(job.identity)
        self.running_digest = None

    def _budget_refusal(self) -> str | None:
        spend = read_spend(
            self.workspace.spend_file
        )  # strict: a corrupt ledger stops, never reads zero
        remaining = self.config.budget.portfolio_tokens - spend.spent_tokens
        if remaining < self.config.budget.run_tokens:
            return (
                f"waiting for budget: {remaining} portfolio tokens left, a run may use "
                f"{self.config.budget.run_tokens}; raise budget.portfolio_tokens to continue"
            )
        return None

    def process_bundle(self, entry: Path) -> ItemResult:
        refusal = self._budget_refusal()
        if refusal is not None:
            self.waiting[entry.name] = refusal
            self.log.info("bundle waits", bundle=entry.name, reason=refusal)
            return ItemResult(entry.name, "bundle", "waiting", refusal)
        self.waiting.pop(entry.name, None)
        claimed = claim_entry(entry, self.claimed_dir)
        if claimed is None:
            return ItemResult(
                entry.name, "bundle", "gone", "it left the inbox before it was claimed"
            )
        return self._process_claimed(claimed, name=entry.name)

    def recover(self) -> list[ItemResult]:
        """Finish what a crash left: DBOS first finishes the workflows it had in flight (each from
        its last completed stage), then each input still claimed goes on from its job's stage."""
        from .claim import recover, sweep_stale

        # Output folders half-built by a crash: the writer's temp folders, an hour old or more.
        runs = self.workspace.outbox / "runs"
        for project in sorted(runs.iterdir()) if runs.is_dir() else []:
            if project.is_dir():
                sweep_stale(project, older_than_s=3600, now=self.clock())
        results = []
        if self.ledger.jobs(unfinished=True):
            results = [self._processed(job) for job in self.engine().start(self)]
        results += [
            self._process_claimed(path, name=original_name(path))
            for path in recover(self.claimed_dir)
        ]
        return results

    def _due_retries(self, now: float) -> list[Path]:
        """Claimed bundles whose back-off has run out (a retry without a time is a bundle put
        back into the inbox by ``retry NAME``: the inbox takes it, not this)."""
        if self._next_retry(now) > now:
            return []
        self.retry_due_at = None  # what is taken now is rescheduled or gone after it
        return [
            Path(item.output)
            for item in self.ledger.due_retries(now=_iso(now))
            if item.next_attempt_at and item.output and Path(item.output).exists()
        ]

    def _next_retry(self, now: float) -> float:
        """When the next back-off runs out; read from the ledger only when it may have moved, so
        an idle daemon's tick asks nothing of the database."""
        if self.retry_due_at is None:
            times = [
                datetime.fromisoformat(item.next_attempt_at).timestamp()
                for item in self.ledger.items("retry")
                if item.next_attempt_at and item.output
            ]
            self.retry_due_at = min(times, default=float("inf"))
        return self.retry_due_at

    def _process_claimed(self, claimed: Path, *, name: str) -> ItemResult:
        result = self._claimed_lifecycle(claimed, name=name)
        if result.state != "retry":
            self.ledger.forget_claim(claimed.name)  # it has left its claimed place for good
        return result

    def _claimed_lifecycle(self, claimed: Path, *, name: str) -> ItemResult:
        now = self.clock()
        self._fault("after-claim")
        try:
            content = content_digest(claimed)
        except ClaimError as exc:  # a symlink, a pipe or a device inside the bundle
            return self._quarantine(claimed, name, None, str(exc))
        except (OSError, ValueError) as exc:
            return self._quarantine(
                claimed,
                name,
                None,
                f"{name}: cannot be read ({exc}); check its permissions and drop it again",
            )
        oversized = self._oversized(claimed, name)
        if oversized is not None:
            return self._quarantine(claimed, name, content, oversized)
        remembered = self.ledger.claim_identity(claimed.name)
        try:
            bundle = self._bundle_root(claimed)
            if bundle != claimed:
                content = content_digest(bundle)  # an archive: what it holds, as it will settle
            # The run's identity (its content and the portfolio inputs that shape its candidates)
            # is fixed when it is claimed: recovery and retries reuse it, so a portfolio that
            # moved in between cannot turn one claim into two runs.
            digest = remembered or self.portfolio.identity(bundle, content)
            if remembered is None:
                self.ledger.remember_claim(claimed.name, digest)
        except Exception as exc:
            return self._set_aside(claimed, name, content, exc)
        stored = self.ledger.job(digest)
        job = Job.from_json(stored) if stored is not None else None
        if job is not None and job.claimed == str(claimed) and not job.done(Stage.SETTLED):
            # This claim's own job, cut off or put off: on from the stage it reached.
            self.log.info("job resumed", bundle=name, stage=job.stage.value)
            return self._claimed_job(claimed, job, name)
        known = self.ledger.get(digest)
        if job is not None or (known is not None and known.state == "done"):
            # Run before (or under way from another claim): also an older version dropped again,
            # which stays a duplicate (it was run and charged once; reinstating it without a run
            # would mislead every report).
            shutil.rmtree(claimed.with_name(f".{claimed.name}.d"), ignore_errors=True)
            destination = release(claimed, self.workspace.duplicates / name)
            first = (known.detail if known else None) or (known.name if known else digest[:12])
            publish_text(
                destination.with_name(destination.name + ".duplicate.txt"),
                safe_text(
                    f"{name} has the same content as a bundle already run ({first}); "
                    "it was not run again and nothing was charged."
                )
                + "\n",
            )
            self.log.info("duplicate bundle", bundle=name, first=first)
            return ItemResult(name, "bundle", "duplicate", f"identical to {first}")
        if known is not None and known.state == "failed":
            return self._quarantine(
                claimed, name, digest, known.error or "it failed before with the same content"
            )
        if known is None:
            known = self.ledger.begin(digest, kind="bundle", name=name, now=_iso(now))
        job = Job(digest, name, str(claimed), str(bundle), known.first_seen, rerun=False)
        self.ledger.save_job(digest, job.stage.value, job.to_json(), now=_iso(now))
        return self._claimed_job(claimed, job, name)

    def _claimed_job(self, claimed: Path, job: Job, name: str) -> ItemResult:
        try:
            return self._advance(job)
        except _GivenUp as given_up:
            self.ledger.finish_run(job.identity)
            return self._quarantine(
                claimed,
                name,
                job.identity,
                f"{name}: its run stopped the daemon {given_up.crashes} times (killed, out of "
                "memory, or a crash in a library) and was set aside so it cannot do so a third "
                "time; the daemon's log (journalctl) says what ended the process",
            )
        except Exception as exc:
            return self._set_aside(claimed, name, job.identity, exc)

    def abandon_run(self) -> None:
        """A stop was asked for while a run is under way: that is no crash, so its start is not
        counted against the bundle. Called from the service's thread while the worker still runs,
        so through a connection of its own."""
        digest = self.running_digest
        if digest is None:
            return
        with contextlib.suppress(LedgerError), Ledger.open(self.ledger.path) as other:
            other.finish_run(digest)

    def _set_aside(self, claimed: Path, name: str, key: str, exc: Exception) -> ItemResult:
        """What an exception costs a claimed bundle: a bad bundle is quarantined with the reason,
        a transient failure retried from its claimed place, anything else is a bug that costs
        this bundle and never the daemon."""
        if isinstance(exc, BundleError | ArchiveError | ClaimError):
            return self._quarantine(claimed, name, key, str(exc))
        if isinstance(exc, OSError) and exc.errno in _TRANSIENT:
            return self._retry_later(claimed, name, key, f"{exc.strerror}")
        return self._internal_error(claimed, name, key, exc)

    def _internal_error(
        self, claimed: Path, name: str, digest: str, exc: BaseException
    ) -> ItemResult:
        # A bug must cost one bundle, never the daemon: the bundle is set aside with the error,
        # and nothing is left claimed to crash the next start.
        self.log.error("internal error in a bundle's run", bundle=name, exc_info=exc)
        return self._quarantine(
            claimed,
            name,
            digest,
            f"{name}: an internal error stopped its run ({type(exc).__name__}: {exc}); this is a "
            "bug in portfolio-optimiser, please report it with the daemon's log",
        )

    def _oversized(self, claimed: Path, name: str) -> str | None:
        limit = self.config.daemon.max_bundle_bytes
        shot = snapshot(claimed)
        total = shot.total_bytes if shot is not None else 0
        if total <= limit:
            return None
        return (
            f"{name}: is {total / 1_048_576:.1f} MiB, above the limit of {limit / 1_048_576:.1f} MiB "
            "(daemon.max_bundle_bytes); split the bundle or raise the limit in the config"
        )

    def _bundle_root(self, claimed: Path) -> Path:
        if claimed.is_dir():
            return claimed
        # Unpacked beside the claimed archive under a dot-name, which recover() skips; a half
        # extraction left by a crash is cleared first, the archive itself is the truth.
        unpacked = claimed.with_name(f".{claimed.name}.d")
        if unpacked.exists():
            shutil.rmtree(unpacked)
        return extract_bundle(
            claimed, unpacked, max_total_bytes=self.config.daemon.max_bundle_bytes
        )

    def _rebuild_references(self) -> None:
        try:
            self.portfolio.rebuild()
        except OSError as exc:  # the run is durable by now; the next settle or start rebuilds
            self.log.warning("reference classes not rebuilt", problem=str(exc))

    def _quarantine(
        self, claimed: Path, name: str, digest: str | None, sentence: str
    ) -> ItemResult:
        # The user knows the bundle by its inbox name, not by where the daemon claimed it.
        sentence = (
            sentence.replace(f"{claimed}/", "")
            .replace(str(claimed), name)
            .replace(claimed.name, name)
        )
        unpacked = claimed.with_name(f".{claimed.name}.d")
        if unpacked.exists():
            shutil.rmtree(unpacked, ignore_errors=True)
        destination = release(claimed, self.workspace.failed / name)
        report = destination.with_name(destination.name + ".error.txt")
        where = destination.relative_to(self.workspace.root)
        publish_text(
            report,
            safe_text(
                f"{sentence}\n\nWhat to do: fix the bundle (it is in {where}), then run\n"
                f"    portfolio-optimiser retry {destination.name}\n"
                "or drop the corrected folder into inbox/projects/ again.\n"
            ),
        )
        if digest is not None:
            self.ledger.drop_job(digest)  # a later drop of it (or `retry`) starts afresh
            if self.ledger.get(digest) is None:
                self.ledger.begin(digest, kind="bundle", name=name, now=_iso(self.clock()))
            self.ledger.mark(
                digest, "failed", now=_iso(self.clock()), error=sentence, output=str(destination)
            )
        self.log.warning("bundle quarantined", bundle=name, problem=sentence, report=str(report))
        return ItemResult(name, "bundle", "failed", sentence, destination)

    def _retry_later(self, claimed: Path, name: str, digest: str, why: str) -> ItemResult:
        item = self.ledger.get(digest)
        attempts = item.attempts if item is not None else 0
        if attempts >= self.config.daemon.retry_limit:
            return self._quarantine(
                claimed,
                name,
                digest,
                f"{name}: gave up after {attempts} attempts ({why}); free the resource and retry",
            )
        delay = next_backoff_s(
            attempts, base_s=self.config.daemon.retry_backoff_seconds, cap_s=3600
        )
        self.ledger.schedule_retry(digest, now=_iso(self.clock()), at=_iso(self.clock() + delay))
        self.retry_due_at = None
        self.ledger.mark(digest, "retry", now=_iso(self.clock()), output=str(claimed), error=why)
        self.log.warning("bundle will be retried", bundle=name, reason=why, in_seconds=delay)
        return ItemResult(name, "bundle", "retry", why)
