"""``once``: everything ready in the inbox now (waiting for what is still settling), then exit."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from portfolio_optimiser.config import Config
from portfolio_optimiser.pipeline.run import ClientFactory, default_client_factory

from .outcomes import ItemResult
from .session import opened, write_status
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
    by the longest quiet period plus ``ONCE_MARGIN_S`` of waiting (the time spent processing what
    was ready meanwhile does not count). What is still changing then is reported
    (exit 75). ``wait=False`` (``once --no-wait``) reports it at once, for cron.
    """
    with opened(
        workspace, config, log=log, clock=clock, client_factory=client_factory, environ=environ
    ) as processor:
        processor.history.extend(processor.recover())
        processor.scan()
        processor.settle_by_age()
        # Nothing more is coming: the reference fit's next version and the reruns are taken now.
        processor.step(quiet_s=0.0, refit_now=True)
        quiet_s = max(config.daemon.stability_seconds, config.daemon.verdict_quiet_seconds)
        deadline = time.monotonic() + quiet_s + ONCE_MARGIN_S
        while wait and processor.pending() and time.monotonic() < deadline:
            sleep(ONCE_POLL_S)
            processor.scan()
            began = time.monotonic()
            processor.step(quiet_s=0.0, refit_now=True)
            # The bound is on waiting: an input that settled while others ran is still taken.
            deadline += time.monotonic() - began
        write_status(workspace, processor, pid_state="once")
        return OnceReport(list(processor.history), processor.intake.settling())
