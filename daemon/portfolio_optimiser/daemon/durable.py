"""The bundle job as a durable workflow on DBOS Transact (research/scale.md).

Decides: how a job's stages become DBOS steps and how the process's one DBOS is run. The workflow
``bundle_job`` is keyed by the job's run identity (its first attempt's id *is* the identity, so
starting the same identity again returns the first job), each stage is a step, and its input and
output are the job's JSON: what a step needs besides (the workspace, the ledger, the run inputs)
comes from the :class:`JobHost` of the process the step runs in, never from the database.

Completed steps never run again after a crash; a step cut off mid-way runs again and finds its
own bytes (``job``). Each step also starts from the ledger's checkpoint of the job, so a step
re-run after the checkpoint (a crash between the ledger's commit and DBOS's) returns what it
stored instead of doing its work twice.

On one machine the system database is SQLite in the state directory and a job's workflow runs in
the daemon itself, when the wave that claimed it asks for its result. On a shared PostgreSQL
(``stores``) it is enqueued on ``bundle-jobs`` under its identity, and whichever process is free
takes it: the daemon or a ``worker`` (``worker``), one job at a time each, ``[scale]
jobs_at_once`` for all together. A process killed mid-job is recovered by DBOS when it starts
again under the same executor name; ``recover --executor`` hands a dead one's jobs back to the
queue, and so does the daemon itself for a job it waits for whose machine's lock is gone. DBOS
runs only while there is work in the daemon: launched for a job (or for the recovery of one),
stopped at its first idle tick unless a job from the shared queue is under way here. Launched, its threads poll its tables (2–4 %
of a core here on SQLite); stopping takes about 0.1 s and launching again about 0.02 s, far
less than any run, so an idle daemon costs what it cost before. A worker keeps it launched.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
import threading
import time
from collections.abc import Callable
from typing import Any, Final, Protocol

from dbos import DBOS, SetWorkflowID

from .job import STAGES, Job, JobContext, Stage
from .ledger import Ledger

__all__ = [
    "QUEUE",
    "Engine",
    "EngineSettings",
    "JobHost",
    "Submitted",
    "engine_for",
    "hand_over",
    "stop_engine",
]

QUEUE: Final = "bundle-jobs"
QUEUE_POLL_S: Final = 0.2
"""How often a worker looks for a job, and a waiting daemon for a job's end."""
TAKE_OVER_CHECK_S: Final = 5.0
"""How often a daemon waiting for a job under way elsewhere asks whether that machine is gone."""
APPLICATION_VERSION: Final = "bundle-job-1"
"""Pinned, not DBOS's hash of the code: a job cut off by an upgrade is still recovered. Bumped
only when the workflow's steps change in a way an old checkpoint cannot be replayed through."""
_RUNNING: Final = {"PENDING", "ENQUEUED"}


class JobHost(Protocol):
    """What a step takes from the process it runs in."""

    ledger: Ledger

    def job_context(self, job: Job) -> JobContext: ...

    def begin_run(self, job: Job) -> None:
        """Count the run as started (a run that ends the process twice is never started again)."""

    def end_run(self, job: Job) -> None: ...


_host: JobHost | None = None
_host_lock = threading.Lock()


def _current_host() -> JobHost:
    with _host_lock:
        if _host is None:  # a step recovered before any host said what it runs in: a bug
            raise RuntimeError("a bundle job's step ran in a process without a job host")
        return _host


class StepFailed(Exception):
    """A step's exception that would not survive DBOS's pickled record of it, as a sentence."""


def _survives_pickling(exc: BaseException) -> bool:
    try:
        copy = pickle.loads(pickle.dumps(exc))
    except Exception:
        return False
    return type(copy) is type(exc) and str(copy) == str(exc)


@DBOS.step(name="stage")
def _stage(stage: str, job_json: str) -> str:
    try:
        return _stage_body(stage, job_json)
    except Exception as exc:
        if _survives_pickling(exc):
            raise
        # DBOS keeps a step's error pickled: one whose type cannot be rebuilt from its record
        # would reach a recovered job's lifecycle as a TypeError instead of its own sentence.
        raise StepFailed(f"{type(exc).__name__}: {exc}") from exc


def _stage_body(stage: str, job_json: str) -> str:
    host = _current_host()
    job = Job.from_json(job_json)
    stored = host.ledger.job(job.identity)
    if stored is not None and Job.from_json(stored).done(Stage(stage)):
        return stored  # its checkpoint committed before DBOS's: done, never twice
    at = Stage(stage)
    context = host.job_context(job)
    if at is Stage.RAN:
        host.begin_run(job)
        try:
            job = STAGES[at](job, context)
        finally:
            host.end_run(job)
    else:
        job = STAGES[at](job, context)
    host.ledger.save_job(job.identity, job.stage.value, job.to_json(), now=context.stamp())
    context.fault(f"checkpoint-{stage}")  # between the ledger's commit and DBOS's
    return job.to_json()


@DBOS.workflow(name="bundle_job")
def _bundle_job(job_json: str) -> str:
    job = Job.from_json(job_json)
    for stage in STAGES:
        if not job.done(stage):
            job = Job.from_json(_stage(stage.value, job.to_json()))
    return job.to_json()


def workflow_id(job: Job) -> str:
    """The identity for a job's first attempt (so the same identity is one job); a later attempt,
    after a failure DBOS keeps as the workflow's result, gets its own."""
    return job.identity if job.attempt == 0 else f"{job.identity}.{job.attempt}"


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    """Which DBOS a process runs, and as what."""

    database_url: str
    """SQLite in the state directory, or the shared PostgreSQL."""
    executor_id: str
    shared: bool = False
    """On a shared database jobs go through the ``bundle-jobs`` queue."""
    jobs_at_once: int = 0
    """The queue's cap on jobs under way at once on every machine (0: none)."""
    runs_jobs: bool = True
    """False for a process that only hands jobs over (``recover``)."""
    owns_queue: bool = True
    """The daemon's config sets the queue's limits; a worker's never changes them."""


@dataclasses.dataclass(frozen=True)
class Submitted:
    """A job handed to its workflow: queued for any worker (a shared database), or to be run
    here when its result is asked for (one machine)."""

    job: Job
    finished_first: list[Job]
    """Jobs a crash cut off that DBOS finished when it was launched for this one."""


class Engine:
    """The process's DBOS, launched when a job needs it. One per process (DBOS is a singleton):
    a host for another state directory stops it and launches it again on its own database.

    On one machine a job's workflow runs in the daemon itself, when its result is asked for. On
    a shared database it is enqueued on ``bundle-jobs`` and taken by whichever worker is free
    (the daemon is one, one job at a time each; ``jobs_at_once`` caps them all together)."""

    def __init__(self, settings: EngineSettings, *, log: Any) -> None:
        self.settings = settings
        self.log = log
        self.launched = False
        self._probe: Ledger | None = None

    def _launch(self, *, wait_for_recovered: bool = True) -> list[Job]:
        if self.launched:
            return []
        # DBOS's own log lines go through the daemon's redacting chain, warnings and worse only.
        dbos_log = logging.getLogger("dbos")
        if not dbos_log.handlers:
            dbos_log.addHandler(logging.NullHandler())
        dbos_log.propagate = True
        DBOS(
            config={
                "name": "portfolio-optimiser",
                "system_database_url": self.settings.database_url,
                "executor_id": self.settings.executor_id,
                "application_version": APPLICATION_VERSION,
                "log_level": "WARNING",
                # Nothing waits on DBOS notifications; a short poll lets DBOS stop in 0.1 s.
                "notification_listener_polling_interval_sec": 0.1,
            }
        )
        if not self.settings.runs_jobs:
            DBOS.listen_queues([])
        DBOS.launch()  # recovers this executor's jobs a crash cut off, on DBOS's own threads
        self.launched = True
        if self.settings.shared:
            DBOS.register_queue(
                QUEUE,
                worker_concurrency=1,  # a process runs one job at a time; machines add workers
                global_concurrency=self.settings.jobs_at_once or None,
                polling_interval_sec=QUEUE_POLL_S,
                # The daemon's config says how many at once; a worker's or recover's never
                # changes it (each registers the queue only if no daemon has yet).
                on_conflict="always_update" if self.settings.owns_queue else "never_update",
            )
        if not wait_for_recovered or self.settings.shared:
            # Shared: DBOS stamps a queued job with the executor that enqueued it, so this
            # daemon's list would hold every job it queued; each claimed one is waited for (with
            # a stop) when the lifecycle reaches it.
            return []
        # They share the host's ledger: wait for them before anything else touches it. Each
        # one's outcome is taken up when the lifecycle reaches its job.
        host, finished = _current_host(), []
        # Only what DBOS recovers here: this executor's, at this version (another machine's job
        # in flight is that machine's to finish; waiting for it would never end).
        recovered = DBOS.list_workflows(
            status=sorted(_RUNNING),
            name="bundle_job",
            executor_id=self.settings.executor_id,
            app_version=APPLICATION_VERSION,
            load_input=False,
            load_output=False,
        )
        for status in recovered:
            stored = host.ledger.job(status.workflow_id.split(".", 1)[0])
            if stored is not None:
                job = Job.from_json(stored)
                self.log.info("job resumed", bundle=job.name, stage=job.stage.value)
            try:
                finished.append(
                    Job.from_json(DBOS.retrieve_workflow(status.workflow_id).get_result())
                )
            except Exception as exc:  # its input is still claimed: the lifecycle takes it up
                self.log.warning(
                    "resumed job failed", workflow=status.workflow_id, problem=str(exc)
                )
        return finished

    def _host(self, host: JobHost) -> None:
        global _host
        with _host_lock:
            _host = host

    def start(self, host: JobHost) -> list[Job]:
        """Launched for ``host``: the jobs a crash cut off are finished before this returns, and
        those that ended well are returned."""
        self._host(host)
        return self._launch()

    def serve(self, host: JobHost) -> None:
        """A worker's: launched, taking jobs from the queue on DBOS's threads until stopped (its
        own jobs a crash cut off among the first)."""
        self._host(host)
        self._launch(wait_for_recovered=False)

    def submit(self, job: Job, host: JobHost) -> Submitted:
        """The job's workflow, started once for its identity: a second submit of the same
        identity finds the first (under way, queued or finished), never a second run."""
        finished = self.start(host)
        status = DBOS.get_workflow_status(workflow_id(job))
        while status is not None and status.status == "ERROR":
            # That attempt failed (the lifecycle retried or the user put it back): a new one.
            job = dataclasses.replace(job, attempt=job.attempt + 1)
            status = DBOS.get_workflow_status(workflow_id(job))
        if status is None and self.settings.shared:
            queue = DBOS.retrieve_queue(QUEUE)
            assert queue is not None  # registered at the launch
            with SetWorkflowID(workflow_id(job)):
                queue.enqueue(_bundle_job, job.to_json())
        return Submitted(job, finished)

    def result(self, submitted: Submitted, *, stop: Callable[[], bool]) -> Job | None:
        """The job once its workflow has finished (its failure raised as it was), or None when
        a stop was asked for first: the job goes on without this process, whose next start
        takes it up."""
        job = submitted.job
        wid = workflow_id(job)
        status = DBOS.get_workflow_status(wid)
        if status is None:  # one machine: run here, now (a shared one enqueued it at submit)
            assert not self.settings.shared, f"the workflow {wid} was never enqueued"
            with SetWorkflowID(wid):
                return Job.from_json(_bundle_job(job.to_json()))
        waited_for, looked = "", 0.0
        while status is not None and status.status in _RUNNING:
            if stop():
                return None
            owner = status.executor_id or ""
            if status.status == "PENDING" and owner != self.settings.executor_id:
                if owner != waited_for:
                    waited_for = owner
                    self.log.info("job under way elsewhere", bundle=job.name, executor=owner)
                if time.monotonic() - looked >= TAKE_OVER_CHECK_S:
                    looked = time.monotonic()
                    self._take_over(owner)
            time.sleep(QUEUE_POLL_S)
            status = DBOS.get_workflow_status(wid)
        done: str = DBOS.retrieve_workflow(wid).get_result()
        return Job.from_json(done)

    def _take_over(self, owner: str) -> None:
        """A job under way on a machine that is gone (its executor's lock is free: killed,
        powered off, or stopped mid-job) goes back to the queue, for a live worker."""
        if self._probe is None:  # a connection of its own: the host's is the steps'
            self._probe = _current_host().ledger.reopen()
        handed = hand_over(self._probe, owner)
        if handed:
            self.log.warning(
                "jobs of a machine that is gone handed over", executor=owner, jobs=handed
            )

    def open(self) -> None:
        """Launched, for a command that runs no job (``recover``)."""
        self._launch(wait_for_recovered=False)

    def busy(self) -> bool:
        """Whether a job is under way on this executor (taken from the shared queue, perhaps one
        a dead machine's recovery handed over, not one this daemon waits for)."""
        if not self.launched:
            return False
        try:
            return bool(
                DBOS.list_workflows(
                    status="PENDING",
                    executor_id=self.settings.executor_id,
                    name="bundle_job",
                    load_input=False,
                    load_output=False,
                )
            )
        except Exception:  # the database away: stopping loses nothing a restart does not find
            return False

    def stop(self) -> None:
        if self._probe is not None:
            self._probe.close()
            self._probe = None
        if self.launched:
            DBOS.destroy(workflow_completion_timeout_sec=0)
            self.launched = False


def hand_over(ledger: Ledger, executor: str) -> int | None:
    """The jobs ``executor`` had under way back on the queue, holding its lock meanwhile (so it
    cannot come back and run them beside a live worker): how many; None while it still works."""
    with ledger.taken_over(executor) as gone:
        if not gone:
            return None
        return len(DBOS._recover_pending_workflows([executor]))


_engine: Engine | None = None


def engine_for(settings: EngineSettings, *, log: Any) -> Engine:
    """The process's engine on the system database ``settings`` name (SQLite in the state
    directory, nothing to install; or the shared PostgreSQL and its queue)."""
    global _engine
    if _engine is not None and _engine.settings != settings:
        _engine.stop()
        _engine = None
    if _engine is None:
        _engine = Engine(settings, log=log)
    return _engine


def stop_engine(*, idle_only: bool = False) -> None:
    """At the end of ``once``, ``run`` and the tests: DBOS's threads do not outlive the job.
    ``idle_only``: not while a job is under way here (a shared queue's job, that no wave of
    this daemon waits for, would be cut off and counted as a crash)."""
    if _engine is not None and not (idle_only and _engine.busy()):
        _engine.stop()
