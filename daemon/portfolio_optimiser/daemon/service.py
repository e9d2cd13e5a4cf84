"""The service loop: ``run``, the daemon (``once`` is its one-shot sibling, in ``once``).

Decides: when to look and when to stop. Start: lock the workspace (one daemon per workspace),
open the ledger, start the watcher, ``READY=1``; the first step then finishes what a crash left
claimed and scans. Loop: drain hints, rescan every ``rescan_seconds`` (events get lost), process
what is ready one item at a time on the processing thread (a verdict hinted at while a run is in
hand is taken in at once, on the loop's thread), restart a dead observer, and ping the systemd
watchdog only while healthy; the loop sleeps until a hint, the processing thread's end, a stop
or the next thing due. SIGTERM stops taking work; the item in hand finishes (its run is bounded
by ``run_timeout_seconds``) or, if systemd's stop timeout ends the process first, stays claimed
and is finished at the next start. SIGHUP reloads the configuration; a bad new config is logged
and the old one kept.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from portfolio_optimiser._atomic import publish_text
from portfolio_optimiser.config import Config
from portfolio_optimiser.pipeline.run import ClientFactory, default_client_factory

from .config_watch import ConfigWatch, changes
from .db import database_unavailable
from .ledger import Ledger
from .memory import THOROUGH_EVERY_S, give_back_memory, keep_freed_memory
from .notify import Notifier
from .processor import Processor
from .session import opened, status_text
from .stamps import iso
from .stores import stores_for
from .watcher import NETWORK_FILESYSTEMS, Hint, InboxWatcher, filesystem_type
from .workspace import Workspace

__all__ = ["Service"]


IDLE_WAIT_CAP_S: Final = 10.0
"""The longest an idle loop sleeps when nothing is due sooner (a hint or a signal wakes it)."""
IDLE_WAIT_FLOOR_S: Final = 0.01
"""The shortest: what is due is handled when it is due (an entry's quiet period ends, a retry's
back-off runs out), not a tick later; the floor only keeps a deadline just passed from spinning."""
SWITCH_INTERVAL_S: Final = 0.0005
"""How often the interpreter hands the GIL between threads (its default is 5 ms)."""
IDLE_CHORES_AFTER_S: Final = 1.0
"""How long the loop has had nothing to do before it closes the idle engine and gives back the
memory the work freed: those take tens of milliseconds, and done at the first idle turn they held
up the next verdict of an expert saving one after another."""
STATUS_REFRESH_S: Final = 30.0
"""status.json and systemd's STATUS= are recomputed at least this often while nothing happens."""
STATUS_HELD_AT_MOST_S: Final = 1.0
"""How long a changed status waits while hints are queued: written between two verdicts of a
burst, it held up the next one by its two flushes (about a millisecond)."""


@dataclass
class _Loop:
    """What the loop keeps between two turns."""

    watcher: InboxWatcher
    heartbeat: str | None
    """This machine's executor on a shared database (``status`` shows when it was last seen)."""
    interval: float | None
    """systemd's watchdog interval, if it watches."""
    worker: threading.Thread | None = None
    """The processing thread: a run can take minutes, and the loop keeps pinging meanwhile."""
    worked: threading.Event = field(default_factory=threading.Event)
    """Set as the processing thread's last act, when the thread may not have ended yet."""
    started: float = 0.0
    failure: list[BaseException] = field(default_factory=list)
    last_rescan: float = -float("inf")
    last_ping: float = 0.0
    last_seen: tuple[Any, ...] = ()
    said_at: float = -float("inf")
    """When the status was last said (``last_seen``)."""
    trimmed: bool = False
    """The memory the last work freed was given back (once idle for ``IDLE_CHORES_AFTER_S``)."""
    collected_at: float = -float("inf")
    """When an idle turn last collected everything, what was set aside too."""
    active_at: float = -float("inf")
    """When the loop last had something to do: a hint, or the processing thread's start or end."""

    @property
    def idle(self) -> bool:
        return self.worker is None


class Service:
    """The daemon: ``Service(...).run()`` returns the exit code."""

    def __init__(
        self,
        workspace: Workspace,
        config_path: Path | None,
        config: Config,
        *,
        log: Any,
        notifier: Notifier | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        client_factory: ClientFactory = default_client_factory,
        tick_s: float = 0.5,
    ) -> None:
        self.workspace = workspace
        self.config = config
        self.config_watch = ConfigWatch(config_path, log=log, clock=clock)
        folder = config_path.parent if config_path else workspace.root / "config"
        self._config_dir = folder.absolute()
        """The file laid over the packaged default (it may not exist yet): read again when it
        changes, as on SIGHUP."""
        self.log = log
        self.notifier = notifier or Notifier()
        self.clock = clock
        self.monotonic = monotonic
        """For the loop's intervals (a rescan, a watchdog ping): never set back by a clock change."""
        self.client_factory = client_factory
        self.tick_s = tick_s
        self.stop = threading.Event()
        self.reload = threading.Event()
        self.stop_grace_s = 25.0  # under systemd's TimeoutStopSec=30s
        self._last_status = ""
        self._early: dict[Path, bool] = {}
        """Entries hinted at while the processor was busy, each once (moved in or not)."""
        self.hints: queue.SimpleQueue[Hint | None] = queue.SimpleQueue()
        """The watcher's hints; ``None`` only wakes the loop (a stop or a reload was asked for,
        or the processing thread ended)."""

    def request_stop(self) -> None:
        """What SIGTERM does: the loop wakes now, not at its next deadline."""
        self.stop.set()
        self.hints.put(None)

    def request_reload(self) -> None:
        self.reload.set()
        self.hints.put(None)

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, lambda _signum, _frame: self.request_stop())
        signal.signal(signal.SIGINT, lambda _signum, _frame: self.request_stop())
        signal.signal(signal.SIGHUP, lambda _signum, _frame: self.request_reload())

    def _polling(self) -> tuple[bool, str]:
        fstype = filesystem_type(self.workspace.inbox_projects)
        if fstype in NETWORK_FILESYSTEMS:
            return True, f"{fstype} is a network file system, which inotify cannot see"
        return False, fstype

    def run(self) -> int:
        # A verdict is taken in on the loop's thread while the processing thread computes; each
        # of its file flushes lets go of the GIL, and getting it back waited out the other
        # thread's whole switch interval (5 ms) every time.
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        with opened(
            self.workspace,
            self.config,
            log=self.log,
            clock=self.clock,
            client_factory=self.client_factory,
            service=True,
        ) as processor:
            return self._serve(processor)

    def _serve(self, processor: Processor) -> int:
        loop = self._start(processor)
        try:
            while not self.stop.is_set() and not loop.failure:
                if loop.worker is not None and (loop.worked.is_set() or not loop.worker.is_alive()):
                    # The thread's last act wakes this loop, and it may still be alive when the
                    # loop looks: taken for busy, the loop slept a whole tick before its next turn.
                    loop.worker.join()
                    loop.worker = None
                    loop.active_at = self.monotonic()
                if loop.idle:
                    self._take_work(processor, loop)
                self._keep_alive(processor, loop)
                self._wait(processor, loop)
        finally:
            self._stopped(processor, loop)
        return 1 if loop.failure else 0

    def _start(self, processor: Processor) -> _Loop:
        ws = self.workspace
        polling, why = self._polling()
        # The config folder's hints only wake the loop (``_keep`` drops them): an edit is seen now.
        watched = [ws.inbox_projects, ws.inbox_verdicts]
        watched += [self._config_dir] if self._config_dir.is_dir() else []
        watcher = InboxWatcher(watched, self.hints, polling=polling)
        watcher.start()
        self.log.info(
            "daemon started",
            workspace=str(ws.root),
            config=self.config.source,
            watch=watcher.method,
            why=why,
            state=str(ws.state),
            stability_s=self.config.daemon.stability_seconds,
        )
        stores = stores_for(self.config)
        heartbeat = stores.executor_id if stores.shared else None
        loop = _Loop(watcher, heartbeat, self.notifier.watchdog_interval_s())
        self.notifier.ready(self._status(processor, watcher))
        return loop  # the first scan is the loop's first piece of work, after READY=1

    def _take_work(self, processor: Processor, loop: _Loop) -> None:
        """Hints and a rescan now and then; what is ready goes to the processing thread (while
        it works, hints queue up and the processor is its)."""
        if self.config_watch.moved() or self.reload.is_set():
            self.reload.clear()
            self._reload(processor)
        self._drain(processor)
        if self.monotonic() - loop.last_rescan >= self.config.daemon.rescan_seconds:
            processor.scan()
            loop.last_rescan = self.monotonic()
        if processor.has_work():
            loop.worker = threading.Thread(
                target=self._work, args=(processor, loop), name="processor", daemon=True
            )
            loop.started, loop.trimmed, loop.worked = self.monotonic(), False, threading.Event()
            loop.active_at = loop.started
            loop.worker.start()

    def _work(self, processor: Processor, loop: _Loop) -> None:
        try:
            processor.step(stop=self.stop.is_set)
        except Exception as exc:  # a defect: logged, and the daemon exits for systemd to restart
            self.log.exception("processing failed", error=f"{type(exc).__name__}: {exc}")
            loop.failure.append(exc)
        finally:
            loop.worked.set()
            self.hints.put(None)  # the loop takes what arrived meanwhile now, not a tick later

    def _keep_alive(self, processor: Processor, loop: _Loop) -> None:
        """A dead observer restarted; the watchdog pinged only while healthy; the status said
        when what it says changed (an idle turn asks nothing of the ledger)."""
        healthy = loop.watcher.alive()
        if not healthy:
            self.log.warning("watcher died; restarting it and rescanning")
            loop.watcher.restart()
            if loop.idle:
                processor.scan()
            healthy = loop.watcher.alive()
        now = self.monotonic()
        stuck = not loop.idle and now - loop.started > self.config.stop.run_timeout_seconds + 120
        if healthy and not stuck and loop.interval and now - loop.last_ping >= loop.interval:
            self.notifier.watchdog()
            loop.last_ping = now
        seen = (
            id(processor.desk),
            len(processor.history),
            processor.pending(),
            tuple(processor.waiting.items()),
            loop.idle,
            self.config_watch.problem,
            int(now // STATUS_REFRESH_S),  # refreshed now and then for `retry` from a shell
        )
        held = not self.hints.empty() and now - loop.said_at < STATUS_HELD_AT_MOST_S
        if seen != loop.last_seen and not held:
            loop.last_seen, loop.said_at = seen, now
            self.notifier.status(self._status(processor, loop.watcher, busy=not loop.idle))
            if loop.idle:
                self._publish_status(processor, "running", loop.watcher.method)
                if loop.heartbeat is not None:  # when `status` last heard of this machine
                    self._heartbeat(processor.ledger, loop.heartbeat)

    def _wait(self, processor: Processor, loop: _Loop) -> None:
        """Until something happens: a hint, the processing thread's end, a stop or a reload —
        or, at the latest, the next thing due."""
        if loop.idle:
            chores_at = loop.active_at + IDLE_CHORES_AFTER_S
            if self.monotonic() >= chores_at:
                processor.desk.close_engine(idle_only=True)  # ``durable``
                if not loop.trimmed:
                    now = self.monotonic()
                    thorough = now - loop.collected_at >= THOROUGH_EVERY_S
                    give_back_memory(thorough=thorough)
                    if thorough:
                        loop.collected_at = now
                    # A large portfolio's events keep what they free for the next one, till here.
                    keep_freed_memory(len(processor.portfolio.fit.project_ids()))
                    loop.trimmed = True
            # Idle: woken by the first hint, so a verdict or a folder moved in is handled in
            # milliseconds; else at the next thing due (a settling entry, a retry, a watchdog
            # ping, a rescan), and at least every IDLE_WAIT_CAP_S: each wake-up costs CPU, and an
            # idle daemon should cost next to none.
            timeout = self._idle_wait(processor, loop)
            if not loop.trimmed:
                timeout = max(IDLE_WAIT_FLOOR_S, min(timeout, chores_at - self.monotonic()))
        else:
            # Busy: a verdict is taken in at once, here (an expert's answer never waits behind a
            # run); a bundle's hint is kept for when the processor is free again, and the
            # thread's end wakes the loop. The tick only paces the watchdog's pings meanwhile.
            timeout = self.tick_s
        with contextlib.suppress(queue.Empty):
            hint = self.hints.get(timeout=timeout)
            loop.active_at = self.monotonic()
            self._keep(hint)
        if not loop.idle:
            if self.config_watch.moved():  # who may approve applies to the next verdict read
                self.reload.set()  # the rest once the run in hand has ended
                self._reload(processor, verdicts_only=True)
            verdicts = self.workspace.inbox_verdicts
            for entry in [e for e in self._early if e.parent == verdicts]:
                processor.observe(entry, moved_in=self._early.pop(entry))

    def _stopped(self, processor: Processor, loop: _Loop) -> None:
        self.notifier.stopping()
        if loop.worker is not None:
            # The item in hand may finish within the stop bound; if not, it stays claimed and the
            # next start finishes it.
            loop.worker.join(timeout=max(1.0, self.stop_grace_s))
        # A job under way on the engine's thread (a shared queue's) is cut off as the item in hand.
        worker_alive = loop.worker is not None and loop.worker.is_alive()
        processor.in_hand = processor.in_job() or worker_alive
        if processor.in_hand:
            processor.abandon_run()
        loop.watcher.stop()
        if not worker_alive:
            self._publish_status(processor, "stopped", loop.watcher.method)
        self.log.info("daemon stopped")

    def _heartbeat(self, ledger: Ledger, executor: str) -> None:
        try:
            ledger.machines.seen(executor, now=iso(self.clock()))
        except Exception as exc:  # the database away for now: the next refresh says it again
            if not database_unavailable(exc):
                raise
            self.log.warning("heartbeat not recorded", problem=str(exc))

    def _publish_status(self, processor: Processor, state: str, method: str) -> None:
        """status.json, rewritten only when what it says has changed."""
        text = status_text(
            processor, pid_state=state, method=method, config_problem=self.config_watch.problem
        )
        if text != self._last_status:
            publish_text(self.workspace.status_file, text)
            self._last_status = text

    def _idle_wait(self, processor: Processor, loop: _Loop) -> float:
        now = self.monotonic()
        waits = [IDLE_WAIT_CAP_S, loop.last_rescan + self.config.daemon.rescan_seconds - now]
        if loop.interval:
            waits.append(loop.last_ping + loop.interval - now)
        due = processor.seconds_until_next()
        if due is not None:
            waits.append(due)
        return max(IDLE_WAIT_FLOOR_S, min(waits))

    def _drain(self, processor: Processor) -> None:
        """Apply the hints that arrived since the last look, each entry once."""
        self._keep()
        entries, self._early = self._early, {}
        for entry, moved_in in entries.items():
            processor.observe(entry, moved_in=moved_in)

    def _keep(self, hint: Hint | None = None, *, limit: int = 10_000) -> None:
        """``hint``, and the hints queued since, a bounded number: each entry kept once."""
        for _ in range(limit):
            if hint is not None and hint.entry.parent != self._config_dir:
                self._early[hint.entry] = self._early.get(hint.entry, False) or hint.moved_in
            try:
                hint = self.hints.get_nowait()
            except queue.Empty:
                break

    def _reload(self, processor: Processor, *, verdicts_only: bool = False) -> None:
        """The config read again; ``verdicts_only`` while a run is in hand: only who may
        approve is applied now, for the next verdict read (``Processor.reload``)."""
        if not verdicts_only:
            self.notifier.reloading()
        config = self.config_watch.load(self.config)
        if config is None or (verdicts_only and config.verdicts == self.config.verdicts):
            return
        changed = changes(self.config, config)
        if verdicts_only:
            processor.reload(config, verdicts_only=True)
            self.log.info("verdict policy applied", changed=changed)
            return
        self.config = config
        self.log.info("config reloaded", config=config.source, changed=changed or "nothing")
        processor.reload(config)

    def _status(self, processor: Processor, watcher: InboxWatcher, *, busy: bool = False) -> str:
        if busy:
            return f"watching ({watcher.method}); processing an item"
        counts = processor.ledger.counts()
        waiting = f" waiting={len(processor.waiting)}" if processor.waiting else ""
        return (
            f"watching ({watcher.method}); pending={processor.pending()}{waiting} "
            f"done={counts.get('done', 0)} failed={counts.get('failed', 0)}"
        )
