"""The service loop: ``run``, the daemon (``once`` is its one-shot sibling, in ``once``).

Decides: when to look and when to stop. Start: lock the workspace (one daemon per workspace),
open the ledger, finish what a crash left claimed, start the watcher, scan, ``READY=1``. Loop:
drain hints, rescan every ``rescan_seconds`` (events get lost), process what is ready one item at
a time, restart a dead observer, and ping the systemd watchdog only while healthy. SIGTERM stops
taking work; the item in hand finishes (its run is bounded by ``run_timeout_seconds``) or, if
systemd's stop timeout ends the process first, stays claimed and is finished at the next start.
SIGHUP reloads the configuration; a bad new config is logged and the old one kept.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, Final

from portfolio_optimiser._atomic import publish_text
from portfolio_optimiser.config import Config, ConfigError, load_config
from portfolio_optimiser.pipeline.run import ClientFactory, default_client_factory
from portfolio_optimiser.reasoning.environment import admission_for

from .db import database_unavailable
from .host import iso
from .ledger import Ledger
from .lock import WorkspaceLock
from .notify import Notifier
from .processor import Processor
from .stores import Stores, hold_as, open_ledger, stores_for
from .watcher import NETWORK_FILESYSTEMS, Hint, InboxWatcher, filesystem_type
from .workspace import Workspace

__all__ = ["Service"]


IDLE_WAIT_CAP_S: Final = 10.0
"""The longest an idle loop sleeps when nothing is due sooner (a hint or a signal wakes it)."""
STATUS_REFRESH_S: Final = 30.0
"""status.json and systemd's STATUS= are recomputed at least this often while nothing happens."""


def _stop_engine(*, idle_only: bool = False) -> None:
    """DBOS's threads end with the command, or at the daemon's first idle tick (``idle_only``:
    unless a job taken from the shared queue is under way here); a process that ran no job
    never imported DBOS, and has nothing to stop."""
    durable = sys.modules.get("portfolio_optimiser.daemon.durable")
    if durable is not None:
        durable.stop_engine(idle_only=idle_only)


def _workspace_lock(workspace: Workspace, stores: Stores) -> contextlib.AbstractContextManager[Any]:
    """One daemon per workspace on one machine; on a shared database the workspace is on a
    shared drive, and the ledger holds one intake and one process per executor (``hold_as``)."""
    return contextlib.nullcontext() if stores.shared else WorkspaceLock(workspace.state)


def _status_text(
    workspace: Workspace, processor: Processor, *, pid_state: str, method: str = ""
) -> str:
    import json
    import os

    return (
        json.dumps(
            {
                "state": pid_state,
                "pid": os.getpid(),
                "watch": method,
                "pending": processor.pending(),
                "waiting": processor.waiting,
                "ledger": processor.ledger.counts(),
                "last": [
                    vars(r) | {"output": str(r.output) if r.output else None}
                    for r in processor.history[-10:]
                ],
            },
            indent=2,
            sort_keys=True,
        )
        + "\n"
    )


def _write_status(
    workspace: Workspace, processor: Processor, *, pid_state: str, method: str = ""
) -> None:
    publish_text(
        workspace.status_file,
        _status_text(workspace, processor, pid_state=pid_state, method=method),
    )


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
        client_factory: ClientFactory = default_client_factory,
        tick_s: float = 0.5,
    ) -> None:
        self.workspace = workspace
        self.config_path = config_path
        self.config = config
        self.log = log
        self.notifier = notifier or Notifier()
        self.clock = clock
        self.client_factory = client_factory
        self.tick_s = tick_s
        self.stop = threading.Event()
        self.reload = threading.Event()
        self.stop_grace_s = 25.0  # under systemd's TimeoutStopSec=30s
        self._last_status = ""
        self._early: list[Hint] = []
        self._unfinished = False
        self.hints: queue.SimpleQueue[Hint | None] = queue.SimpleQueue()
        """The watcher's hints; ``None`` only wakes the loop (a stop or a reload was asked for)."""

    def request_stop(self) -> None:
        """What SIGTERM does: the loop wakes now, not at its next deadline."""
        self.stop.set()
        self.hints.put(None)

    def request_reload(self) -> None:
        self.reload.set()
        self.hints.put(None)

    def install_signal_handlers(self) -> None:
        def on_stop(signum: int, _frame: FrameType | None) -> None:
            self.request_stop()

        def on_reload(signum: int, _frame: FrameType | None) -> None:
            self.request_reload()

        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGHUP, on_reload)

    def _polling(self) -> tuple[bool, str]:
        fstype = filesystem_type(self.workspace.inbox_projects)
        if fstype in NETWORK_FILESYSTEMS:
            return True, f"{fstype} is a network file system, which inotify cannot see"
        return False, fstype

    def run(self) -> int:
        ws = self.workspace
        # A wrong mode word or cooldown in the environment is a configuration error: say so now
        # (exit 78), not after the first bundle has been claimed.
        admission_for(self.config, now=datetime.now(UTC))
        ws.ensure()
        ws.remember_state()
        stores = stores_for(self.config)
        with _workspace_lock(ws, stores):
            ledger = open_ledger(ws, self.config)
            try:
                hold_as(ledger, stores, role="daemon", now=iso(self.clock()))
                return self._serve(ledger)
            finally:
                if not self._unfinished:  # a worker still writing keeps its connection to the end
                    ledger.close()

    def _serve(self, ledger: Ledger) -> int:
        ws = self.workspace
        processor = Processor(ws, self.config, ledger, self.clock, self.log, self.client_factory)
        processor.recovery_due = True
        stores = stores_for(self.config)
        heartbeat = stores.executor_id if stores.shared else None
        polling, why = self._polling()
        watcher = InboxWatcher([ws.inbox_projects, ws.inbox_verdicts], self.hints, polling=polling)
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
        last_rescan = 0.0  # the first scan is the loop's first piece of work, after READY=1
        interval = self.notifier.watchdog_interval_s()
        last_ping = 0.0
        # A run can take minutes (run_timeout_seconds); it goes to a worker thread so the loop keeps
        # pinging the watchdog meanwhile. While it works, hints queue up and the processor is its.
        worker: threading.Thread | None = None
        started = 0.0
        failure: list[BaseException] = []
        exit_code = 0
        last_seen: tuple[Any, ...] = ()

        def work(current: Processor) -> None:
            try:
                current.step(stop=self.stop.is_set)
            except (
                Exception
            ) as exc:  # a defect: logged, and the daemon exits for systemd to restart
                self.log.exception("processing failed", error=f"{type(exc).__name__}: {exc}")
                failure.append(exc)

        self.notifier.ready(self._status(processor, watcher))
        try:
            while not self.stop.is_set():
                if worker is not None and not worker.is_alive():
                    worker = None
                if failure:
                    exit_code = 1
                    break
                if worker is None:
                    if self.reload.is_set():
                        self.reload.clear()
                        processor = self._reload(processor, ledger)
                    self._drain(processor)
                    if time.monotonic() - last_rescan >= self.config.daemon.rescan_seconds:
                        processor.scan()
                        last_rescan = time.monotonic()
                    if processor.has_work():
                        worker = threading.Thread(
                            target=work, args=(processor,), name="processor", daemon=True
                        )
                        started = time.monotonic()
                        worker.start()
                healthy = watcher.alive()
                if not healthy:
                    self.log.warning("watcher died; restarting it and rescanning")
                    watcher.restart()
                    if worker is None:
                        processor.scan()
                    healthy = watcher.alive()
                stuck = (
                    worker is not None
                    and time.monotonic() - started > self.config.stop.run_timeout_seconds + 120
                )
                if healthy and not stuck and interval and time.monotonic() - last_ping >= interval:
                    self.notifier.watchdog()
                    last_ping = time.monotonic()
                # What status says changes only with what the processor did: an idle tick
                # asks nothing of the ledger (refreshed now and then for `retry` from a shell).
                seen = (
                    id(processor),
                    len(processor.history),
                    processor.pending(),
                    tuple(processor.waiting.items()),
                    worker is None,
                    int(time.monotonic() // STATUS_REFRESH_S),
                )
                if seen != last_seen:
                    last_seen = seen
                    self.notifier.status(self._status(processor, watcher, busy=worker is not None))
                    if worker is None:
                        self._publish_status(processor, "running", watcher.method)
                        if heartbeat is not None:  # when `status` last heard of this machine
                            self._heartbeat(ledger, heartbeat)
                if worker is None:
                    _stop_engine(
                        idle_only=True
                    )  # at the first idle tick (durable's docstring says why)
                    # Idle: wake for the first hint, so a verdict or a folder moved in is handled
                    # in milliseconds; else at the next thing due (a settling entry, a retry, a
                    # watchdog ping, a rescan), and at least every IDLE_WAIT_CAP_S: each wake-up
                    # costs CPU, and an idle daemon should cost next to none.
                    next_ping = last_ping + interval if interval else None
                    wait = self._idle_wait(processor, next_ping, last_rescan)
                    with contextlib.suppress(queue.Empty):
                        hint = self.hints.get(timeout=wait)
                        if hint is not None:
                            self._early.append(hint)
                else:
                    self.stop.wait(self.tick_s)
        finally:
            self.notifier.stopping()
            if worker is not None:
                # The item in hand may finish within the stop bound; if not, it stays claimed and the
                # next start finishes it.
                worker.join(timeout=max(1.0, self.stop_grace_s))
            # A job under way on DBOS's thread (a shared queue's) is cut off as the item in hand.
            in_job = processor.host.running_digest is not None
            self._unfinished = in_job or (worker is not None and worker.is_alive())
            if self._unfinished:
                processor.abandon_run()
            watcher.stop()
            if not self._unfinished:
                _stop_engine()  # a worker still in a job keeps it: the job's steps need it
                processor.close()
            if worker is None or not worker.is_alive():
                self._publish_status(processor, "stopped", watcher.method)
            self.log.info("daemon stopped")
        return exit_code

    def _heartbeat(self, ledger: Ledger, executor: str) -> None:
        try:
            ledger.seen(executor, now=iso(self.clock()))
        except Exception as exc:  # the database away for now: the next refresh says it again
            if not database_unavailable(exc):
                raise
            self.log.warning("heartbeat not recorded", problem=str(exc))

    def _publish_status(self, processor: Processor, state: str, method: str) -> None:
        """status.json, rewritten only when what it says has changed."""
        text = _status_text(self.workspace, processor, pid_state=state, method=method)
        if text != self._last_status:
            publish_text(self.workspace.status_file, text)
            self._last_status = text

    def _idle_wait(
        self, processor: Processor, next_ping: float | None, last_rescan: float
    ) -> float:
        now = time.monotonic()
        waits = [IDLE_WAIT_CAP_S, last_rescan + self.config.daemon.rescan_seconds - now]
        if next_ping is not None:
            waits.append(next_ping - now)
        due = processor.seconds_until_next()
        if due is not None:
            waits.append(due)
        return max(self.tick_s, min(waits))

    def _drain(self, processor: Processor, *, limit: int = 10_000) -> None:
        """Apply the hints that arrived since the last tick, each entry once, a bounded number."""
        entries: dict[Path, bool] = {}
        for hint in self._early:
            entries[hint.entry] = entries.get(hint.entry, False) or hint.moved_in
        self._early.clear()
        for _ in range(limit):
            try:
                queued = self.hints.get_nowait()
            except queue.Empty:
                break
            if queued is not None:
                entries[queued.entry] = entries.get(queued.entry, False) or queued.moved_in
        for entry, moved_in in entries.items():
            processor.observe(entry, moved_in=moved_in)

    def _reload(self, processor: Processor, ledger: Ledger) -> Processor:
        self.notifier.reloading()
        try:
            config = load_config(self.config_path)
            admission_for(config, now=datetime.now(UTC))
        except ConfigError as exc:
            self.log.error("config reload refused; keeping the running config", problem=str(exc))
            return processor
        if stores_for(config) != stores_for(self.config):
            # The ledger's connection and DBOS's database must move together: a restart does.
            self.log.error(
                "config reload refused; keeping the running config",
                problem="[scale] changed: restart the daemon to move its databases",
            )
            return processor
        self.config = config
        self.log.info("config reloaded", config=config.source)
        fresh = Processor(self.workspace, config, ledger, self.clock, self.log, self.client_factory)
        # What the old processor still owed and knew carries over: a pending recovery, the
        # history status.json shows, the bundles waiting for budget.
        fresh.recovery_due, fresh.history, fresh.waiting = (
            processor.recovery_due,
            processor.history,
            processor.waiting,
        )
        fresh.scan()
        processor.close()
        return fresh

    def _status(self, processor: Processor, watcher: InboxWatcher, *, busy: bool = False) -> str:
        if busy:
            return f"watching ({watcher.method}); processing an item"
        counts = processor.ledger.counts()
        waiting = f" waiting={len(processor.waiting)}" if processor.waiting else ""
        return (
            f"watching ({watcher.method}); pending={processor.pending()}{waiting} "
            f"done={counts.get('done', 0)} failed={counts.get('failed', 0)}"
        )
