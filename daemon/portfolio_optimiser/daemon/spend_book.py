"""The portfolio's spend as the job floor reads and charges it.

On one machine ``outbox/spend.json`` is the record, read and written by the one process that runs
jobs. On a shared PostgreSQL the record is the ledger's ``spent`` table, and ``spend.json`` is
published from it after each charge: a file on a shared drive can be served stale by a client's
cache, so every budget decision reads the database. A workspace that moved to a shared database
with a ``spend.json`` of its own has that file's runs adopted at the first charge.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Final

from portfolio_optimiser.pipeline.budget import Spend, SpendRun, read_spend, write_spend

from .ledger import Ledger
from .ledger_machines import SPEND_LOCK
from .workspace import Workspace

__all__ = ["charge_run", "spend_of", "spent_tokens"]

EARLIER: Final = "(spent before the ledger kept each run)"
"""The run a shared ledger gives what an adopted spend.json counted beyond its runs."""


def spend_of(workspace: Workspace, ledger: Ledger) -> Spend:
    """What the portfolio has spent: the shared ledger's charges, else ``spend.json``."""
    if not ledger.shared:
        return read_spend(workspace.spend_file)  # strict: a corrupt ledger stops, never zero
    rows = ledger.budget.spent_runs()
    if not rows:  # nothing charged through the ledger yet: the file, until its adoption
        return read_spend(workspace.spend_file)
    runs = tuple(SpendRun(run_id=r, project_id=p, tokens=t, budget_stop=s) for r, p, t, s in rows)
    return Spend(
        schema_version=1, spent_tokens=sum(run.tokens for run in runs), runs=runs, stamp=""
    )


def spent_tokens(workspace: Workspace, ledger: Ledger) -> int:
    """What :func:`spend_of` counts, summed by the database (a budget decision's hot path)."""
    total = ledger.budget.spent_total() if ledger.shared else None
    return spend_of(workspace, ledger).spent_tokens if total is None else total


def charge_run(
    workspace: Workspace,
    ledger: Ledger,
    *,
    run_id: str,
    project_id: str,
    tokens: int,
    budget_stop: str | None,
    stamp: str,
    guard: Callable[[], AbstractContextManager[None]],
    fault: Callable[[str], None],
) -> None:
    """Charge a run once (a second charge of it changes nothing), inside ``guard`` (the job's
    fence), and publish ``spend.json``; one machine at a time (the ledger's lock)."""
    with ledger.machines.one_writer(SPEND_LOCK):
        if not ledger.shared:
            with guard():
                spend = read_spend(workspace.spend_file)
                if all(run.run_id != run_id for run in spend.runs):  # once, even when run again
                    added = spend.add_run(
                        run_id=run_id, project_id=project_id, tokens=tokens, budget_stop=budget_stop
                    )
                    write_spend(workspace.spend_file, added, stamp=stamp)
                    fault("after-spend")
            return
        with guard():
            _adopt(workspace, ledger, stamp)
            ledger.budget.record_spent(run_id, project_id, tokens, budget_stop, now=stamp)
        fault("after-spend")
        # Published from the ledger, whoever charged last: the file is a view, never the record.
        write_spend(workspace.spend_file, spend_of(workspace, ledger), stamp=stamp)


def _adopt(workspace: Workspace, ledger: Ledger, stamp: str) -> None:
    if ledger.budget.spent_total() is not None:
        return
    before = read_spend(workspace.spend_file)
    for run in before.runs:
        ledger.budget.record_spent(
            run.run_id, run.project_id, run.tokens, run.budget_stop, now=stamp
        )
    beyond = before.spent_tokens - sum(run.tokens for run in before.runs)
    if beyond > 0:
        ledger.budget.record_spent(EARLIER, "", beyond, None, now=stamp)
