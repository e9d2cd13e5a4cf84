"""The processor: what ``once`` and ``run`` share — scan, decide readiness, process one item.

Decides: what happens to each inbox entry, in the only safe order. A bundle is claimed by atomic
rename (so it is processed once), hashed, looked up in the ledger (identical content is reported,
not re-run, not re-charged), run through the pipeline, published (outputs, then the spend file,
then the ledger), and only then leaves for ``bundles/projects/``. A permanent problem quarantines
it with a report saying what, where and how to fix; a transient one retries with back-off from its
claimed place; a project the budget cannot fund waits in the inbox, unclaimed and not failed.
Verdicts are read in place (``verdicts``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from portfolio_optimiser._atomic import publish_text
from portfolio_optimiser.config import Config
from portfolio_optimiser.context.errors import BundleError
from portfolio_optimiser.outputs.writer import schema_ref_for, write_run_outputs
from portfolio_optimiser.pipeline.budget import (
    read_spend,
    write_spend,
)
from portfolio_optimiser.pipeline.run import (
    ClientFactory,
    default_client_factory,
)
from portfolio_optimiser.reasoning.environment import admission_for
from portfolio_optimiser.reasoning.redaction import safe_text
from portfolio_optimiser.reasoning.store import Store

from .archive import ArchiveError, extract_bundle
from .claim import ClaimError, claim, content_digest, original_name, release, same_filesystem
from .filters import InboxFilter
from .ledger import Ledger, LedgerError, next_backoff_s
from .portfolio import Portfolio
from .published import Published
from .runner import RunInputs, learning_store, run_pipeline
from .stability import StabilityTracker, snapshot
from .verdicts import VerdictState, ingest_verdict
from .workspace import Workspace

__all__ = ["ItemResult", "Processor"]

Clock = Callable[[], float]
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


@dataclass
class Processor:
    workspace: Workspace
    config: Config
    ledger: Ledger
    clock: Clock
    log: Any
    client_factory: ClientFactory = default_client_factory
    environ: dict[str, str] | None = None
    waiting: dict[str, str] = field(default_factory=dict)
    """Bundles left in the inbox for now, with the reason (shown by ``status``)."""
    history: list[ItemResult] = field(default_factory=list)
    recovery_due: bool = False
    _cached_admission: Any = None
    """Set by the service: finish what a crash left claimed on the first step, after READY=1
    (a recovered run may take minutes; systemd's start timeout must not)."""

    def __post_init__(self) -> None:
        self.filter = InboxFilter()
        self.bundles = StabilityTracker(self.config.daemon.stability_seconds)
        self.verdict_quiet = StabilityTracker(self.config.daemon.verdict_quiet_seconds)
        ws = self.workspace
        # Claims are renames: the claim folder must sit on the inbox's file system.
        self.claimed_dir = (
            ws.claimed
            if same_filesystem(ws.inbox_projects, ws.state)
            else ws.root / "inbox" / ".claimed"
        )
        self.claimed_dir.mkdir(parents=True, exist_ok=True)
        self.running_digest: str | None = None
        """The bundle whose pipeline run is under way (its start counted in the ledger)."""
        self.reasoning_store = Store(ws.state)
        self.portfolio = Portfolio(
            ws, self.config, self.log, lambda: learning_store(ws, self.ledger, self.log)
        )
        # Rebuilt at every start: a crash between a settle and its rebuild must not leave the
        # classes behind the projects (and a workspace from before them gets them).
        self._rebuild_references()
        self.reruns_due = True
        """Whether ingested projects may be due a new run (the portfolio moved under them); read
        from the ledger at the next step, so a crash loses nothing."""
        # TEST-ONLY fault hook: PORTFOLIO_OPTIMISER_TEST_FAULT=after-claim|during-run|after-outputs|after-spend
        # makes the process die (os._exit(137), as if SIGKILLed) at that point, so the crash-safety
        # tests can kill a run between two durable steps. Read once; unset in production.
        self._test_fault = (self.environ if self.environ is not None else os.environ).get(
            "PORTFOLIO_OPTIMISER_TEST_FAULT", ""
        )

    def _fault(self, point: str) -> None:
        """TEST-ONLY: die here, without cleanup, when the test fault hook names ``point``."""
        if self._test_fault == point:
            os._exit(137)

    # -- hints and scans -------------------------------------------------------------------------

    def observe(self, entry: Path, *, moved_in: bool = False) -> None:
        now = self.clock()
        if entry.parent == self.workspace.inbox_verdicts:
            if self.filter.is_verdict_candidate(entry):
                result = self._verdict(entry, quiet=False)  # valid bytes are complete at once
                if result.state == VerdictState.NOT_READY.value:
                    self.verdict_quiet.observe(entry, snapshot(entry), now=now)
                else:
                    self.verdict_quiet.forget(entry)
                    if result.state != VerdictState.ALREADY.value:
                        self.history.append(result)
            return
        if not (self.filter.is_bundle_candidate(entry)):
            return
        try:
            shot = snapshot(entry)
        except OSError:
            # A tree that cannot be walked is not going to settle: take it now, so that claiming
            # it quarantines it with the reason, instead of failing every scan.
            moved_in, shot = True, None
        if moved_in:
            self.bundles.moved_in(entry, now=now)
        else:
            self.bundles.observe(entry, shot, now=now)

    def settle_by_age(self) -> None:
        """For ``once``: an entry whose newest change is older than its quiet period is ready now.

        The daemon learns quiet by watching; a one-shot run has no time to watch, so it asks the
        file system how long each entry has been untouched.
        """
        now = self.clock()
        for tracker, quiet_s in (
            (self.bundles, self.config.daemon.stability_seconds),
            (self.verdict_quiet, self.config.daemon.verdict_quiet_seconds),
        ):
            for entry in tracker.tracking():
                shot = snapshot(entry)
                if shot is None:
                    tracker.forget(entry)
                    continue
                newest = max((mtime for _rel, _size, mtime, _dir in shot.entries), default=0) / 1e9
                if now - newest >= quiet_s:
                    tracker.moved_in(entry, now=now)

    def scan(self) -> None:
        """Look at every top-level entry: events are hints, the disk is the truth."""
        for inbox in (self.workspace.inbox_projects, self.workspace.inbox_verdicts):
            if not inbox.is_dir():
                continue
            for entry in sorted(inbox.iterdir()):
                self.observe(entry)

    def step(self, *, stop: Callable[[], bool] = lambda: False) -> list[ItemResult]:
        """Process everything that is ready now, one item at a time."""
        results: list[ItemResult] = []
        if self.recovery_due:
            self.recovery_due = False
            results.extend(self.recover())
        now = self.clock()
        for verdict in self.verdict_quiet.ready(now=now):
            if stop():
                return results
            if verdict.exists():
                results.append(self._verdict(verdict, quiet=True))
        # Look again before trusting the quiet: the inbox is watched at its top level only, so a
        # slow copy into a folder makes no further events, and only a fresh look sees it growing.
        for entry in self.bundles.tracking():
            try:
                shot = snapshot(entry)
            except OSError:
                self.bundles.moved_in(entry, now=now)  # unreadable: claim it and say why
                continue
            # The quiet period counts from the tree's last change, not from when it was noticed.
            newest = (
                max((mtime for _rel, _size, mtime, _dir in shot.entries), default=0) / 1e9
                if shot
                else now
            )
            self.bundles.observe(entry, shot, now=min(now, max(newest, 0.0)))
        for claimed in self._due_retries(now):
            if stop():
                return results
            results.append(self._process_claimed(claimed, name=original_name(claimed)))
        for entry in self.bundles.ready(now=now):
            if stop():
                break
            if entry.exists():
                results.append(self.process_bundle(entry))
        if self.reruns_due and not self.bundles.pending_count and not stop():
            # After the inbox: a portfolio still filling up would make each rerun stale at once.
            results.extend(self._reruns(stop))
        self.history.extend(results)
        return results

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

    def has_work(self) -> bool:
        """Whether ``step`` would find something to do now."""
        now = self.clock()
        if self.recovery_due:
            return True
        if self._due_retries(now):
            return True
        if self.reruns_due and not self.bundles.pending_count:
            return True
        return any(t.seconds_until_next(now=now) == 0.0 for t in (self.bundles, self.verdict_quiet))

    def pending(self) -> int:
        return self.bundles.pending_count + self.verdict_quiet.pending_count

    # -- verdicts --------------------------------------------------------------------------------

    def _admission(self) -> Any:
        """Built once per processor (the environment is read at start and on reload), with the
        processor's clock, so each record still carries the moment it was written."""
        if self._cached_admission is None:
            self._cached_admission = admission_for(
                self.config,
                now=datetime.fromtimestamp(self.clock(), UTC),
                environ=self.environ,
                clock=lambda: datetime.fromtimestamp(self.clock(), UTC),
            )
        return self._cached_admission

    def _verdict(self, path: Path, *, quiet: bool) -> ItemResult:
        now = self.clock()
        admission = self._admission()
        outcome = ingest_verdict(
            path,
            ledger=self.ledger,
            store=self.reasoning_store,
            admission=admission,
            wiki_root=self.workspace.wiki,
            now_iso=_iso(now),
            quiet=quiet,
        )
        if outcome.state is VerdictState.INGESTED:
            self.verdict_quiet.forget(path)
            self.reruns_due = True  # what experts taught may add a candidate somewhere
            self.publish_portfolio()
            self.log.info(
                "verdict ingested",
                file=path.name,
                candidate=outcome.candidate_id,
                result=outcome.message,
                promoted=str(outcome.promoted) if outcome.promoted else None,
                retracted=outcome.retracted,
            )
        elif outcome.state is VerdictState.REPORTED:
            self.verdict_quiet.forget(path)
            self.log.warning("verdict refused", file=path.name, problem=outcome.message)
        return ItemResult(
            path.name, "verdict", outcome.state.value, outcome.message, outcome.promoted
        )

    # -- bundles ---------------------------------------------------------------------------------

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
        except (BundleError, ArchiveError, ClaimError) as exc:
            return self._quarantine(claimed, name, content, str(exc))
        except OSError as exc:
            if exc.errno in _TRANSIENT:
                return self._retry_later(claimed, name, content, f"{exc.strerror}")
            return self._internal_error(claimed, name, content, exc)
        except Exception as exc:
            return self._internal_error(claimed, name, content, exc)
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
        except (BundleError, ArchiveError) as exc:
            return self._quarantine(claimed, name, digest, str(exc))
        except OSError as exc:
            if exc.errno in _TRANSIENT:
                return self._retry_later(claimed, name, digest, f"{exc.strerror}")
            return self._internal_error(claimed, name, digest, exc)
        except Exception as exc:
            return self._internal_error(claimed, name, digest, exc)
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
