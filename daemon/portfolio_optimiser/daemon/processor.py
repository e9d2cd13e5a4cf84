"""The processor: what ``once`` and ``run`` share — scan, decide readiness, process one item.

Decides: which inbox entries are ready (filters, stability, a rescan before trusting the quiet),
in what order a step takes them (verdicts, due retries, ready bundles, then the reruns the
portfolio is due once the inbox is quiet), and what a verdict file does (read in place,
``verdicts``). Each bundle's lifecycle is ``bundle_job``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from portfolio_optimiser.config import Config
from portfolio_optimiser.pipeline.run import (
    ClientFactory,
    default_client_factory,
)
from portfolio_optimiser.reasoning.environment import admission_for
from portfolio_optimiser.reasoning.store import Store

from .bundle_job import BundleLifecycle, ItemResult, Started
from .claim import original_name, same_filesystem
from .filters import InboxFilter
from .host import RunHost, iso
from .ledger import Ledger
from .portfolio import Portfolio
from .runner import learning_store
from .stability import StabilityTracker, snapshot
from .verdicts import VerdictState, ingest_verdict
from .workspace import Workspace

__all__ = ["ItemResult", "Processor"]

Clock = Callable[[], float]


@dataclass
class Processor(BundleLifecycle):
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
        self.retry_due_at = None
        self.host = RunHost(
            ws,
            self.config,
            self.ledger.reopen(),
            self.clock,
            self.log,
            self.client_factory,
            self.environ,
        )
        self.stopping: Callable[[], bool] = lambda: False
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

    def close(self) -> None:
        """The host's own connection to the ledger (the caller closes the one it passed in)."""
        self.host.close()

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
        self.stopping = stop
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
        # In waves: the ready bundles the portfolio can fund start, then the next wave is
        # admitted against what the last one really spent; what no wave can fund waits unclaimed.
        ready = [e for e in self.bundles.ready(now=now) if e.exists()]
        while ready and not stop():
            admitted, deferred = self.admit(ready)
            if not admitted:
                results.extend(self.wait_for_budget(entry, why) for entry, why in deferred)
                break
            started = []
            for entry in admitted:
                if stop():
                    break
                if entry.exists():
                    outcome = self.start_bundle(entry)
                    if isinstance(outcome, Started):
                        started.append(outcome)  # under way on whichever worker is free
                    else:
                        results.append(outcome)
            results.extend(self.finish(job) for job in started)
            ready = [entry for entry, _why in deferred if entry.exists()]
        if self.reruns_due and not self.bundles.pending_count and not stop():
            # After the inbox: a portfolio still filling up would make each rerun stale at once.
            results.extend(self._reruns(stop))
        self.history.extend(results)
        return results

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

    def seconds_until_next(self) -> float | None:
        """How long until ``step`` may find something due (a settling entry, a retry); None if
        nothing is waiting for time."""
        now = self.clock()
        if self.has_work():
            return 0.0
        waits = [t.seconds_until_next(now=now) for t in (self.bundles, self.verdict_quiet)]
        waits.append(self._next_retry(now) - now)
        known = [w for w in waits if w is not None and w != float("inf")]
        return max(0.0, min(known)) if known else None

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
            now_iso=iso(now),
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
