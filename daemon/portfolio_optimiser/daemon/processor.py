"""The processor: what ``once`` and ``run`` share — the intake and the job desk, and the order of
a step.

Decides in what order a step takes what is ready: verdicts first (an expert's answer changes what
every later run proposes), then the claimed bundles whose back-off ran out, then the ready
bundles in waves the portfolio's budget can fund, and once the inbox is quiet the reruns the
portfolio moved under. What is ready is the intake's (``intake``); what becomes of a bundle, the
job desk's (``desk``). One of each per process, over one portfolio and one reasoning store.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from portfolio_optimiser.config import Config
from portfolio_optimiser.pipeline.run import ClientFactory, default_client_factory
from portfolio_optimiser.reasoning.store import Store

from .claim import same_filesystem
from .claims import Floor, due_retries, next_retry
from .desk import JobDesk, Started
from .host import RunHost
from .intake import Intake
from .ledger import Ledger
from .outcomes import ItemResult
from .portfolio import Portfolio
from .stores import stores_for
from .verdicts import VerdictState
from .workspace import Workspace

__all__ = ["RERUNS_QUIET_S", "ItemResult", "Processor"]

RERUNS_QUIET_S: Final = 0.25
"""How long the verdicts must have been quiet before the reruns they call for are decided: an
expert saving verdicts one after another is answered first, and the portfolio's look (which
shares the interpreter with the verdicts' intake) is taken once after the last of them."""


class Processor:
    def __init__(
        self,
        workspace: Workspace,
        config: Config,
        ledger: Ledger,
        clock: Callable[[], float],
        log: Any,
        client_factory: ClientFactory = default_client_factory,
        environ: dict[str, str] | None = None,
    ) -> None:
        self.workspace, self.config, self.ledger, self.clock = workspace, config, ledger, clock
        self.history: list[ItemResult] = []
        self.recovery_due = False
        """Set by the service: finish what a crash left claimed on the first step, after READY=1
        (a recovered run may take minutes; systemd's start timeout must not)."""
        self.in_hand = False
        """Set by the service when the item in hand was still going at its stop: the processor
        and its connections are then left to it until the process ends."""
        self.client_factory, self.environ, self.log = client_factory, environ, log
        self.reasoning_store = Store(workspace.state)
        """The process's one: the intake's verdicts and the jobs' runs record into it."""
        self._verdicts = threading.RLock()
        """Verdicts are taken in one at a time, whichever thread takes them: the processing
        thread at a step, or the loop's while a run is in hand (``observe``)."""
        self._verdict_at = float("-inf")
        """When the last verdict was taken in (the processor's clock)."""
        self._build(config, waiting={})

    def _build(self, config: Config, *, waiting: dict[str, str]) -> None:
        ws, ledger, clock, log = self.workspace, self.ledger, self.clock, self.log
        self.config = config
        store = self.reasoning_store
        self.portfolio = Portfolio.of(ws, config, ledger, log)
        # The refit and the look at the reruns stop at each project while a verdict is taken
        # in on the loop's thread: in one interpreter every blocking call of the verdict's
        # waits out the switch interval behind a busy thread, 100 ms a verdict at 1 000.
        self.portfolio.ingested.pause = functools.partial(_let_pass, self._verdicts)
        self.floor = Floor(ws, config, ledger, clock, log, waiting=waiting)
        self.intake = Intake(ws, config, ledger, clock, log, store, self.environ)
        # Claims are renames: the claim folder must sit on the inbox's file system.
        same = same_filesystem(ws.inbox_projects, ws.state)
        claimed_dir = ws.claimed if same else ws.root / "inbox" / ".claimed"
        claimed_dir.mkdir(parents=True, exist_ok=True)
        host = RunHost(
            ws,
            config,
            ledger.reopen(),
            clock,
            log,
            self.portfolio,
            store,
            self.client_factory,
            self.environ,
        )
        self.desk = JobDesk(
            self.floor, host, self.portfolio, stores_for(config, self.environ), claimed_dir
        )
        # Built at every start, as the current version where its set is as it was (a restart
        # reaches the same figures), else as the next; the pages too (nothing is written where
        # they hold the classes already, as at most starts).
        self.desk.rebuild_references(start=True)
        self.portfolio.fit.publish_pages()

    def reload(self, config: Config, *, verdicts_only: bool = False) -> None:
        """A new config (SIGHUP, or its file changed): what the processor still owes and knows
        carries over — a pending recovery, the history ``status.json`` shows, the bundles waiting
        for budget. ``verdicts_only``: while a run is in hand, only who may approve
        (``[verdicts]``) changes, for the very next verdict read; the rest waits for the run."""
        if verdicts_only:
            with self._verdicts:
                self.intake.adopt_verdict_policy(config)
            return
        old, intake = self.desk, self.intake
        with self._verdicts:
            self._build(config, waiting=self.waiting)
        self.scan()
        old.close()
        intake.close()

    @property
    def waiting(self) -> dict[str, str]:
        """Bundles left in the inbox for now, with the reason (shown by ``status``)."""
        return self.floor.waiting

    def close(self) -> None:
        """The class pages, if the classes moved since they were written; the engine, and the
        host's own connection to the ledger (the caller closes the one it passed in)."""
        if self.desk.portfolio.fit.pages_behind:
            self.desk.portfolio.fit.publish_pages()
        self.desk.close_engine()
        self.desk.close()
        self.intake.close()

    # -- hints and scans -------------------------------------------------------------------------

    def observe(self, entry: Path, *, moved_in: bool = False) -> None:
        """A hint. A verdict is taken in now, also from the loop's thread while a run is in
        hand: an expert's answer never waits behind a run (it reaches the ledger through the
        intake's own connection, and the page through its one writer)."""
        with self._verdicts:
            self._taken(self.intake.observe(entry, moved_in=moved_in))

    def scan(self) -> None:
        with self._verdicts:
            for result in self.intake.scan():
                self._taken(result)

    def settle_by_age(self) -> None:
        with self._verdicts:
            self.intake.settle_by_age()

    def _taken(self, result: ItemResult | None) -> None:
        if result is not None:
            self.history.append(self._verdict_done(result))

    def _verdict_done(self, result: ItemResult) -> ItemResult:
        """What an ingested verdict changes beyond the wiki: the page, and the reruns due."""
        if result.state == VerdictState.INGESTED.value:
            self._verdict_at = self.clock()
            self.desk.reruns_due = True  # what experts taught may add a candidate somewhere
            self.desk.publish_portfolio(self.intake.ledger, verdict=result.candidate_id)
        return result

    # -- a step ----------------------------------------------------------------------------------

    def step(
        self,
        *,
        stop: Callable[[], bool] = lambda: False,
        quiet_s: float = RERUNS_QUIET_S,
        refit_now: bool = False,
    ) -> list[ItemResult]:
        """Process everything that is ready now, one item at a time; the next version of the
        reference fit once arrivals call for it (``refit_now``: ``once`` waits for none); the
        reruns once the verdicts have been quiet for ``quiet_s`` (``once``: 0)."""
        desk, results = self.desk, []
        desk.stopping = stop
        if self.recovery_due:
            results.extend(self.recover())
        with self._verdicts:
            ready_verdicts = self.intake.ready_verdicts()
        for verdict in ready_verdicts:
            if stop():
                return results
            with self._verdicts:
                results.append(self._verdict_done(self.intake.verdict(verdict, quiet=True)))
        ready = self.intake.ready_bundles()
        for claimed in due_retries(self.floor, self.clock()):
            if stop():
                return results
            results.append(desk.retry(claimed))
        results.extend(self._waves(ready, stop))
        pending = self.intake.bundles.pending_count
        refit = self.portfolio.fit.refit_in(self.clock(), pending, at_once=refit_now)
        if refit == 0.0 and not stop():
            desk.rebuild_references()
        if self._reruns_in(quiet_s) == 0.0 and not stop():
            results.extend(desk.reruns(stop))
        if any(r.kind in ("bundle", "rerun") and r.state == "done" for r in results):
            with self._verdicts:  # a verdict faster than the run's settling is taken in now
                results.extend(self._verdict_done(r) for r in self.intake.look_at_verdicts_again())
        if _pages_due(self) and not stop():
            desk.portfolio.fit.publish_pages()
        self.history.extend(results)
        return results

    def _waves(self, ready: list[Path], stop: Callable[[], bool]) -> list[ItemResult]:
        """The ready bundles the portfolio can fund start, then the next wave is admitted against
        what the last one really spent; what no wave can fund waits unclaimed."""
        results: list[ItemResult] = []
        while ready and not stop():
            admitted, deferred = self.desk.funding.admit(ready)
            if not admitted:
                results.extend(self._wait_for_budget(entry, why) for entry, why in deferred)
                break
            started = []
            for entry in admitted:
                if stop():
                    break
                if entry.exists():
                    outcome = self.desk.take(entry)
                    if isinstance(outcome, Started):
                        started.append(outcome)  # under way on whichever worker is free
                    else:
                        results.append(outcome)
            results.extend(self.desk.finish(job) for job in started)
            ready = [entry for entry, _why in deferred if entry.exists()]
        return results

    def _wait_for_budget(self, entry: Path, refusal: str) -> ItemResult:
        """The bundle stays in the inbox, unclaimed and not failed, until the budget funds it."""
        if self.waiting.get(entry.name) != refusal:  # said once, not at every look
            self.floor.log.info("bundle waits", bundle=entry.name, reason=refusal)
        self.waiting[entry.name] = refusal
        return ItemResult(entry.name, "bundle", "waiting", refusal)

    def recover(self) -> list[ItemResult]:
        self.recovery_due = False
        return self.desk.recover()

    def has_work(self) -> bool:
        """Whether ``step`` would find something to do now."""
        now = self.clock()
        if self.recovery_due or self.intake.due():
            return True
        if self._reruns_in() == 0.0 or _pages_due(self):
            return True
        if self.portfolio.fit.refit_in(now, self.intake.bundles.pending_count) == 0.0:
            return True
        return next_retry(self.floor, now) <= now

    def _reruns_in(self, quiet_s: float = RERUNS_QUIET_S) -> float | None:
        """Seconds until the reruns due may be decided (0.0: now), None while none are due or a
        bundle is pending (a portfolio still filling up would make each rerun stale at once).
        They wait until no verdict has come in for ``quiet_s``."""
        if not self.desk.reruns_due or self.intake.bundles.pending_count:
            return None
        return max(0.0, quiet_s - (self.clock() - self._verdict_at))

    def seconds_until_next(self) -> float | None:
        """How long until ``step`` may find something due (a settling entry, a retry); None if
        nothing is waiting for time."""
        if self.has_work():
            return 0.0
        waits = [
            self.intake.seconds_until_next(),
            next_retry(self.floor, self.clock()) - self.clock(),
            self._reruns_in(),
            self.portfolio.fit.refit_in(self.clock(), self.intake.bundles.pending_count),
        ]
        known = [w for w in waits if w is not None and w != float("inf")]
        return max(0.0, min(known)) if known else None

    def pending(self) -> int:
        return self.intake.pending()

    def in_job(self) -> bool:
        """Whether a job's run is under way in this process (perhaps on the engine's thread)."""
        return self.desk.host.running_digest is not None

    def abandon_run(self) -> None:
        self.desk.host.abandon_run()


def _let_pass(lock: threading.RLock) -> None:
    """Waits while another thread holds ``lock``."""
    with lock:
        pass


def _pages_due(processor: Processor) -> bool:
    """Whether the class pages are to be written now: the classes moved, and no rerun is due
    (a settled project makes them due, and they wait for the inbox to be empty: each bundle
    still to come would move the classes again)."""
    return processor.desk.portfolio.fit.pages_due and not processor.desk.reruns_due
