"""What a bundle job's steps take from the process they run in (``engine.JobHost``): the job's
context, its run inputs built once per job, and the count of runs started.

One per process that runs jobs: the daemon (which also takes in the inbox) and each
``portfolio-optimiser worker``. It has its own connection to the ledger, because the steps run
on the engine's threads while the daemon's own thread goes on taking in bundles and verdicts;
the portfolio and the reasoning store are the process's one each, handed in.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from portfolio_optimiser.config import Config
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.reference import ProjectReferences
from portfolio_optimiser.pipeline.run import ClientFactory, default_client_factory
from portfolio_optimiser.reasoning.store import Store

from .job import Job, JobContext
from .ledger import Ledger, LedgerError
from .ledger_fences import Fenced
from .portfolio import Portfolio
from .runner import RunInputs
from .stamps import iso
from .workspace import Workspace

__all__ = ["CRASHES_TO_QUARANTINE", "FAULT_ENV", "GivenUp", "RunHost"]

CRASHES_TO_QUARANTINE: Final = 2
"""Runs of one bundle that ended the process; at the next start it is quarantined, not re-run."""
FAULT_ENV: Final = "PORTFOLIO_OPTIMISER_TEST_FAULT"
"""TEST-ONLY: after-claim, during-run, after-charge, after-ran, after-outputs, after-spend,
after-settle or checkpoint-<stage> makes the process SIGKILL itself at that point, so the
crash-safety tests can kill a job between two durable steps; ``point@N`` the Nth time the process
reaches it; ``point:stop`` freezes it there instead (SIGSTOP), as a machine cut off mid-job. Read
once; unset in production."""


class GivenUp(Exception):
    """A run that took the process down too often: never started again."""

    def __init__(self, crashes: int) -> None:
        super().__init__(crashes)  # its only argument: DBOS keeps a step's error pickled
        self.crashes = crashes

    def __str__(self) -> str:
        return f"stopped the process {self.crashes} times"


@dataclass
class RunHost:
    workspace: Workspace
    config: Config
    ledger: Ledger
    """This host's own connection (closed with :meth:`close`)."""
    clock: Callable[[], float]
    log: Any
    portfolio: Portfolio
    reasoning_store: Store
    client_factory: ClientFactory = default_client_factory
    environ: dict[str, str] | None = None
    running_digest: str | None = field(default=None, init=False)
    """The job whose pipeline run is under way (its start counted in the ledger)."""

    def __post_init__(self) -> None:
        fault = (self.environ if self.environ is not None else os.environ).get(FAULT_ENV, "")
        fault, _colon, how = fault.partition(":")
        point, _at, nth = fault.partition("@")
        self.test_fault, self._fault_left = point, int(nth or 1)
        self._fault_signal = signal.SIGSTOP if how == "stop" else signal.SIGKILL

    def fault(self, point: str) -> None:
        """TEST-ONLY: killed here, without cleanup, when the test fault hook names ``point``."""
        if self.test_fault == point:
            self._fault_left -= 1
            if self._fault_left <= 0:
                # To this thread, not the process: a process-directed SIGSTOP is taken by
                # whichever thread the kernel wakes first, and this one runs on, past the
                # point (on a loaded machine, into the next write) until that thread stops.
                signal.pthread_kill(threading.get_ident(), self._fault_signal)

    def job_context(
        self, job: Job, guard: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext
    ) -> JobContext:
        """``guard``: the fence of the step it is for (``ledger_fences``)."""
        ws = self.workspace
        built: list[RunInputs] = []

        def inputs() -> RunInputs:
            if not built:  # once per job, and only when it runs
                attempt = self.ledger.budget.next_charge_attempt(job.identity, "ran")
                calls = itertools.count(1)

                def charge(tokens: int) -> None:
                    # Kept as billed, keyed on (workflow, step, attempt, call): a run killed
                    # after this is still charged for it, and never twice; an attempt fenced
                    # off charges nothing (what it was billed is in its log line).
                    try:
                        with guard():
                            self.ledger.budget.record_charge(
                                job.identity, "ran", attempt, next(calls), tokens,
                                now=iso(self.clock()),
                            )  # fmt: skip
                    except Fenced:
                        self.log.warning(
                            "a billed call not charged: its job was handed over",
                            bundle=job.name,
                            tokens=tokens,
                        )
                        raise
                    self.fault("after-charge")

                built.append(
                    RunInputs.build(
                        references=self.snapshot(job),
                        bundle=Path(job.bundle),
                        workspace=ws,
                        config=self.config,
                        ledger=self.ledger,
                        now=datetime.fromtimestamp(self.clock(), UTC),
                        environ=self.environ,
                        reasoning_store=self.reasoning_store,
                        portfolio=self.portfolio,
                        client_factory=self.client_factory,
                        log=self.log,
                        charge=charge,
                    )
                )
            return built[0]

        return JobContext(
            ws, self.ledger, inputs, lambda: iso(self.clock()), self.log, self.fault, guard
        )

    def snapshot(self, job: Job) -> ProjectReferences:
        """The reference fit the job's identity was computed against; measured now for a job
        that carries none (claimed before it was remembered, or by an earlier version)."""
        if job.references:
            return ProjectReferences.from_dict(json.loads(job.references))
        return self.portfolio.fit.references().assess(load_ir_projections(Path(job.bundle)))

    def begin_run(self, job: Job) -> None:
        """Counted durably before it starts: a run that takes the process down twice is given
        up, never recovered into a third crash."""
        crashes = self.ledger.unfinished_starts(job.identity)
        if crashes >= CRASHES_TO_QUARANTINE:
            raise GivenUp(crashes)  # counted until the job is set aside
        self.ledger.start_run(job.identity)
        self.running_digest = job.identity

    def end_run(self, job: Job) -> None:
        self.ledger.finish_run(job.identity)
        self.running_digest = None

    def abandon_run(self) -> None:
        """A stop was asked for while a run is under way: that is no crash, so its start is not
        counted against the bundle. Called from the signal's thread while the run goes on, so
        through a connection of its own."""
        digest = self.running_digest
        if digest is None:
            return
        with contextlib.suppress(LedgerError), self.ledger.reopen() as other:
            other.finish_run(digest)

    def close(self) -> None:
        self.ledger.close()
