"""What ``status`` says of the daemon: what it last said (status.json), its ledger's counts,
the jobs in flight, who holds the workspace, and on a shared database every machine and the
queue (``scale_commands.shared_view``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from portfolio_optimiser.config import Config
from portfolio_optimiser.context.reference_version import ReferenceVersion
from portfolio_optimiser.daemon.workspace import Workspace

__all__ = ["daemon_view"]


def _running_holder(lock: Path) -> Any:
    """The lock's holder if a process holds it now (a killed holder's stale record is ignored)."""
    import fcntl
    import os

    from portfolio_optimiser.daemon.lock import read_holder

    if not lock.is_file():
        return None
    fd = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return read_holder(lock)
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _awaiting(ledger: Any) -> list[dict[str, Any]]:
    """Per project, the templates of its latest run whose candidate no expert has decided yet."""
    found = []
    for project, _run, folder in ledger.records.project_runs():
        templates = sorted(Path(folder, "verdicts").glob("*.json"))
        open_ids = [t.stem for t in templates if ledger.records.latest_verdict(t.stem) is None]
        if open_ids:
            found.append(
                {"project": project, "folder": str(Path(folder, "verdicts")), "ids": open_ids}
            )
    return found


def _failed(ws: Workspace) -> tuple[list[str], list[str]]:
    """What waits in outbox/failed/ for a fix and `retry`, by the name it was dropped under (the
    folder is the truth, not the ledger's history of every failure there ever was); and apart,
    what the inbox does not take (a PDF), which no retry can help."""
    from portfolio_optimiser.daemon.filters import InboxFilter

    folder = ws.failed
    if not folder.is_dir():
        return [], []
    names = sorted(
        p.name
        for p in folder.iterdir()
        if not p.name.endswith(".error.txt") and not p.name.startswith(".")
    )
    take = InboxFilter()
    aside = [n for n in names if take.not_taken(folder / n) is not None]
    return [n for n in names if n not in aside], aside


def daemon_view(workspace: Path, config: Config) -> dict[str, Any]:
    """What the daemon last said (status.json), its ledger's counts and who holds the lock."""
    from portfolio_optimiser.daemon.job import Job
    from portfolio_optimiser.daemon.stores import existing_ledger, stores_for

    from .scale_commands import shared_view

    ws = Workspace.at(workspace)
    last: dict[str, Any] = {}
    if ws.status_file.is_file():
        try:
            last = json.loads(ws.status_file.read_text("utf-8"))
        except ValueError:
            last = {}
    holder = _running_holder(ws.state / "daemon.lock")
    counts: dict[str, int] = {}
    in_flight: list[dict[str, str]] = []
    shared: dict[str, Any] | None = None
    held = 0
    version = None
    awaiting: list[dict[str, Any]] = []
    ledger = existing_ledger(ws, config)
    where = "SQLite in the state directory"
    if ledger is not None:
        with ledger:
            counts = ledger.counts()
            awaiting = _awaiting(ledger)
            held = ledger.budget.reserved_tokens()
            version = ledger.ingested.reference_version()
            for job in map(Job.from_json, ledger.jobs.all(unfinished=True)):
                item = ledger.get(job.identity)
                # One quarantined after its run waits in outbox/failed/ for `retry`, not in flight.
                if item is not None and item.state == "failed":
                    continue
                in_flight.append({"bundle": job.name, "stage": job.stage.value, "run": job.run_id})
            if stores_for(config).shared:
                where = f"PostgreSQL {ledger.where}"
                shared = shared_view(stores_for(config).database_url, ledger)
    stores = stores_for(config)
    runs = sorted((ws.outbox / "runs").glob("*/*")) if (ws.outbox / "runs").is_dir() else []
    state = (
        (f"running (pid {holder.pid})" if holder.pid else "running")
        if holder is not None
        else "not running"
    )
    if shared is not None:  # no workspace lock on a shared drive: the intake's machine says
        intake = [m for m in shared["machines"] if m["role"] == "daemon" and m["alive"]]
        if intake:
            state = f"running (pid {intake[0]['pid']} on {intake[0]['host']})"
    return {
        "state": state,
        "ledger": counts,
        "waiting": dict(last.get("waiting") or {}),
        "pending": last.get("pending", 0),
        "runs": len([r for r in runs if r.is_dir() and not r.name.startswith(".")]),
        "jobs_in_flight": in_flight,
        "awaiting": awaiting,
        "failed": _failed(ws)[0],
        "not_taken": _failed(ws)[1],
        "held_tokens": held,
        "database": where,
        "executor": stores.executor_id,
        "shared": shared,
        "config_refused": (last.get("config") or {}).get("refused") if holder or shared else None,
        "reference": _reference(
            version, last.get("reference") or {}, running=bool(holder or shared)
        ),
    }


def _reference(
    version: ReferenceVersion | None, said: dict[str, Any], *, running: bool
) -> dict[str, Any] | None:
    """The reference fit's current version (the ledger's), its age, and — from what a running
    daemon last said — the projects scored against it since and when the next is due."""
    if version is None:
        return None
    fitted = datetime.strptime(version.fitted_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return {
        "version": version.id,
        "projects": version.projects,
        "fitted_at": version.fitted_at,
        "age_s": max(0, round((datetime.now(UTC) - fitted).total_seconds())),
        "arrivals_since": int(said.get("arrivals_since") or 0) if running else 0,
        "refit_due_at": said.get("refit_due_at") if running else None,
    }
