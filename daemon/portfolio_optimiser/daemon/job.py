"""A bundle job as typed stages: claimed → ran → published → charged → settled.

Decides: what each stage does and what it leaves for the next, as a function of the job's stored
state (:class:`Job`, a plain JSON document the ledger keeps) and the run inputs built once for the
job. Each stage is idempotent over its own outputs, so a stage cut off by a crash after its work
but before its checkpoint runs again and finds its own bytes:

- **ran**: the pipeline's outputs are written whole into the job's staging folder (state
  directory); a staging folder already there is the run's result, read back, never run again;
- **published**: the staging folder is moved into ``outbox/runs/<project>/<run-id>/``;
- **charged**: every token the job's attempts were billed (kept as billed, a killed attempt's
  too) goes into ``outbox/spend.json`` once, keyed on the run, and its budget hold ends;
- **settled**: the candidates, the project's latest run and the item's ``done`` are recorded, and
  the input leaves for ``bundles/projects/`` (a rerun's input is already there).

Recovery reads the stage: nothing here looks for folders to guess where a job stood.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

from portfolio_optimiser.outputs.folders import move_run_folder
from portfolio_optimiser.outputs.proposals import read_proposals
from portfolio_optimiser.outputs.writer import schema_ref_for, write_run_outputs
from portfolio_optimiser.pipeline.outcome import RunResult

from .claim import release
from .ledger import Ledger
from .portfolio_page import page_of
from .runner import RunInputs, run_pipeline
from .spend_book import charge_run
from .workspace import Workspace

__all__ = ["STAGES", "Job", "JobContext", "RunSummary", "Stage", "run_id_for"]


class Stage(StrEnum):
    CLAIMED = "claimed"
    RAN = "ran"
    PUBLISHED = "published"
    CHARGED = "charged"
    SETTLED = "settled"


ORDER: Final = tuple(Stage)

Candidate = tuple[str, str, str | None, str | None]


@dataclass(frozen=True)
class RunSummary:
    """What the stages after a run need of it, from its result or from the folder it wrote."""

    project_id: str
    tokens: int
    budget_stop: str | None
    candidates: tuple[Candidate, ...]

    @classmethod
    def of(cls, result: RunResult) -> RunSummary:
        rows = tuple(
            (
                c.candidate.id,
                key_json(
                    c.candidate.project_id,
                    c.candidate.affected_codes,
                    c.candidate.measure_type,
                    c.candidate.saving_literal,
                    c.candidate.unit,
                ),
                c.assessment,
                c.disagreement,
            )
            for c in result.candidates
            if c.awaits_verdict  # only these get a template and await a verdict
        )
        tokens = result.tokens["input_tokens"] + result.tokens["output_tokens"]
        return cls(result.project_id, tokens, result.budget_stop, rows)

    @classmethod
    def read(cls, folder: Path) -> RunSummary:
        """From a run folder this job wrote whole (atomically) before it was cut off."""
        proposals = read_proposals(folder / "proposals.json")
        provenance = json.loads((folder / "provenance.json").read_text("utf-8"))
        rows = tuple(
            (
                c.id,
                key_json(c.project_id, c.affected_codes, c.measure_type, c.saving_literal, c.unit),
                c.assessment,
                c.disagreement,
            )
            for c in proposals.candidates
            if c.awaits_verdict
        )
        tokens = sum(int(v) for v in (provenance.get("tokens") or {}).values())
        return cls(proposals.project_id, tokens, provenance.get("budget_stop"), rows)


def key_json(
    project_id: str, codes: Any, measure_type: str, literal: str, unit: str | None = None
) -> str:
    key = {
        "project_id": project_id,
        "affected_codes": list(codes),
        "measure_type": measure_type,
        "saving_literal": literal,
    }
    return json.dumps(key | ({"unit": unit} if unit else {}))


def run_id_for(first_seen: str, identity: str) -> str:
    """When its content was first seen, and what it is: stable across restarts and retries."""
    return f"{first_seen[:10].replace('-', '')}-{identity[:10]}"


@dataclass(frozen=True)
class Job:
    """A bundle job's stored state: the ledger keeps it as JSON, one row per run identity."""

    identity: str
    name: str
    claimed: str
    """Where the input was claimed (a folder, or an archive beside its unpacked ``bundle``)."""
    bundle: str
    """The folder the pipeline reads; for a rerun, the ingested project's folder."""
    first_seen: str
    rerun: bool
    stage: Stage = Stage.CLAIMED
    summary: RunSummary | None = None
    attempt: int = 0
    """How many of its workflows failed before this one (``durable.workflow_id``)."""
    content: str = ""
    """The claimed input's content hash: a job set aside after its run is found by it when the
    input comes back, whatever the portfolio has done to its identity meanwhile."""

    references: str = ""
    """The snapshot of the reference fit its identity was computed against (JSON): its run is
    handed the same, so what identified it is what it runs on. Empty: measure it when it runs."""

    @property
    def run_id(self) -> str:
        return run_id_for(self.first_seen, self.identity)

    def at(self, stage: Stage, summary: RunSummary | None = None) -> Job:
        return dataclasses.replace(self, stage=stage, summary=summary or self.summary)

    def done(self, stage: Stage) -> bool:
        return ORDER.index(self.stage) >= ORDER.index(stage)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Job:
        data = json.loads(text)
        summary = data.pop("summary")
        return cls(
            **{**data, "stage": Stage(data["stage"])},
            summary=None
            if summary is None
            else RunSummary(
                **{**summary, "candidates": tuple(tuple(c) for c in summary["candidates"])}
            ),
        )


@dataclass(frozen=True)
class JobContext:
    """What the stages touch besides the job: built once per job by the lifecycle."""

    workspace: Workspace
    ledger: Ledger
    inputs: Callable[[], RunInputs]
    """Built on first use, once: a job resumed past its run never builds them."""
    stamp: Callable[[], str]
    log: Any
    fault: Callable[[str], None]
    """TEST-ONLY: the crash-safety tests die at a named point between two durable steps."""
    guard: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext
    """The job's fence (``ledger_fences``): every write runs inside it, and none once the job
    was handed to another machine."""

    def staging(self, job: Job) -> Path:
        return self.workspace.state / "staged" / job.identity[:16]

    def run_folder(self, job: Job) -> Path:
        assert job.summary is not None
        return self.workspace.outbox / "runs" / job.summary.project_id / job.run_id


def ran(job: Job, ctx: JobContext) -> Job:
    staged = ctx.staging(job) / job.run_id
    if (staged / "proposals.json").is_file():  # its own whole folder: it ran before a cut-off
        ctx.log.info("run found staged, not run again", bundle=job.name, run=job.run_id)
        return job.at(Stage.RAN, RunSummary.read(staged))
    ctx.fault("during-run")
    with ctx.guard():
        pass  # handed over while this machine was cut off: not run (nor paid for) twice
    result = run_pipeline(ctx.inputs(), Path(job.bundle), job.run_id)
    final = ctx.workspace.outbox / "runs" / result.project_id / job.run_id
    with ctx.guard():
        write_run_outputs(
            result,
            outbox=ctx.workspace.outbox,
            run_id=job.run_id,
            stamp=job.first_seen,  # stable across restarts: the same run writes the same bytes
            schema_ref=schema_ref_for(final, ctx.workspace.root),
            into=ctx.staging(job),
        )
    ctx.fault("after-ran")
    return job.at(Stage.RAN, RunSummary.of(result))


def published(job: Job, ctx: JobContext) -> Job:
    with ctx.guard():
        move_run_folder(ctx.staging(job) / job.run_id, ctx.run_folder(job))
    ctx.fault("after-outputs")
    return job.at(Stage.PUBLISHED)


def charged(job: Job, ctx: JobContext) -> Job:
    assert job.summary is not None
    # Every attempt's billed tokens, kept as they were billed (a killed attempt's too); never
    # less than the finished run reported.
    tokens = max(job.summary.tokens, ctx.ledger.budget.charged_tokens(job.identity))
    charge_run(
        ctx.workspace,
        ctx.ledger,
        run_id=f"{job.summary.project_id}/{job.run_id}",
        project_id=job.summary.project_id,
        tokens=tokens,
        budget_stop=job.summary.budget_stop,
        stamp=ctx.stamp(),
        guard=ctx.guard,
        fault=ctx.fault,
    )
    with ctx.guard():
        ctx.ledger.budget.release(job.identity)  # what it spent is charged now, not held
    return job.at(Stage.CHARGED)


def settled(job: Job, ctx: JobContext) -> Job:
    assert job.summary is not None
    summary, ledger, now = job.summary, ctx.ledger, ctx.stamp()
    folder = ctx.run_folder(job)
    page = page_of(folder, ctx.log)
    with ctx.guard():
        ledger.records.add_candidates(job.run_id, summary.project_id, summary.candidates)
        ledger.records.record_project_run(
            summary.project_id, job.run_id, str(folder), now=now, page=page
        )
        ledger.mark(
            job.identity,
            "done",
            now=now,
            detail=f"{summary.project_id} run {job.run_id}",  # for people (status); never parsed
            output=str(folder),
        )
        if not job.rerun:
            _settle_input(job, ctx)
    # On whichever machine ran it (a worker's log says which jobs it ran, and where they went).
    ctx.log.info(
        "job settled",
        bundle=job.name,
        project=summary.project_id,
        run=job.run_id,
        candidates=len(summary.candidates),
        report=str(folder / "report.md"),
    )
    ctx.fault("after-settle")
    return job.at(Stage.SETTLED)


def _settle_input(job: Job, ctx: JobContext) -> None:
    """The input leaves only now that outputs, spend and ledger are durable; a second pass finds
    it gone from its claimed place and settled already."""
    assert job.summary is not None
    bundle, claimed = Path(job.bundle), Path(job.claimed)
    projects = ctx.workspace.bundles_projects
    target = projects / job.summary.project_id
    if bundle.exists():
        if target.exists():
            # A unique name: two versions in one second never collide.
            superseded = projects / ".superseded" / f"{job.summary.project_id}-{job.identity[:12]}"
            superseded.parent.mkdir(parents=True, exist_ok=True)
            release(target, superseded)
        release(bundle, target)
    if claimed != bundle and claimed.is_dir():
        shutil.rmtree(claimed)  # a folder of estimate files, imported into bundles/projects/
    elif claimed != bundle and claimed.exists():
        claimed.unlink()  # the archive, whose unpacked bundle now lives in bundles/projects/


STAGES: Final[dict[Stage, Callable[[Job, JobContext], Job]]] = {
    Stage.RAN: ran,
    Stage.PUBLISHED: published,
    Stage.CHARGED: charged,
    Stage.SETTLED: settled,
}
