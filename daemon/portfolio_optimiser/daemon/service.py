"""The service loop: ``run`` (the daemon) and ``once`` (everything ready now, then exit).

Decides: when to look and when to stop. Start: lock the workspace (one daemon per workspace),
open the ledger, finish what a crash left claimed, start the watcher, scan, ``READY=1``. Loop:
drain hints, rescan every ``rescan_seconds`` (events get lost), process what is ready one item at
a time, restart a dead observer, and ping the systemd watchdog only while healthy. SIGTERM stops
taking work; the item in hand finishes (its run is bounded by ``run_timeout_seconds``) or, if
systemd's stop timeout ends the process first, stays claimed and is finished at the next start.
SIGHUP reloads the configuration; a bad new config is logged and the old one kept.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from portfolio_optimiser._atomic import publish_text
from portfolio_optimiser.config import Config, ConfigError, load_config
from portfolio_optimiser.pipeline.run import ClientFactory, default_client_factory

from .ledger import Ledger
from .lock import WorkspaceLock
from .notify import Notifier
from .processor import ItemResult, Processor
from .watcher import NETWORK_FILESYSTEMS, Hint, InboxWatcher, filesystem_type
from .workspace import Workspace

__all__ = ["OnceReport", "Service", "run_once"]


@dataclass
class OnceReport:
    results: list[ItemResult] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)

    @property
    def all_defined(self) -> bool:
        return not self.pending


def run_once(
    workspace: Workspace,
    config: Config,
    *,
    log: Any,
    clock: Callable[[], float] = time.time,
    client_factory: ClientFactory = default_client_factory,
    environ: dict[str, str] | None = None,
) -> OnceReport:
    """Process everything in the inbox that is ready now; report what is still settling."""
    workspace.ensure()
    with WorkspaceLock(workspace.state):
        ledger = Ledger.open(workspace.ledger_file)
        try:
            processor = Processor(workspace, config, ledger, clock, log, client_factory, environ)
            report = OnceReport(results=processor.recover())
            processor.scan()
            report.results += processor.step()
            report.pending = sorted(
                [
                    *(e.name for e in processor.bundles.tracking()),
                    *(v.name for v in processor.verdict_quiet.tracking()),
                ]
            )
            _write_status(workspace, processor, pid_state="once")
            return report
        finally:
            ledger.close()


def _write_status(
    workspace: Workspace, processor: Processor, *, pid_state: str, method: str = ""
) -> None:
    import json
    import os

    counts = processor.ledger.counts()
    publish_text(
        workspace.status_file,
        json.dumps(
            {
                "state": pid_state,
                "pid": os.getpid(),
                "watch": method,
                "pending": processor.pending(),
                "waiting": processor.waiting,
                "ledger": counts,
                "last": [
                    vars(r) | {"output": str(r.output) if r.output else None}
                    for r in processor.history[-10:]
                ],
            },
            indent=2,
            sort_keys=True,
        )
        + "\n",
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
        self.hints: queue.SimpleQueue[Hint] = queue.SimpleQueue()

    def install_signal_handlers(self) -> None:
        def on_stop(signum: int, _frame: FrameType | None) -> None:
            self.stop.set()

        def on_reload(signum: int, _frame: FrameType | None) -> None:
            self.reload.set()

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
        ws.ensure()
        ws.remember_state()
        with WorkspaceLock(ws.state):
            ledger = Ledger.open(ws.ledger_file)
            try:
                return self._serve(ledger)
            finally:
                ledger.close()

    def _serve(self, ledger: Ledger) -> int:
        ws = self.workspace
        processor = Processor(ws, self.config, ledger, self.clock, self.log, self.client_factory)
        processor.recover()
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
        processor.scan()
        last_rescan = time.monotonic()
        interval = self.notifier.watchdog_interval_s()
        last_ping = 0.0
        self.notifier.ready(self._status(processor, watcher))
        try:
            while not self.stop.is_set():
                if self.reload.is_set():
                    self.reload.clear()
                    processor = self._reload(processor, ledger)
                self._drain(processor)
                if time.monotonic() - last_rescan >= self.config.daemon.rescan_seconds:
                    processor.scan()
                    last_rescan = time.monotonic()
                processor.step(stop=self.stop.is_set)
                healthy = watcher.alive()
                if not healthy:
                    self.log.warning("watcher died; restarting it and rescanning")
                    watcher.restart()
                    processor.scan()
                    healthy = watcher.alive()
                if healthy and interval and time.monotonic() - last_ping >= interval:
                    self.notifier.watchdog()
                    last_ping = time.monotonic()
                self.notifier.status(self._status(processor, watcher))
                _write_status(ws, processor, pid_state="running", method=watcher.method)
                self.stop.wait(self.tick_s)
        finally:
            self.notifier.stopping()
            watcher.stop()
            _write_status(ws, processor, pid_state="stopped", method=watcher.method)
            self.log.info("daemon stopped")
        return 0

    def _drain(self, processor: Processor) -> None:
        while True:
            try:
                hint = self.hints.get_nowait()
            except queue.Empty:
                return
            processor.observe(hint.entry, moved_in=hint.moved_in)

    def _reload(self, processor: Processor, ledger: Ledger) -> Processor:
        self.notifier.reloading()
        try:
            config = load_config(self.config_path)
        except ConfigError as exc:
            self.log.error("config reload refused; keeping the running config", problem=str(exc))
            return processor
        self.config = config
        self.log.info("config reloaded", config=config.source)
        fresh = Processor(self.workspace, config, ledger, self.clock, self.log, self.client_factory)
        fresh.scan()
        return fresh

    def _status(self, processor: Processor, watcher: InboxWatcher) -> str:
        counts = processor.ledger.counts()
        waiting = f" waiting={len(processor.waiting)}" if processor.waiting else ""
        return (
            f"watching ({watcher.method}); pending={processor.pending()}{waiting} "
            f"done={counts.get('done', 0)} failed={counts.get('failed', 0)}"
        )
