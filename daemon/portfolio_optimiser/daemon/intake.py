"""The intake: the watching half of the daemon.

Decides which inbox entries are ready: a watcher's hint or a scan is only a reason to look (the
disk is the truth), an entry is ready once it has been quiet for its quiet period, and a bundle
is looked at again before its quiet is trusted. A verdict file is read in place as soon as its
bytes are whole (``verdicts``), so an expert's answer is taken in at once. What a ready bundle
becomes is the job desk's (``desk``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from portfolio_optimiser.config import Config
from portfolio_optimiser.reasoning.environment import admission_for
from portfolio_optimiser.reasoning.queries import Admission
from portfolio_optimiser.reasoning.store import Store

from .filters import InboxFilter
from .ledger import Ledger
from .outcomes import ItemResult
from .signing import Signing, signed_verdict
from .stability import StabilityTracker, snapshot
from .stamps import iso
from .verdicts import VerdictState, ingest_verdict, report_verdict_problem
from .workspace import Workspace

__all__ = ["Intake"]


class Intake:
    def __init__(
        self,
        workspace: Workspace,
        config: Config,
        ledger: Ledger,
        clock: Callable[[], float],
        log: Any,
        store: Store,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.workspace, self.config = workspace, config
        self.ledger = ledger.reopen()
        """The intake's own connection: a verdict may be taken in on the loop's thread while a
        run is in hand on the processing thread (``Processor.observe``)."""
        self.clock, self.log, self.store, self.environ = clock, log, store, environ
        self.filter = InboxFilter()
        self.bundles = StabilityTracker(config.daemon.stability_seconds)
        self.verdicts = StabilityTracker(config.daemon.verdict_quiet_seconds)
        self.signing = Signing(config.verdicts.require_signature, workspace.root / "config")

    def adopt_verdict_policy(self, config: Config) -> None:
        self.config = self.config.model_copy(update={"verdicts": config.verdicts})
        self.signing = Signing(config.verdicts.require_signature, self.workspace.root / "config")

    @functools.cached_property
    def _admission(self) -> Admission:
        """Built at the first verdict, not at start-up, and then once (the environment is read at
        start and on reload), with the intake's clock, so each record still carries the moment
        it was written."""
        return admission_for(
            self.config,
            now=datetime.fromtimestamp(self.clock(), UTC),
            environ=self.environ,
            clock=lambda: datetime.fromtimestamp(self.clock(), UTC),
        )

    def observe(self, entry: Path, *, moved_in: bool = False) -> ItemResult | None:
        """A hint about ``entry``; a verdict whose bytes are whole is taken in now (what became
        of it, unless it was taken in before)."""
        now = self.clock()
        if entry.parent == self.workspace.inbox_verdicts:
            signed = signed_verdict(entry)
            if signed is not None and not self.filter.is_junk(entry.name):
                entry = signed  # a signature made or changed: its verdict is looked at again
            if not self.filter.is_verdict_candidate(entry):
                return self._not_a_verdict(entry)
            result = self.verdict(entry, quiet=False)  # valid bytes are complete at once
            if result.state == VerdictState.NOT_READY.value:
                self.verdicts.observe(entry, snapshot(entry), now=now)
                return None
            self.verdicts.forget(entry)
            return None if result.state == VerdictState.ALREADY.value else result
        if not self.filter.is_bundle_candidate(entry) and self.filter.not_taken(entry) is None:
            return None  # junk, or gone; what the inbox does not take is claimed and set aside
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
        return None

    def _not_a_verdict(self, entry: Path) -> ItemResult | None:
        """A file in inbox/verdicts/ that is no verdict: the sentence beside it (an expert's
        file is never moved), written and logged once."""
        sentence = self.filter.not_taken(entry, verdicts=True)
        if sentence is None:
            return None
        if not report_verdict_problem(entry, sentence, now_iso=iso(self.clock())):
            return None  # reported before, in these words
        self.log.warning("not a verdict", file=entry.name, problem=sentence)
        return ItemResult(entry.name, "verdict", VerdictState.REPORTED.value, sentence)

    def scan(self) -> list[ItemResult]:
        """Look at every top-level entry: events are hints, the disk is the truth."""
        taken = []
        for inbox in (self.workspace.inbox_projects, self.workspace.inbox_verdicts):
            if inbox.is_dir():
                for entry in sorted(inbox.iterdir()):
                    if signed_verdict(entry) is not None:
                        continue  # looked at with its verdict
                    result = self.observe(entry)
                    if result is not None:
                        taken.append(result)
        return taken

    def look_at_verdicts_again(self) -> list[ItemResult]:
        """After a run settles: each verdict file in the inbox looked at again, so one that named
        a candidate the run had not yet recorded is taken in now (the rest are read before)."""
        taken = []
        inbox = self.workspace.inbox_verdicts
        for entry in sorted(inbox.iterdir()) if inbox.is_dir() else []:
            if signed_verdict(entry) is None and (result := self.observe(entry)) is not None:
                taken.append(result)
        return taken

    def settle_by_age(self) -> None:
        """For ``once``: an entry whose newest change is older than its quiet period is ready now.

        The daemon learns quiet by watching; a one-shot run has no time to watch, so it asks the
        file system how long each entry has been untouched.
        """
        now = self.clock()
        for tracker in (self.bundles, self.verdicts):
            for entry in tracker.tracking():
                shot = snapshot(entry)
                if shot is None:
                    tracker.forget(entry)
                    continue
                if now - _newest(shot) >= tracker.quiet_s:
                    tracker.moved_in(entry, now=now)

    def ready_verdicts(self) -> list[Path]:
        return [v for v in self.verdicts.ready(now=self.clock()) if v.exists()]

    def ready_bundles(self) -> list[Path]:
        """The bundles quiet for their quiet period, after a fresh look at each: the inbox is
        watched at its top level only, so a slow copy into a folder makes no further events."""
        now = self.clock()
        for entry in self.bundles.tracking():
            try:
                shot = snapshot(entry)
            except OSError:
                self.bundles.moved_in(entry, now=now)  # unreadable: claim it and say why
                continue
            # The quiet period counts from the tree's last change, not from when it was noticed.
            newest = _newest(shot) if shot else now
            self.bundles.observe(entry, shot, now=min(now, max(newest, 0.0)))
        return [e for e in self.bundles.ready(now=now) if e.exists()]

    def verdict(self, path: Path, *, quiet: bool) -> ItemResult:
        """One verdict file read in place (``quiet``: it has not changed for its quiet period)."""
        outcome = ingest_verdict(
            path,
            ledger=self.ledger,
            store=self.store,
            admission=self._admission,
            wiki_root=self.workspace.wiki,
            now_iso=iso(self.clock()),
            quiet=quiet,
            signing=self.signing,
        )
        if outcome.state is VerdictState.INGESTED:
            self.verdicts.forget(path)
            self.log.info(
                "verdict ingested",
                file=path.name,
                candidate=outcome.candidate_id,
                result=outcome.message,
                promoted=str(outcome.promoted) if outcome.promoted else None,
                retracted=outcome.retracted,
            )
        elif outcome.state is VerdictState.REPORTED:
            self.verdicts.forget(path)
            self.log.warning("verdict refused", file=path.name, problem=outcome.message)
        return ItemResult(
            path.name,
            "verdict",
            outcome.state.value,
            outcome.message,
            outcome.promoted,
            outcome.candidate_id,
        )

    def close(self) -> None:
        """The intake's own connection to the ledger."""
        self.ledger.close()

    def due(self) -> bool:
        """Whether an entry's quiet period has run out."""
        now = self.clock()
        return any(t.seconds_until_next(now=now) == 0.0 for t in (self.bundles, self.verdicts))

    def seconds_until_next(self) -> float | None:
        now = self.clock()
        waits = [t.seconds_until_next(now=now) for t in (self.bundles, self.verdicts)]
        known = [w for w in waits if w is not None]
        return min(known) if known else None

    def pending(self) -> int:
        return self.bundles.pending_count + self.verdicts.pending_count

    def settling(self) -> list[str]:
        """What is still settling, by name (``once`` reports it)."""
        return sorted(e.name for t in (self.bundles, self.verdicts) for e in t.tracking())


def _newest(shot: Any) -> float:
    return max((mtime for _rel, _size, mtime, _dir in shot.entries), default=0) / 1e9
