"""``portfolio-optimiser worker`` and ``recover --executor``: more machines on one portfolio.

Decides: what a worker is — a process that takes bundle jobs from the shared queue, one at a
time, and runs their stages (``durable``, ``host``) — and how a dead machine's jobs are handed to
the live ones. A worker claims nothing and writes none of the stores the daemon owns (the inbox,
verdicts, the wiki and its log, the portfolio report, the reference classes): it writes a job's
run folder, its ledger rows and its line in ``spend.json`` (under the ledger's lock). It holds
its executor name in the ledger for its whole life, so two processes never recover one name's
jobs twice; killed, it loses nothing, and restarted under the same name it finishes its own.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from portfolio_optimiser.config import Config
from portfolio_optimiser.errors import UserError
from portfolio_optimiser.pipeline.run import ClientFactory, default_client_factory
from portfolio_optimiser.reasoning.store import Store

from .db import database_unavailable
from .engine import EngineSettings, JobEngine, open_engine
from .host import RunHost
from .ledger import Ledger
from .portfolio import Portfolio
from .stamps import iso
from .stores import Stores, hold_as, stores_for
from .workspace import Workspace

__all__ = ["HEARTBEAT_S", "NotShared", "recover_executor", "serve_worker", "worker_stores"]

EX_TEMPFAIL: Final = 75
"""The shared database went away: systemd starts the worker again once it is back."""
HEARTBEAT_S: Final = 5.0
HEARTBEAT_ENV: Final = "PORTFOLIO_OPTIMISER_TEST_HEARTBEAT_S"
"""TEST-ONLY: the heartbeat's period, so that a test holds open the window a machine cut off
from the database has until its next heartbeat fails (the fencing tests). Unset in production."""
"""How often a worker says it works (``status`` shows when each was last seen)."""


class DatabaseLost(UserError):
    """The shared database went away while the worker started or worked."""

    exit_code = EX_TEMPFAIL

    def __init__(self, executor: str, exc: BaseException) -> None:
        super().__init__(
            f"the worker {executor!r} lost the shared database ({str(exc).splitlines()[0]}); "
            "check that PostgreSQL is running and reachable, then start it again"
        )


class NotShared(UserError):
    """Workers share a PostgreSQL; without one there is nothing to share."""

    def __init__(self, command: str) -> None:
        super().__init__(
            f"`{command}` needs the shared database: set [scale] database_url (or "
            "PORTFOLIO_OPTIMISER_DATABASE_URL) to the PostgreSQL the daemon uses; on one "
            "machine the daemon runs every job itself"
        )


def worker_stores(
    config: Config, environ: dict[str, str] | None, executor: str | None, command: str
) -> Stores:
    stores = stores_for(config, environ)
    if not stores.shared:
        raise NotShared(command)
    if executor:
        stores = dataclasses.replace(stores, executor_id=executor.strip())
    return stores


def serve_worker(
    workspace: Workspace,
    config: Config,
    *,
    log: Any,
    stop: threading.Event,
    executor: str | None = None,
    environ: dict[str, str] | None = None,
    client_factory: ClientFactory = default_client_factory,
    clock: Callable[[], float] = time.time,
) -> int:
    """Take jobs from the shared queue until ``stop`` is set."""
    stores = worker_stores(config, environ, executor, "worker")
    workspace.ensure()
    ledger = Ledger.connect(stores.database_url)
    try:
        return _serve(workspace, config, ledger, stores, log, stop, environ, client_factory, clock)
    except Exception as exc:
        if not database_unavailable(exc):
            raise
        log.error("worker lost the shared database", executor=stores.executor_id, problem=str(exc))
        raise DatabaseLost(stores.executor_id, exc) from None


def _serve(
    workspace: Workspace,
    config: Config,
    ledger: Ledger,
    stores: Stores,
    log: Any,
    stop: threading.Event,
    environ: dict[str, str] | None,
    client_factory: ClientFactory,
    clock: Callable[[], float],
) -> int:
    host: RunHost | None = None
    engine: JobEngine | None = None
    try:
        hold_as(ledger, stores, workspace, role="worker", now=iso(clock()))
        steps = ledger.reopen()
        # The process's one portfolio and reasoning store, for the jobs it runs.
        portfolio = Portfolio.of(workspace, config, steps, log)
        store = Store(workspace.state)
        host = RunHost(
            workspace, config, steps, clock, log, portfolio, store, client_factory, environ
        )
        settings = EngineSettings(
            stores.database_url,
            stores.executor_id,
            shared=True,
            jobs_at_once=config.scale.jobs_at_once,
            owns_queue=False,
        )
        engine = open_engine(settings, host=host, ledger=ledger, log=log)
        engine.serve()
        log.info(
            "worker started",
            executor=stores.executor_id,
            workspace=str(workspace.root),
            database=str(ledger.path),
        )
        every = (environ if environ is not None else os.environ).get(HEARTBEAT_ENV)
        while not stop.wait(float(every or HEARTBEAT_S)):
            try:
                ledger.machines.seen(stores.executor_id, now=iso(clock()))
            except Exception as exc:
                if not database_unavailable(exc):
                    raise
                # Its session, and with it the lock that says this machine works, is gone or
                # going: the daemon may hand its job to another. Stop it now, mid-job if need be
                # (the job is finished from its stage, once), never running beside that one.
                log.error(
                    "worker lost the shared database; stopping so that no job runs twice",
                    executor=stores.executor_id,
                    problem=str(exc),
                )
                os._exit(EX_TEMPFAIL)
        # A job in hand stays under way for this name: its next start finishes it. A stop is no
        # crash, so its start is not counted against the bundle.
        host.abandon_run()
        log.info("worker stopped", executor=stores.executor_id)
        return 0
    finally:
        if host is None or host.running_digest is None:
            if engine is not None:  # else the job's thread keeps it until the process ends
                engine.close()
            if host is not None:
                host.close()
        ledger.close()


def recover_executor(
    config: Config, executor: str, *, log: Any, environ: dict[str, str] | None = None
) -> int:
    """Hand the jobs a dead machine had under way back to the queue, for any live worker; how
    many. Refused while that executor is alive (its jobs are its own to finish)."""
    stores = worker_stores(config, environ, None, "recover")
    # An executor of its own that runs nothing: it only hands the jobs over.
    settings = EngineSettings(
        stores.database_url,
        f"recover@{socket.gethostname()}.{os.getpid()}",
        shared=True,
        owns_queue=False,
    )
    with Ledger.connect(stores.database_url) as ledger:
        engine = open_engine(settings, host=None, ledger=ledger, log=log)
        try:
            handed = engine.recover(executor)
            if handed is None:
                known = next((m for m in ledger.machines.all() if m.executor == executor), None)
                where = f" (a {known.role} on {known.host}, pid {known.pid})" if known else ""
                raise UserError(
                    f"the executor {executor!r} is still working{where}; it finishes its own "
                    "jobs — stop it first, or recover only a machine that is gone"
                )
        finally:
            engine.close()
    log.info("jobs handed over", executor=executor, jobs=handed)
    return handed
