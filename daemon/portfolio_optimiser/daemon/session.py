"""What ``run`` and ``once`` share: one open, lock, hold and close around a processor, and the
``status.json`` both publish.

Decides the order of a start: a bad mode word in the environment is a configuration error said
first (exit 78, before any bundle is claimed); then the workspace lock (one daemon per workspace
on one machine; on a shared database the ledger holds one intake and one process per executor),
the ledger, this process's hold as the daemon, and the processor. At the end the processor and
its engine close, unless the item in hand is still going (a job on the engine's thread needs its
connections until the process ends).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from portfolio_optimiser._atomic import publish_text
from portfolio_optimiser.config import Config
from portfolio_optimiser.pipeline.run import ClientFactory
from portfolio_optimiser.reasoning.environment import admission_for

from .lock import WorkspaceLock
from .processor import Processor
from .stamps import iso
from .stores import hold_as, open_ledger, stores_for
from .workspace import Workspace

__all__ = ["opened", "status_text", "write_status"]


@contextlib.contextmanager
def opened(
    workspace: Workspace,
    config: Config,
    *,
    log: Any,
    clock: Callable[[], float],
    client_factory: ClientFactory,
    environ: dict[str, str] | None = None,
    service: bool = False,
) -> Iterator[Processor]:
    """The workspace opened for this process as its daemon: a processor with what a crash left
    to recover (``recovery_due``). Closed at the end unless ``processor.in_hand`` says the item
    in hand is still going. ``service``: the daemon under systemd, whose state may live outside
    the workspace (a pointer in the workspace says where)."""
    admission_for(config, now=datetime.now(UTC), environ=environ)
    workspace.ensure()
    if service:
        workspace.remember_state()
    stores = stores_for(config, environ)
    lock = contextlib.nullcontext() if stores.shared else WorkspaceLock(workspace.state)
    with lock:
        ledger = open_ledger(workspace, config, environ)
        processor: Processor | None = None
        try:
            hold_as(ledger, stores, workspace, role="daemon", now=iso(clock()))
            processor = Processor(workspace, config, ledger, clock, log, client_factory, environ)
            processor.recovery_due = True
            yield processor
        finally:
            in_hand = processor is not None and processor.in_hand
            if processor is not None and not in_hand:
                processor.close()
            if not in_hand:  # a job still writing keeps its connection to the end
                ledger.close()


def status_text(
    processor: Processor, *, pid_state: str, method: str = "", config_problem: str | None = None
) -> str:
    return (
        json.dumps(
            {
                "state": pid_state,
                "config": {"source": processor.config.source, "refused": config_problem},
                "pid": os.getpid(),
                "watch": method,
                "pending": processor.pending(),
                "waiting": processor.waiting,
                "ledger": processor.ledger.counts(),
                "reference": reference_status(processor),
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


def reference_status(processor: Processor) -> dict[str, Any]:
    """The reference fit's current version for ``status``: its id, how many projects it was
    fitted from and when, the projects scored against it since, and when the next is due."""
    portfolio = processor.portfolio
    version, due = portfolio.fit.version, portfolio.fit.refit_due_at(processor.clock())
    return {
        "version": version.id if version else None,
        "projects": version.projects if version else 0,
        "fitted_at": version.fitted_at if version else None,
        "arrivals_since": portfolio.fit.arrivals,
        "refit_due_at": None if due is None else iso(due),
    }


def write_status(workspace: Workspace, processor: Processor, *, pid_state: str) -> None:
    publish_text(workspace.status_file, status_text(processor, pid_state=pid_state))
