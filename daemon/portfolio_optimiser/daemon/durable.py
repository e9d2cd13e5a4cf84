"""The bundle job as a durable workflow on DBOS Transact (research/scale.md): the engine port's
one implementation (``engine``), and the one module that imports DBOS.

Decides: how a job's stages become DBOS steps and how the process's one DBOS is run. The workflow
``bundle_job`` is keyed by the job's run identity (its first attempt's id *is* the identity, so
starting the same identity again returns the first job), and each stage is a step.

The ledger is the one record of where a job stands: a step reads the job from it, does its stage
unless the job already passed it, and saves the job back; DBOS keeps only which steps completed,
so that completed steps are not run again after a crash. A step cut off mid-way runs again and
finds its own bytes (``job``); a step cut off after the ledger's commit but before DBOS's finds
its stage done in the ledger and does nothing. What a step needs besides (the workspace, the
ledger, the run inputs) comes from the :class:`~.engine.JobHost` its process's engine was opened
with, never from the database.

On one machine the system database is SQLite in the state directory and a job's workflow runs in
the daemon itself, when the wave that claimed it asks for its result. On a shared PostgreSQL
(``stores``) it is enqueued on ``bundle-jobs`` under its identity, and whichever process is free
takes it: the daemon or a ``worker`` (``worker``), one job at a time each, ``[scale]
jobs_at_once`` for all together. A process killed mid-job is recovered by DBOS when it starts
again under the same executor name; ``recover --executor`` hands a dead one's jobs back to the
queue, and so does the daemon itself for a job it waits for whose machine's lock is gone. DBOS
runs only while there is work in the daemon: launched for a job (or for the recovery of one),
stopped at its first idle tick unless a job from the shared queue is under way here. Launched,
its threads poll its tables (2–4 % of a core here on SQLite); stopping takes about 0.1 s and
launching again about 0.02 s, far less than any run, so an idle daemon costs what it cost
before. A worker keeps it launched.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import pickle
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Final

from dbos import DBOS, DBOSClient, SetWorkflowID

from .engine import EngineSettings, JobHost, Submitted
from .job import STAGES, Job, Stage
from .ledger import Ledger
from .ledger_fences import Fenced

__all__ = ["QUEUE", "Engine", "engine_for", "queued_jobs", "stop_engine"]

QUEUE: Final = "bundle-jobs"
QUEUE_POLL_S: Final = 0.2
"""How often a worker looks for a job, and a waiting daemon for a job's end."""
TAKE_OVER_CHECK_S: Final = 5.0
"""How often a daemon waiting for a job under way elsewhere asks whether that machine is gone."""
APPLICATION_VERSION: Final = "bundle-job-1"
"""Pinned, not DBOS's hash of the code: a job cut off by an upgrade is still recovered. Bumped
only when the workflow's steps change in a way an old checkpoint cannot be replayed through (a
workflow from before the ledger became the one record replays: its steps' recorded outputs are
not read, and each step finds its stage in the ledger)."""
_RUNNING: Final = ("ENQUEUED", "PENDING")


class StepFailed(Exception):
    """A step's exception that would not survive DBOS's pickled record of it, as a sentence."""


def _survives_pickling(exc: BaseException) -> bool:
    try:
        copy = pickle.loads(pickle.dumps(exc))
    except Exception:
        return False
    return type(copy) is type(exc) and str(copy) == str(exc)


@DBOS.step(name="stage")
def _stage(stage: str, identity: str) -> None:
    try:
        _stage_body(Stage(stage), identity)
    except Exception as exc:
        if _survives_pickling(exc):
            raise
        # DBOS keeps a step's error pickled: one whose type cannot be rebuilt from its record
        # would reach a recovered job's lifecycle as a TypeError instead of its own sentence.
        raise StepFailed(f"{type(exc).__name__}: {exc}") from exc


def _stage_body(at: Stage, identity: str) -> None:
    host = _running_host()
    stored = host.ledger.jobs.get(identity)
    if stored is None:  # given up (superseded, or set aside) while it waited in the queue
        raise StepFailed(f"the job {identity[:12]} is no longer in the ledger; nothing to run")
    job = Job.from_json(stored)
    if job.done(at):
        return  # its checkpoint committed before DBOS's: done, never twice
    assert _engine is not None  # the host is the engine's
    workflow = DBOS.workflow_id or identity
    try:
        guard = _engine.fence(workflow)
        context = host.job_context(job, guard)
        if at is Stage.RAN:
            with guard():
                host.begin_run(job)
            try:
                job = STAGES[at](job, context)
            finally:
                with contextlib.suppress(Fenced), guard():
                    host.end_run(job)  # not for an attempt fenced off: the count is another's
        else:
            job = STAGES[at](job, context)
        with guard():
            host.ledger.jobs.save(job.identity, job.stage.value, job.to_json(), now=context.stamp())
    except Fenced as exc:
        _engine.log.warning("job handed over; this machine's attempt stopped", problem=str(exc))
        raise
    if at is Stage.SETTLED:
        _engine.held.pop(workflow, None)  # its last write: no more to fence
    context.fault(f"checkpoint-{at.value}")  # between the ledger's commit and DBOS's


@DBOS.workflow(name="bundle_job")
def _bundle_job(job_json: str) -> str:
    # Deterministic in its input, as DBOS replays it: the stages the job had not passed when it
    # was handed over, each a step that reads and writes the ledger.
    job = Job.from_json(job_json)
    for stage in STAGES:
        if not job.done(stage):
            _stage(stage.value, job.identity)
    return job.identity


def workflow_id(job: Job) -> str:
    """The identity for a job's first attempt (so the same identity is one job); a later attempt,
    after a failure DBOS keeps as the workflow's result, gets its own."""
    return job.identity if job.attempt == 0 else f"{job.identity}.{job.attempt}"


def _attempt(wid: str) -> tuple[str, int]:
    identity, _dot, attempt = wid.partition(".")
    return identity, int(attempt or 0)


class Engine:
    """The process's DBOS, launched when a job needs it. One per process (DBOS is a singleton):
    asked for another database, it is stopped and launched again on that one.

    On one machine a job's workflow runs in the daemon itself, when its result is asked for. On
    a shared database it is enqueued on ``bundle-jobs`` and taken by whichever worker is free
    (the daemon is one, one job at a time each; ``jobs_at_once`` caps them all together)."""

    def __init__(
        self, settings: EngineSettings, *, host: JobHost | None, ledger: Ledger, log: Any
    ) -> None:
        self.settings = settings
        self.host = host
        self.ledger = ledger
        """Its own connection: the host's is the steps', on DBOS's threads."""
        self.log = log
        self.launched = False
        self.held: dict[str, int] = {}
        """The fencing token this process took for each workflow it ran a step of."""

    def fence(self, workflow: str) -> Callable[[], AbstractContextManager[None]]:
        """The workflow's token for a step starting here, and the guard its writes run in;
        raises :class:`Fenced` when it was handed from this process to another."""
        assert self.host is not None
        fences, executor = self.host.ledger.fences, self.settings.executor_id
        held = self.held.get(workflow)
        # The engine's word on who runs it now: the queue's choice, or this executor's recovery.
        status = (
            DBOS.get_workflow_status(workflow) if held is None and self.settings.shared else None
        )
        assigned = status is not None and status.executor_id == executor
        token = fences.take(workflow, executor, held=held, assigned=assigned)
        self.held[workflow] = token
        return lambda: fences.guard(workflow, executor, token)

    def _launch(self) -> None:
        if self.launched:
            return
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
        if self.host is None:
            DBOS.listen_queues([])  # it runs no job: it only hands a gone machine's over
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

    def submit(self, job: Job) -> Submitted:
        self._launch()
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
        return Submitted(job)

    def result(self, submitted: Submitted, *, stop: Callable[[], bool]) -> Job | None:
        job = submitted.job
        wid = workflow_id(job)
        status = DBOS.get_workflow_status(wid)
        if status is None:  # one machine: run here, now (a shared one enqueued it at submit)
            assert not self.settings.shared, f"the workflow {wid} was never enqueued"
            with SetWorkflowID(wid):
                _bundle_job(job.to_json())
            return self._stored(job)
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
                    handed = self.recover(owner)
                    if handed:
                        self.log.warning(
                            "jobs of a machine that is gone handed over",
                            executor=owner,
                            jobs=handed,
                        )
            time.sleep(QUEUE_POLL_S)
            status = DBOS.get_workflow_status(wid)
        DBOS.retrieve_workflow(wid).get_result()  # its failure, raised as it was
        return self._stored(job)

    def _stored(self, job: Job) -> Job:
        stored = self.ledger.jobs.get(job.identity)
        if stored is None:
            raise RuntimeError(f"the job {job.identity[:12]} ended with no record in the ledger")
        return Job.from_json(stored)

    def _under_way(self, executor: str, statuses: list[str]) -> list[str]:
        """The workflow ids of ``executor``'s bundle jobs in ``statuses``, at this version."""
        listed = DBOS.list_workflows(
            status=statuses,
            name="bundle_job",
            executor_id=executor,
            app_version=APPLICATION_VERSION,
            load_input=False,
            load_output=False,
        )
        return [status.workflow_id for status in listed]

    def _here(self) -> list[str]:
        # On a shared database DBOS stamps a queued job with the executor that enqueued it, so
        # only what runs here counts; on one machine a recovered job is queued again first.
        statuses = ["PENDING"] if self.settings.shared else list(_RUNNING)
        return self._under_way(self.settings.executor_id, statuses)

    def pending(self) -> list[Submitted]:
        self._launch()  # launching recovers what a crash cut off here
        under_way = []
        for wid in self._here():
            identity, attempt = _attempt(wid)
            stored = self.ledger.jobs.get(identity)
            if stored is not None:
                job = dataclasses.replace(Job.from_json(stored), attempt=attempt)
                under_way.append(Submitted(job))
        return under_way

    def recover(self, executor: str) -> int | None:
        self._launch()
        # Its lock is held meanwhile, so a machine that comes back cannot run them beside a live
        # worker. DBOS has no public call for "recover this executor's workflows" (its internal
        # recover_pending_workflows in dbos-transact-py _recovery.py): each pending workflow
        # is resumed on the queue instead, which a free worker dequeues exactly once.
        with self.ledger.machines.taken_over(executor) as gone:
            if not gone:
                return None
            handed = 0
            for wid in self._under_way(executor, ["PENDING"]):
                try:
                    # The job's token moves on first: if that machine comes back, it writes
                    # nothing more. A write of its under way is waited for, a while.
                    self.ledger.fences.hand_over(wid)
                except Exception as exc:  # its write goes on: handed over at the next look
                    self.log.warning("job not handed over yet", workflow=wid, problem=str(exc))
                    continue
                DBOS.resume_workflow(wid, queue_name=QUEUE)
                handed += 1
            return handed

    def serve(self) -> None:
        self._launch()

    def _busy(self) -> bool:
        if not self.launched:
            return False
        try:
            return bool(self._here())  # asked at every idle tick: the ledger is not read
        except Exception:  # the database away: stopping loses nothing a restart does not find
            return False

    def close(self, *, idle_only: bool = False) -> None:
        if self.launched and not (idle_only and self._busy()):
            DBOS.destroy(workflow_completion_timeout_sec=0)
            self.launched = False


_engine: Engine | None = None
"""The process's one engine, as DBOS is one per process; its steps run with its host."""


def _running_host() -> JobHost:
    if _engine is None or _engine.host is None:  # a step recovered in a process that runs none
        raise RuntimeError("a bundle job's step ran in a process without a job host")
    return _engine.host


def engine_for(
    settings: EngineSettings, *, host: JobHost | None, ledger: Ledger, log: Any
) -> Engine:
    global _engine
    if _engine is not None and _engine.settings != settings:
        _engine.close()
        _engine = None
    if _engine is None:
        _engine = Engine(settings, host=host, ledger=ledger, log=log)
    else:  # the same database for a new host (a reloaded config): its steps run with that one
        _engine.host, _engine.ledger, _engine.log = host, ledger, log
    return _engine


def stop_engine() -> None:
    """The process's engine stopped, whoever opened it: the teardown of a test or a benchmark,
    so that DBOS's threads do not outlive it (commands close the engine they opened)."""
    if _engine is not None:
        _engine.close()


def queued_jobs(database_url: str) -> list[tuple[str, str]]:
    try:
        client = DBOSClient(system_database_url=database_url, retry_connection_errors=False)
        try:
            listed = client.list_queued_workflows(
                queue_name=QUEUE, status=list(_RUNNING), load_input=False, load_output=False
            )
        finally:
            client.destroy()
    except Exception:  # DBOS's tables come with the first job: before it, nothing is queued
        return []
    return [(w.status, w.executor_id or "") for w in listed]
