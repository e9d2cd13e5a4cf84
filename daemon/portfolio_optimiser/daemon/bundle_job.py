"""A bundle's lifecycle in the daemon: claimed → ran → published → charged → settled.

Decides: the only safe order for one bundle. It is claimed by atomic rename (so it is processed
once) and given its run identity, which the claim keeps (content, and the portfolio inputs that
shape its candidates). It is looked up in the ledger (an identity already run is reported, not
re-run, not re-charged), run, published (outputs, then the spend file, then the ledger), and only
then leaves for ``bundles/projects/``. A permanent problem quarantines it with a report saying
what, where and how to fix; a transient one retries with back-off from its claimed place; a
project the budget cannot fund waits in the inbox, unclaimed and not failed. Ingested projects
the portfolio moved under are run again in place. The processor (``processor``) decides when.
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
from typing import Any, Final

from portfolio_optimiser._atomic import publish_text
from portfolio_optimiser.config import Config
from portfolio_optimiser.context.errors import BundleError
from portfolio_optimiser.outputs.writer import schema_ref_for, write_run_outputs
from portfolio_optimiser.pipeline.budget import read_spend, write_spend
from portfolio_optimiser.pipeline.run import ClientFactory
from portfolio_optimiser.reasoning.redaction import safe_text
from portfolio_optimiser.reasoning.store import Store

from .archive import ArchiveError, extract_bundle
from .claim import ClaimError, claim, content_digest, original_name, release
from .ledger import Ledger, LedgerError, next_backoff_s
from .portfolio import Portfolio
from .published import Published
from .runner import RunInputs, run_pipeline
from .stability import StabilityTracker, snapshot
from .workspace import Workspace

__all__ = ["CRASHES_TO_QUARANTINE", "BundleLifecycle", "ItemResult"]

CRASHES_TO_QUARANTINE: Final = 2
"""Runs of one bundle that ended the process; at the next start it is quarantined, not re-run."""
_TRANSIENT = frozenset(
    {errno.ENOSPC, errno.EIO, errno.EBUSY, errno.EAGAIN, errno.EDQUOT, errno.ETIMEDOUT}
)


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
    _test_fault: str
    """The processor reads PORTFOLIO_OPTIMISER_TEST_FAULT once (see its ``__post_init__``)."""

    def _fault(self, point: str) -> None:
        """TEST-ONLY: die here, without cleanup, when the test fault hook names ``point``."""
        if self._test_fault == point:
            os._exit(137)

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
        now = _iso(self.clock())
        known = self.ledger.get(identity) or self.ledger.begin(
            identity, kind="bundle", name=name, now=now
        )
        if self.ledger.unfinished_starts(identity) >= CRASHES_TO_QUARANTINE:
            # The ingested project stays where it is; only this identity is given up.
            why = (
                f"{name}: its rerun stopped the daemon {CRASHES_TO_QUARANTINE} times; not run again"
            )
            self.ledger.finish_run(identity)
            self.ledger.mark(identity, "failed", now=now, error=why)
            self.log.error("rerun given up", project=name, problem=why)
            return ItemResult(name, "rerun", "failed", why)
        self.log.info("rerun: the portfolio moved under an ingested project", project=name)
        try:
            result = self._run(folder, identity, known.first_seen, name, rerun=True)
        except OSError as exc:
            if exc.errno in _TRANSIENT:  # left unfinished: the next event or start tries again
                self.log.warning("rerun put off", project=name, reason=exc.strerror)
                return ItemResult(name, "rerun", "retry", str(exc.strerror))
            why = f"{name}: its rerun failed ({exc})"
            self.log.error("rerun failed", project=name, exc_info=exc)
            self.ledger.mark(identity, "failed", now=_iso(self.clock()), error=why)
            return ItemResult(name, "rerun", "failed", why)
        except Exception as exc:
            why = f"{name}: its rerun failed ({type(exc).__name__}: {exc})"
            self.log.error("rerun failed", project=name, exc_info=exc)
            self.ledger.mark(identity, "failed", now=_iso(self.clock()), error=why)
            return ItemResult(name, "rerun", "failed", why)
        finally:
            self.ledger.finish_run(identity)
            self.running_digest = None
        return ItemResult(name, "rerun", result.state, result.message, result.output)

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
        claimed = claim(entry, self.claimed_dir)
        if claimed is None:
            return ItemResult(
                entry.name, "bundle", "gone", "it left the inbox before it was claimed"
            )
        return self._process_claimed(claimed, name=entry.name)

    def recover(self) -> list[ItemResult]:
        """Finish what a crash left claimed: the ledger makes every step idempotent."""
        from .claim import recover, sweep_stale

        # Output folders half-built by a crash: the writer's temp folders, an hour old or more.
        runs = self.workspace.outbox / "runs"
        for project in sorted(runs.iterdir()) if runs.is_dir() else []:
            if project.is_dir():
                sweep_stale(project, older_than_s=3600, now=self.clock())
        return [
            self._process_claimed(path, name=original_name(path))
            for path in recover(self.claimed_dir)
        ]

    def _due_retries(self, now: float) -> list[Path]:
        due = []
        for item in self.ledger.items("retry"):
            if item.next_attempt_at and item.next_attempt_at <= _iso(now) and item.output:
                path = Path(item.output)
                if path.exists():
                    due.append(path)
        return due

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
        known = self.ledger.get(digest)
        if (
            known is not None
            and known.state == "done"
            and remembered is not None
            and not self._settled(content, known.detail)
        ):
            # Done, but a crash came before the bundle moved to bundles/projects/: finish that.
            project_id = (known.detail or "").split(" run ", 1)[0]
            self._settle_input(bundle, project_id)
            return ItemResult(name, "bundle", "done", f"finished after a restart ({known.detail})")
        if known is not None and known.state == "done":
            # Run before: also an older version dropped again, which stays a duplicate (it was
            # run and charged once; reinstating it without a run would mislead every report).
            shutil.rmtree(claimed.with_name(f".{claimed.name}.d"), ignore_errors=True)
            destination = release(claimed, self.workspace.duplicates / name)
            publish_text(
                destination.with_name(destination.name + ".duplicate.txt"),
                safe_text(
                    f"{name} has the same content as a bundle already run ({known.detail or known.name}); "
                    "it was not run again and nothing was charged."
                )
                + "\n",
            )
            self.log.info("duplicate bundle", bundle=name, first=known.name)
            return ItemResult(name, "bundle", "duplicate", f"identical to {known.name}")
        if known is not None and known.state == "failed":
            return self._quarantine(
                claimed, name, digest, known.error or "it failed before with the same content"
            )
        if known is None:
            self.ledger.begin(digest, kind="bundle", name=name, now=_iso(now))
            known = self.ledger.get(digest)
        first_seen = known.first_seen if known is not None else _iso(now)
        crashes = self.ledger.unfinished_starts(digest)
        if crashes >= CRASHES_TO_QUARANTINE:
            self.ledger.finish_run(digest)
            return self._quarantine(
                claimed,
                name,
                digest,
                f"{name}: its run stopped the daemon {crashes} times (killed, out of memory, or a "
                "crash in a library) and was set aside so it cannot do so a third time; the "
                "daemon's log (journalctl) says what ended the process",
            )
        try:
            result = self._run(bundle, digest, first_seen, name)
        except Exception as exc:
            return self._set_aside(claimed, name, digest, exc)
        finally:
            self.ledger.finish_run(digest)
            self.running_digest = None
        return result

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

    def _settled(self, digest: str, detail: str | None) -> bool:
        """Whether the bundle of a finished run sits in bundles/projects/ (its content, by hash)."""
        project_id = (detail or "").split(" run ", 1)[0]
        ingested = self.workspace.bundles_projects / project_id
        if not project_id or not ingested.is_dir():
            return False
        try:
            return content_digest(ingested) == digest
        except (ClaimError, OSError):
            return False

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

    def _run(
        self, bundle: Path, digest: str, first_seen: str, name: str, *, rerun: bool = False
    ) -> ItemResult:
        ws = self.workspace
        stamp = first_seen  # the run's timestamp is when its content was first seen: stable across restarts
        run_id = f"{first_seen[:10].replace('-', '')}-{digest[:10]}"
        published = sorted(
            p for p in ws.outbox.glob(f"runs/*/{run_id}") if (p / "proposals.json").is_file()
        )
        if published:
            # A crash after the outputs were published: they are the run's durable result. Running
            # again would give other outputs (the records now reuse the first conclusions), so the
            # steps after publishing are finished from what was published.
            summary = Published.read(published[0])
        else:
            self.ledger.start_run(digest)
            self.running_digest = digest
            self._fault("during-run")
            inputs = RunInputs.build(
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
            result = run_pipeline(inputs, bundle, run_id)
            run_folder = ws.outbox / "runs" / result.project_id / run_id
            folder = write_run_outputs(
                result,
                outbox=ws.outbox,
                run_id=run_id,
                stamp=stamp,
                schema_ref=schema_ref_for(run_folder, ws.root),
            )
            summary = Published.of(result, folder)
        self._fault("after-outputs")
        charged_id = f"{summary.project_id}/{run_id}"
        spend = read_spend(ws.spend_file)
        if all(
            run.run_id != charged_id for run in spend.runs
        ):  # charged once, even after a crash here
            write_spend(
                ws.spend_file,
                spend.add_run(
                    run_id=charged_id,
                    project_id=summary.project_id,
                    tokens=summary.tokens,
                    budget_stop=summary.budget_stop,
                ),
                stamp=_iso(self.clock()),
            )
            self._fault("after-spend")
        self.ledger.add_candidates(run_id, summary.project_id, summary.candidates)
        self.ledger.record_project_run(
            summary.project_id, run_id, str(summary.folder), now=_iso(self.clock())
        )
        self.ledger.mark(
            digest,
            "done",
            now=_iso(self.clock()),
            detail=f"{summary.project_id} run {run_id}",
            output=str(summary.folder),
        )
        if not rerun:
            self._settle_input(bundle, summary.project_id)  # a rerun's bundle is already there
        self.publish_portfolio()
        self.log.info(
            "bundle processed",
            bundle=name,
            project=summary.project_id,
            run=run_id,
            candidates=len(summary.candidates),
            budget_stop=summary.budget_stop,
            outputs=str(summary.folder),
        )
        return ItemResult(
            name, "bundle", "done", f"{len(summary.candidates)} candidates", summary.folder
        )

    def _settle_input(self, bundle: Path, project_id: str) -> None:
        """The input leaves only now that outputs, spend and ledger are durable."""
        target = self.workspace.bundles_projects / project_id
        if target.exists():
            superseded = (
                self.workspace.bundles_projects
                / ".superseded"
                / f"{project_id}-{int(self.clock())}"
            )
            superseded.parent.mkdir(parents=True, exist_ok=True)
            release(target, superseded)  # a unique name: two versions in one second never collide
        release(bundle, target)
        if bundle.name.startswith(".") and bundle.name.endswith(".d"):
            archive = bundle.with_name(bundle.name[1:].removesuffix(".d"))
            if archive.exists():
                archive.unlink()  # the unpacked bundle now lives in bundles/projects/
        self._rebuild_references()
        self.reruns_due = True

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
        self.ledger.mark(digest, "retry", now=_iso(self.clock()), output=str(claimed), error=why)
        self.log.warning("bundle will be retried", bundle=name, reason=why, in_seconds=delay)
        return ItemResult(name, "bundle", "retry", why)
