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

import dataclasses
import json
import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final

from portfolio_optimiser._atomic import publish_text
from portfolio_optimiser.context.errors import BundleError
from portfolio_optimiser.reasoning.redaction import safe_text

from .archive import ArchiveError, extract_bundle, import_folder
from .claim import ClaimError, content_digest, original_name, release
from .claim import claim as claim_entry
from .host import CRASHES_TO_QUARANTINE, GivenUp, iso
from .job import Job, Stage
from .job_runs import ItemResult, JobRuns, transient
from .ledger import next_backoff_s
from .stability import StabilityTracker, snapshot

if TYPE_CHECKING:
    from .durable import Submitted

__all__ = ["CRASHES_TO_QUARANTINE", "BundleLifecycle", "ItemResult", "Started"]

UNDER_WAY: Final = "under way"
"""A job left to its workflow by a stop: its claim stays, and the next start takes it up."""


@dataclass(frozen=True)
class Started:
    """A claimed bundle whose job was handed to its workflow and is not waited for yet."""

    claimed: Path
    name: str
    submitted: Submitted


class BundleLifecycle(JobRuns):
    """The claim side of the processor: what it reads besides the run side's is declared here."""

    bundles: StabilityTracker
    claimed_dir: Path
    retry_due_at: float | None
    """When the next back-off runs out (None: read it from the ledger at the next look)."""

    def start_bundle(self, entry: Path) -> ItemResult | Started:
        """A ready bundle the portfolio's wave admitted (``step``): claimed, and its job handed
        to its workflow (the wave's are waited for together, by :meth:`finish`)."""
        self.waiting.pop(entry.name, None)
        claimed = claim_entry(entry, self.claimed_dir)
        if claimed is None:
            return ItemResult(
                entry.name, "bundle", "gone", "it left the inbox before it was claimed"
            )
        outcome = self._claimed_lifecycle(claimed, name=entry.name)
        return outcome if isinstance(outcome, Started) else self._left(claimed, outcome)

    def wait_for_budget(self, entry: Path, refusal: str) -> ItemResult:
        """The bundle stays in the inbox, unclaimed and not failed, until the budget funds it."""
        if self.waiting.get(entry.name) != refusal:  # said once, not at every look
            self.log.info("bundle waits", bundle=entry.name, reason=refusal)
        self.waiting[entry.name] = refusal
        return ItemResult(entry.name, "bundle", "waiting", refusal)

    def recover(self) -> list[ItemResult]:
        """Finish what a crash left: DBOS first finishes the workflows it had in flight (each from
        its last completed stage), then each input still claimed goes on from its job's stage."""
        from .claim import recover, sweep_stale

        # Output folders half-built by a crash: the writer's temp folders, an hour old or more.
        runs = self.workspace.outbox / "runs"
        for project in sorted(runs.iterdir()) if runs.is_dir() else []:
            if project.is_dir():
                sweep_stale(project, older_than_s=3600, now=self.clock())
        # The daemon is alone at start (one per workspace, one per shared database): a hold whose
        # job has ended or never began (a kill between the two) is given back.
        for identity in self.ledger.holders():
            stored = self.ledger.job(identity)
            if stored is None or Job.from_json(stored).done(Stage.SETTLED):
                self.ledger.release(identity)
        results = []
        if self.ledger.jobs(unfinished=True):
            results = [self._processed(job) for job in self.engine().start(self.host)]
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
            for item in self.ledger.due_retries(now=iso(now))
            if item.next_attempt_at and item.output and Path(item.output).exists()
        ]

    def _next_retry(self, now: float) -> float:
        """When the next back-off runs out; read from the ledger only when it may have moved, so
        an idle daemon's tick asks nothing of the database."""
        if self.retry_due_at is None:
            times = [
                datetime.fromisoformat(item.next_attempt_at).timestamp()
                for item in self.ledger.items("retry")
                # Only claims that are here: another machine's, or one gone, is no one's to wait for.
                if item.next_attempt_at and item.output and Path(item.output).exists()
            ]
            self.retry_due_at = min(times, default=float("inf"))
        return self.retry_due_at

    def _process_claimed(self, claimed: Path, *, name: str) -> ItemResult:
        outcome = self._claimed_lifecycle(claimed, name=name)
        return (
            self.finish(outcome) if isinstance(outcome, Started) else self._left(claimed, outcome)
        )

    def _left(self, claimed: Path, result: ItemResult) -> ItemResult:
        if result.state not in ("retry", UNDER_WAY):
            self.ledger.forget_claim(claimed.name)  # it has left its claimed place for good
        return result

    def finish(self, started: Started) -> ItemResult:
        """A started job, waited for: what its workflow came to, or, when a stop is asked for
        first, left under way (claimed) for the next start."""
        claimed, name, job = started.claimed, started.name, started.submitted.job
        try:
            done = self.engine().result(started.submitted, stop=self.stopping)
        except GivenUp as given_up:
            self.ledger.finish_run(job.identity)
            result = self._quarantine(
                claimed,
                name,
                job.identity,
                f"{name}: its run stopped the daemon {given_up.crashes} times (killed, out of "
                "memory, or a crash in a library) and was set aside so it cannot do so a third "
                "time; the daemon's log (journalctl) says what ended the process",
            )
        except Exception as exc:
            result = self._set_aside(claimed, name, job.identity, exc)
        else:
            if done is None:
                result = ItemResult(name, "bundle", UNDER_WAY, "left to its workflow")
            else:
                result = self._processed(done)
        return self._left(claimed, result)

    def _claimed_lifecycle(self, claimed: Path, *, name: str) -> ItemResult | Started:
        now = self.clock()
        self.host.fault("after-claim")
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
            references = ""
            digest = remembered or self._kept_identity(content)
            if digest is None:
                digest, snapshot = self.portfolio.identity(bundle, content)
                references = json.dumps(snapshot.to_dict(), sort_keys=True)
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
        # Another claim's job: a duplicate while that claim is still under way or once it ran;
        # an unsettled job whose input is gone (set aside by a kill mid-way) is no one's.
        taken = job is not None and (job.done(Stage.SETTLED) or Path(job.claimed).exists())
        if taken or (known is not None and known.state == "done"):
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
        if job is not None and job.done(Stage.RAN) and not self._outputs_stand(job):
            self.log.warning("a set-aside job's outputs are gone; it runs afresh", bundle=name)
            self.ledger.drop_job(digest)
            self.ledger.release(digest)
            job = None
        if job is not None and job.done(Stage.RAN):
            # Its run stands (set aside after it, then put back by `retry`): this claim takes the
            # job over and goes on from its stage, never running or charging it twice.
            job = dataclasses.replace(job, claimed=str(claimed), bundle=str(bundle))
            self.ledger.save_job(digest, job.stage.value, job.to_json(), now=iso(now))
            self.log.info("job resumed", bundle=name, stage=job.stage.value)
            return self._claimed_job(claimed, job, name)
        refusal = self._hold_budget(digest)
        if refusal is not None:  # another machine took what was left since the bundle was admitted
            shutil.rmtree(claimed.with_name(f".{claimed.name}.d"), ignore_errors=True)
            release(claimed, self.workspace.inbox_projects / name)
            self.waiting[name] = refusal
            self.log.info("bundle waits", bundle=name, reason=refusal)
            return ItemResult(name, "bundle", "waiting", refusal)
        if known is None:
            known = self.ledger.begin(digest, kind="bundle", name=name, now=iso(now))
        # Before its run, which may take minutes: the operator sees the bundle was taken.
        self.log.info("bundle taken", bundle=name, identity=digest[:12])
        job = Job(
            digest,
            name,
            str(claimed),
            str(bundle),
            known.first_seen,
            rerun=False,
            content=content,
            references=references,
        )
        self.ledger.save_job(digest, job.stage.value, job.to_json(), now=iso(now))
        return self._claimed_job(claimed, job, name)

    def _kept_identity(self, content: str) -> str | None:
        """The identity of a job set aside after its run whose input had this content."""
        for stored in self.ledger.jobs(unfinished=True):
            job = Job.from_json(stored)
            if (
                job.content == content
                and not job.rerun
                and job.done(Stage.RAN)
                and not Path(job.claimed).exists()
            ):
                return job.identity
        return None

    def _outputs_stand(self, job: Job) -> bool:
        context = self.host.job_context(job)
        if job.done(Stage.PUBLISHED):
            return (context.run_folder(job) / "proposals.json").is_file()
        return (context.staging(job) / job.run_id / "proposals.json").is_file()

    def _claimed_job(self, claimed: Path, job: Job, name: str) -> ItemResult | Started:
        try:
            submitted = self.engine().submit(job, self.host)
        except Exception as exc:
            return self._set_aside(claimed, name, job.identity, exc)
        self._finished_first(submitted)
        return Started(claimed, name, submitted)

    def _set_aside(self, claimed: Path, name: str, key: str, exc: Exception) -> ItemResult:
        """What an exception costs a claimed bundle: a bad bundle is quarantined with the reason,
        a transient failure retried from its claimed place, anything else is a bug that costs
        this bundle and never the daemon."""
        if isinstance(exc, BundleError | ArchiveError | ClaimError):
            return self._quarantine(claimed, name, key, str(exc))
        reason = transient(exc)
        if reason is not None:
            return self._retry_later(claimed, name, key, reason)
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
        # Unpacked (or imported) beside the claimed input under a dot-name, which recover()
        # skips; a half extraction left by a crash is cleared first, the input is the truth.
        unpacked = claimed.with_name(f".{claimed.name}.d")
        if unpacked.exists():
            shutil.rmtree(unpacked)
        if claimed.is_dir():
            # A folder is a bundle, or a planner's estimate with its side file and kuttliste.
            return import_folder(claimed, unpacked) or claimed
        return extract_bundle(
            claimed,
            unpacked,
            max_total_bytes=self.config.daemon.max_bundle_bytes,
            name=original_name(claimed),
        )

    def _quarantine(
        self, claimed: Path, name: str, digest: str | None, sentence: str
    ) -> ItemResult:
        # The user knows the bundle by its inbox name, not by where the daemon claimed it.
        sentence = (
            sentence.replace(f"{claimed}/", "")
            .replace(str(claimed), name)
            .replace(claimed.name, name)
        )
        if digest is not None:
            # Before the input moves: a kill in between leaves a claim that is decided again.
            # A job that ran keeps its row (its outputs stand) and its hold on the budget (what
            # it was billed is not charged yet), for `retry` to go on from.
            stored = self.ledger.job(digest)
            if stored is None or not Job.from_json(stored).done(Stage.RAN):
                self.ledger.drop_job(digest)
                self.ledger.release(digest)
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
            if self.ledger.get(digest) is None:
                self.ledger.begin(digest, kind="bundle", name=name, now=iso(self.clock()))
            self.ledger.mark(
                digest, "failed", now=iso(self.clock()), error=sentence, output=str(destination)
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
        self.ledger.schedule_retry(digest, now=iso(self.clock()), at=iso(self.clock() + delay))
        self.retry_due_at = None
        self.ledger.mark(digest, "retry", now=iso(self.clock()), output=str(claimed), error=why)
        self.log.warning("bundle will be retried", bundle=name, reason=why, in_seconds=delay)
        return ItemResult(name, "bundle", "retry", why)
