"""Where the daemon's databases live: SQLite files in the state directory on one machine, or the
PostgreSQL named by ``[scale] database_url`` (``PORTFOLIO_OPTIMISER_DATABASE_URL`` wins, so a
password need not sit in a file). Both the ledger and the DBOS system database follow it."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from portfolio_optimiser.config import Config

from .ledger import Ledger
from .workspace import Workspace

__all__ = [
    "DATABASE_URL_ENV",
    "EXECUTOR_ENV",
    "Stores",
    "existing_ledger",
    "hold_as",
    "open_ledger",
    "stores_for",
]

DATABASE_URL_ENV = "PORTFOLIO_OPTIMISER_DATABASE_URL"
EXECUTOR_ENV = "PORTFOLIO_OPTIMISER_EXECUTOR"


@dataclass(frozen=True)
class Stores:
    database_url: str
    """Empty on one machine: the ledger and DBOS keep SQLite files in the state directory."""
    executor_id: str

    @property
    def shared(self) -> bool:
        return bool(self.database_url)


def stores_for(config: Config, environ: Mapping[str, str] | None = None) -> Stores:
    environ = os.environ if environ is None else environ
    url = environ.get(DATABASE_URL_ENV, "").strip() or config.scale.database_url.strip()
    # One machine is one executor ("local"): its jobs are recovered whatever its name becomes.
    named = environ.get(EXECUTOR_ENV, "").strip() or config.scale.executor_id.strip()
    executor = named or (socket.gethostname() if url else "local")
    return Stores(url, executor)


def hold_as(ledger: Ledger, stores: Stores, *, role: str, now: str) -> None:
    """On a shared database: one daemon takes in the inbox, and each executor name is one
    process (``ledger_machines``); on one machine the workspace lock is all of it."""
    if role == "daemon":
        ledger.machines.hold_intake()
    ledger.machines.hold_executor(
        stores.executor_id, role=role, host=socket.gethostname(), pid=os.getpid(), now=now
    )


def open_ledger(
    workspace: Workspace, config: Config, environ: Mapping[str, str] | None = None
) -> Ledger:
    stores = stores_for(config, environ)
    return (
        Ledger.connect(stores.database_url) if stores.shared else Ledger.open(workspace.ledger_file)
    )


def existing_ledger(
    workspace: Workspace, config: Config, environ: Mapping[str, str] | None = None
) -> Ledger | None:
    """For commands that only read: the ledger if there is one (a workspace never run has none)."""
    if not stores_for(config, environ).shared and not workspace.ledger_file.is_file():
        return None
    return open_ledger(workspace, config, environ)
