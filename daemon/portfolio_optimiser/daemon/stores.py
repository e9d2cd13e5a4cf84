"""Where the daemon's databases live: SQLite files in the state directory on one machine, or the
PostgreSQL named by ``[scale] database_url`` (``PORTFOLIO_OPTIMISER_DATABASE_URL`` wins, so a
password need not sit in a file). Both the ledger and the DBOS system database follow it."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from portfolio_optimiser._atomic import publish_text
from portfolio_optimiser.config import Config, ConfigError

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

SHARED_MARK: Final = "shared-database.json"
"""In the state directory of a workspace whose ledger is a shared database: which one (without
its password). A command run there without the database setting would read an empty ledger
beside it and say "nothing"; it is refused instead, naming the database."""

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


def hold_as(ledger: Ledger, stores: Stores, workspace: Workspace, *, role: str, now: str) -> None:
    """On a shared database: one daemon takes in the inbox, and each executor name is one
    process (``ledger_machines``); on one machine the workspace lock is all of it. The
    workspace remembers which database holds its ledger (``SHARED_MARK``)."""
    if role == "daemon":
        ledger.machines.hold_intake(str(workspace.root), now=now)
    ledger.machines.hold_executor(
        stores.executor_id, role=role, host=socket.gethostname(), pid=os.getpid(), now=now
    )
    if stores.shared:
        mark = workspace.state / SHARED_MARK
        text = json.dumps({"database": ledger.where, "by": role, "at": now}) + "\n"
        recorded = _recorded(workspace)
        if recorded is None or recorded.get("database") != ledger.where:
            publish_text(mark, text)


def _recorded(workspace: Workspace) -> dict[str, str] | None:
    try:
        data = json.loads((workspace.state / SHARED_MARK).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _refuse_a_local_ledger(workspace: Workspace, stores: Stores) -> None:
    """A workspace whose ledger is a shared database, opened without the setting, would show a
    ledger that is not its own: refused, naming the database and the setting."""
    recorded = None if stores.shared else _recorded(workspace)
    if recorded is None:
        return
    raise ConfigError(
        f"{workspace.root} keeps its ledger in the shared database {recorded.get('database')} "
        f"(its {recorded.get('by', 'daemon')} said so at {recorded.get('at', '?')}), and this "
        f"command was given no database: set {DATABASE_URL_ENV} (with the password) or "
        "[scale] database_url in the workspace's config, as on the daemon's machine; if the "
        f"workspace no longer uses that database, delete {workspace.state / SHARED_MARK}"
    )


def open_ledger(
    workspace: Workspace, config: Config, environ: Mapping[str, str] | None = None
) -> Ledger:
    stores = stores_for(config, environ)
    _refuse_a_local_ledger(workspace, stores)
    return (
        Ledger.connect(stores.database_url) if stores.shared else Ledger.open(workspace.ledger_file)
    )


def existing_ledger(
    workspace: Workspace, config: Config, environ: Mapping[str, str] | None = None
) -> Ledger | None:
    """For commands that only read: the ledger if there is one (a workspace never run has none)."""
    _refuse_a_local_ledger(workspace, stores_for(config, environ))
    if not stores_for(config, environ).shared and not workspace.ledger_file.is_file():
        return None
    return open_ledger(workspace, config, environ)
