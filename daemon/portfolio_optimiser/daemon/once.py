"""``once``: everything ready in the inbox now (waiting for what is still settling), then exit."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from portfolio_optimiser.config import Config
from portfolio_optimiser.pipeline.run import ClientFactory, default_client_factory
from portfolio_optimiser.reasoning.environment import admission_for

from .host import iso
from .processor import ItemResult, Processor
from .service import _stop_engine, _workspace_lock, _write_status
from .stores import hold_as, open_ledger, stores_for
from .workspace import Workspace

__all__ = ["OnceReport", "run_once"]


@dataclass
class OnceReport:
    results: list[ItemResult] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)

    @property
    def all_defined(self) -> bool:
        return not self.pending


ONCE_POLL_S: Final = 0.2
ONCE_MARGIN_S: Final = 2.0
"""Beyond the quiet period: a copy that pauses a moment is still waited for, one that goes on
and on is not (``once`` then exits 75 and says what is still changing)."""


def run_once(
    workspace: Workspace,
    config: Config,
    *,
    log: Any,
    clock: Callable[[], float] = time.time,
    client_factory: ClientFactory = default_client_factory,
    environ: dict[str, str] | None = None,
    wait: bool = True,
    sleep: Callable[[float], None] = time.sleep,
) -> OnceReport:
    """Process everything in the inbox, waiting for what is still settling; report what still is.

    ``cp -r b inbox/projects/ && once`` processes ``b`` in that call: an input that is settling is
    watched (rescanned every ``ONCE_POLL_S``) until it has been quiet for its quiet period, bounded
    by the longest quiet period plus ``ONCE_MARGIN_S``. What is still changing then is reported
    (exit 75). ``wait=False`` (``once --no-wait``) reports it at once, for cron.
    """
    admission_for(config, now=datetime.now(UTC), environ=environ)  # a bad mode word: exit 78 first
    workspace.ensure()
    stores = stores_for(config, environ)
    with _workspace_lock(workspace, stores):
        ledger = open_ledger(workspace, config, environ)
        processor: Processor | None = None
        try:
            hold_as(ledger, stores, role="daemon", now=iso(clock()))
            processor = Processor(workspace, config, ledger, clock, log, client_factory, environ)
            processor.history.extend(processor.recover())
            processor.scan()
            processor.settle_by_age()
            processor.step()
            quiet_s = max(config.daemon.stability_seconds, config.daemon.verdict_quiet_seconds)
            deadline = time.monotonic() + quiet_s + ONCE_MARGIN_S
            while wait and processor.pending() and time.monotonic() < deadline:
                sleep(ONCE_POLL_S)
                processor.scan()
                processor.step()
            report = OnceReport(results=list(processor.history))
            report.pending = sorted(
                [
                    *(e.name for e in processor.bundles.tracking()),
                    *(v.name for v in processor.verdict_quiet.tracking()),
                ]
            )
            _write_status(workspace, processor, pid_state="once")
            return report
        finally:
            _stop_engine()
            if processor is not None:
                processor.close()
            ledger.close()
