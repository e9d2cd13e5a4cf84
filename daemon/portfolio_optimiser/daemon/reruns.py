"""Reruns: an ingested project runs again when the portfolio moved under it (its identity is
new), on the job desk's one path; or, when the portfolio came back to what an earlier run of it
gave, that run stands again (run and charged once, never twice)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from .claims import RerunClaim
from .job import Job, Stage
from .ledger import Ledger
from .outcomes import ItemResult
from .portfolio_page import page_of

if TYPE_CHECKING:
    from .desk import JobDesk

__all__ = ["run_due", "supersede"]


def run_due(desk: JobDesk, stop: Callable[[], bool]) -> tuple[list[ItemResult], bool]:
    """A new run for each ingested project the portfolio moved under (its identity is new); and
    whether some are still due (a stop came first)."""
    floor = desk.floor
    for waiting in [w for w in floor.waiting if w.endswith(" (rerun)")]:
        del floor.waiting[waiting]
    results: list[ItemResult] = []
    for due in desk.portfolio.due(floor.ledger):
        if stop():
            return results, True
        supersede(floor.ledger, due.folder, due.identity)
        if due.restore:
            results.append(_restore(desk, due.folder, due.identity))
            continue
        references = json.dumps(due.snapshot().to_dict(), sort_keys=True)
        result = desk.run(RerunClaim(floor, due.folder, due.identity, references))
        if result.state == "waiting":  # said in `waiting`; the rest wait behind it
            break
        results.append(result)
    return results, False


def _restore(desk: JobDesk, folder: Path, identity: str) -> ItemResult:
    """The portfolio came back to what an earlier run of this project gave: that run is its
    latest again (run and charged once, never twice)."""
    ledger, log = desk.floor.ledger, desk.floor.log
    stored = ledger.jobs.get(identity)
    job = Job.from_json(stored) if stored is not None else None
    summary = job.summary if job is not None else None
    run_folder = desk.host.job_context(job).run_folder(job) if job is not None and summary else None
    if job is None or summary is None or run_folder is None or not run_folder.is_dir():
        why = "its earlier run's folder is gone from outbox/runs/"
        log.warning("earlier run not restored", project=folder.name, reason=why)
        return ItemResult(folder.name, "rerun", "failed", why)
    now = desk.floor.now()
    ledger.records.add_candidates(job.run_id, summary.project_id, summary.candidates, now=now)
    page = page_of(run_folder, log)
    ledger.records.record_project_run(
        summary.project_id, job.run_id, str(run_folder), now=now, page=page
    )
    desk.publish_portfolio()
    log.info("earlier run stands again", project=folder.name, run=job.run_id)
    return ItemResult(folder.name, "rerun", "done", "its earlier run stands again", run_folder)


def supersede(ledger: Ledger, folder: Path, identity: str) -> None:
    """A rerun of this project that never ran, for an identity the portfolio has moved past,
    is given up: its hold on the budget goes with it (one that ran keeps both: its run
    stands, and is finished from its stage)."""
    for stored in ledger.jobs.all(unfinished=True):
        job = Job.from_json(stored)
        stale = job.rerun and job.bundle == str(folder) and job.identity != identity
        if stale and not job.done(Stage.RAN):
            ledger.jobs.drop(job.identity)
            ledger.budget.release(job.identity)
