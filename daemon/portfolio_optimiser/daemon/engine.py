"""The engine port: what the daemon, a worker and ``recover`` ask of the durable-execution engine.

Decides: what a job floor needs of it — hand a job over (``submit``), wait for what it came to
(``result``), the jobs under way here (``pending``), and hand a gone machine's jobs to the live
ones (``recover``) — besides taking jobs from the queue (``serve``, a worker's) and stopping
(``close``), and nothing else. ``durable`` is the one module that knows DBOS; it is
imported only when a process first needs an engine, so commands that run no job never pay for it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .job import Job, JobContext
from .ledger import Ledger

__all__ = ["EngineSettings", "JobEngine", "JobHost", "Submitted", "open_engine", "shared_queue"]


class JobHost(Protocol):
    """What a job's steps take from the process they run in (``host.RunHost``)."""

    ledger: Ledger

    def job_context(
        self, job: Job, guard: Callable[[], AbstractContextManager[None]] = ...
    ) -> JobContext: ...

    def begin_run(self, job: Job) -> None:
        """Count the run as started (a run that ends the process twice is never started again)."""

    def end_run(self, job: Job) -> None: ...


@dataclass(frozen=True)
class EngineSettings:
    """Which engine a process runs, and as what."""

    database_url: str
    """SQLite in the state directory, or the shared PostgreSQL."""
    executor_id: str
    shared: bool = False
    """On a shared database jobs go through the ``bundle-jobs`` queue."""
    jobs_at_once: int = 0
    """The queue's cap on jobs under way at once on every machine (0: none)."""
    owns_queue: bool = True
    """The daemon's config sets the queue's limits; a worker's or ``recover``'s never does."""


@dataclass(frozen=True)
class Submitted:
    """A job handed to its workflow: queued for any worker (a shared database), or to be run
    here when its result is asked for (one machine)."""

    job: Job


class JobEngine(Protocol):
    def submit(self, job: Job) -> Submitted:
        """The job's workflow, started once for its identity: a second submit of the same
        identity finds the first (under way, queued or finished), never a second run."""

    def result(self, submitted: Submitted, *, stop: Callable[[], bool]) -> Job | None:
        """The job as its last stage left it once its workflow has ended (its failure raised
        as it was), or None when ``stop`` says so first: the job goes on without this wait."""

    def pending(self) -> list[Submitted]:
        """The jobs under way on this executor: cut off by a crash and being finished (the
        engine starts if need be, which is when it finishes them), or taken from the shared
        queue."""

    def recover(self, executor: str) -> int | None:
        """The jobs ``executor`` had under way back on the queue, for a live worker: how many;
        None while that executor still works (its jobs are its own to finish)."""

    def serve(self) -> None:
        """Take jobs from the shared queue on the engine's own threads until it is closed."""

    def close(self, *, idle_only: bool = False) -> None:
        """Stopped (``idle_only``: unless a job is under way here)."""


def open_engine(
    settings: EngineSettings, *, host: JobHost | None, ledger: Ledger, log: Any
) -> JobEngine:
    """The process's engine for ``host`` (None: it runs no job, it only hands jobs over), with
    ``ledger``, a connection of its own, to read a finished job's stage and to fence a gone
    machine. One per process: asked for another database, the old one is stopped first."""
    from .durable import engine_for

    return engine_for(settings, host=host, ledger=ledger, log=log)


def shared_queue(database_url: str) -> list[tuple[str, str]]:
    """The shared queue's jobs, each as (status, executor): ``ENQUEUED`` waits for a free
    worker, ``PENDING`` is under way on that executor. Empty before the first job made the
    engine's tables, or while the database cannot be read."""
    from .durable import queued_jobs

    return queued_jobs(database_url)


if TYPE_CHECKING:  # the one implementation satisfies the port
    from .durable import Engine

    _check: type[JobEngine] = Engine
