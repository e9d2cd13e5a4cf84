"""The run-output writer: every file of ``outbox/runs/<project-id>/<run-id>/``, published at once.

Decides: the contents of ``proposals.json`` (the schema is the contract, checked before anything is
published), ``provenance.json`` (``validator_decision`` mirrors only the validator; the checker is
reported apart), ``report.md`` with its chart, and the verdict templates. The folder appears
whole or not at all (``folders``).

Same input and stamp give the same bytes: the clock is never read, and nothing depends on set or
directory order.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import jsonschema

from portfolio_optimiser.context.decisions import Rejected
from portfolio_optimiser.context.frame import Frame
from portfolio_optimiser.resources import commons_dir, load_schema

from .folders import publish_folder
from .frame_charts import frame_files
from .report import SVG_NAME, Redactor, render_report, render_savings_svg, savings_by_code
from .templates import VERDICT_SCHEMA, dump_json, template_for, template_name
from .tender_report import priced_files

if TYPE_CHECKING:  # the pipeline package imports agent_framework; the outputs never do
    from portfolio_optimiser.pipeline.outcome import CandidateRun, RunResult

__all__ = ["build_run_files", "schema_ref_for", "write_run_outputs"]

PROPOSALS_SCHEMA: Final = "proposals.schema.json"
_PROJECT_ID: Final = re.compile(r"^[a-z0-9][a-z0-9-]{0,79}$")
# A run id names a folder: no separators, no leading dot (so never "..", never hidden).
_RUN_ID: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def schema_ref_for(run_folder: Path, workspace: Path) -> str:
    """The relative path from ``run_folder`` to the schemas folder, in ``/`` form.

    The workspace's own ``shared/schemas/`` wins when it holds both schemas; otherwise the packaged
    commons. ``proposals.json`` sits in the run folder, so its ``$schema`` is this plus the file
    name. The verdict templates are *moved* by the expert into ``<workspace>/inbox/verdicts/``, so
    :func:`write_run_outputs` re-bases this path to that folder for them (the DESIGN example
    ``../../shared/schemas/verdict.schema.json``): a ``$schema`` that is right where the file is
    edited and checked beats one that is right only where it was written.
    """
    local = workspace / "shared" / "schemas"
    schemas = (
        local
        if (local / PROPOSALS_SCHEMA).is_file() and (local / VERDICT_SCHEMA).is_file()
        else commons_dir() / "schemas"
    )
    return _relative(schemas, run_folder)


def _relative(target: Path, start: Path) -> str:
    # normpath, not resolve(): the path should read the way the folders are laid out, symlinks and all.
    target_abs = os.path.normpath(target.absolute())
    try:
        return Path(os.path.relpath(target_abs, os.path.normpath(start.absolute()))).as_posix()
    except ValueError:  # another drive on Windows: no relative path exists
        return Path(target_abs).as_posix()


def _template_schema_ref(schema_ref: str, *, run_folder: Path, outbox: Path) -> str:
    if not schema_ref:
        return ""
    schemas = Path(os.path.normpath(run_folder.absolute() / schema_ref))
    # The outbox is always <workspace>/outbox (DESIGN §2), so the inbox is its sibling.
    inbox_verdicts = outbox.absolute().parent / "inbox" / "verdicts"
    return f"{_relative(schemas, inbox_verdicts)}/{VERDICT_SCHEMA}"


def _candidate_doc(run: CandidateRun, frame: Frame | None) -> dict[str, Any]:
    cand = run.candidate.model_dump(mode="json")
    delta = frame.deltas.get(run.candidate.id) if frame is not None else None
    return {
        "id": run.candidate.id,
        **cand,
        "delta_p50_nok": delta.p50_nok if delta is not None else None,
        "delta_p85_nok": delta.p85_nok if delta is not None else None,
        "validator": run.validator.model_dump(mode="json"),
        "checker": run.checker.model_dump(mode="json"),
        "materiality": run.materiality,
        "attempt": run.attempt,
        "assessment": run.assessment,
        "plan_outcome": run.plan_outcome,
        "conclusion": run.conclusion,
        "disagreement": run.disagreement,
        "precedent": run.precedent,
    }


def _proposals(result: RunResult, red: Redactor, schema_ref: str) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if schema_ref:
        doc["$schema"] = f"{schema_ref}/{PROPOSALS_SCHEMA}"
    doc |= {
        "schema_version": 1,
        "project_id": result.project_id,
        "run_id": result.run_id,
        "ran_locally": result.ran_locally,
        "stop_reason": result.stop_reason,
        "budget_stop": result.budget_stop,
        "reference_version": result.reference_version or None,
    }
    if result.frame is not None:
        doc["frame"] = result.frame.model_dump(mode="json")
    if result.backtest is not None:
        doc["outcome"] = result.backtest.model_dump(mode="json")
    scrubbed: dict[str, Any] = red.value(doc, "proposals.json")
    scrubbed["candidates"] = [
        red.value(_candidate_doc(run, result.frame), f"candidate {run.candidate.id}")
        for run in result.candidates
    ]
    validator = jsonschema.Draft202012Validator(load_schema(PROPOSALS_SCHEMA))
    error = jsonschema.exceptions.best_match(validator.iter_errors(scrubbed))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "the top level"
        raise RuntimeError(
            f"proposals.json does not match {PROPOSALS_SCHEMA} at {where}: {error.message}. "
            "This is a bug in the output writer; nothing was published"
        )
    return scrubbed


def _validator_decision(run: CandidateRun) -> dict[str, Any]:
    """Only the validator's word: the checker's outcome is never read here (DESIGN §3)."""
    decision = run.validator
    if isinstance(decision, Rejected):
        return {"outcome": decision.outcome, "rule": decision.rule.value, "reason": decision.reason}
    return {"outcome": decision.outcome, "rule": None, "reason": None}


_VERDICT_FIELDS: Final = {"decision", "reviewer", "decided_at", "signed_with"}


def _provenance(result: RunResult, red: Redactor, stamp: str) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema_version": 1,
        "project_id": result.project_id,
        "run_id": result.run_id,
        "task": result.task,
        "stamp": stamp,
        "ran_locally": result.ran_locally,
        "proposer": result.proposer,
        "local_because": result.local_because,
        "models": list(result.models),
        # What redaction withheld from the text sent to models: the kinds, never the values.
        "withheld_from_models": list(result.withheld),
        # What experts taught, exactly as the hypothesis prompt carried it (the fold, DESIGN §4):
        # the one way a verdict reaches a model, kept so a reader can see what the run was told.
        "learned": result.learned,
        "reference_version": result.reference_version or None,
        "attempts": result.attempts,
        "tokens": dict(sorted(result.tokens.items())),
        "stop_reason": result.stop_reason,
        "budget_stop": result.budget_stop,
        "notes": list(result.notes),
        # Digests and lengths, not the prompts: a prompt carries the whole rendered bundle (tens of
        # kilobytes each), and the reasoning records already keep what was asked. The digest is of
        # the exact text the proposer saw, so it can be matched against those records.
        "hypothesis_prompts": [
            {
                "sha256": hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest(),
                "chars": len(prompt),
            }
            for prompt in result.hypothesis_prompts
        ],
    }
    scrubbed: dict[str, Any] = red.value(doc, "provenance.json")
    scrubbed["candidates"] = [
        red.value(
            {
                "id": run.candidate.id,
                "attempt": run.attempt,
                "materiality": run.materiality,
                "assessment": run.assessment,
                "plan_outcome": run.plan_outcome,
                "conclusion": run.conclusion,
                "disagreement": run.disagreement,
                "validator_decision": _validator_decision(run),
                "checker_outcome": run.checker.model_dump(mode="json"),
                # Who decided it already, and the key whose signature proved it was them.
                "verdict": None
                if (decided := result.decided.get(run.candidate.id)) is None
                else decided.model_dump(include=_VERDICT_FIELDS),
            },
            f"candidate {run.candidate.id}",
        )
        for run in result.candidates
    ]
    return scrubbed


def build_run_files(
    result: RunResult, *, outbox: Path, run_id: str, stamp: str, schema_ref: str
) -> dict[str, bytes]:
    """Every file of the run folder, by ``/``-separated relative path; nothing is written."""
    if run_id != result.run_id:
        raise ValueError(f"run id {run_id!r} differs from the result's run id {result.run_id!r}")
    if not _RUN_ID.fullmatch(run_id):
        raise ValueError(f"run id {run_id!r} cannot name a folder (letters, digits, . _ - only)")
    if not _PROJECT_ID.fullmatch(result.project_id):
        raise ValueError(f"project id {result.project_id!r} cannot name a folder")
    run_folder = outbox / "runs" / result.project_id / run_id
    red = Redactor()
    files: dict[str, bytes] = {"proposals.json": dump_json(_proposals(result, red, schema_ref))}
    verdict_ref = _template_schema_ref(schema_ref, run_folder=run_folder, outbox=outbox)
    names: list[str] = []
    for run in result.candidates:
        if not run.awaits_verdict or run.candidate.id in result.decided:
            continue  # no template: the report says why, or who decided it already
        name = template_name(run.candidate.id)
        if f"verdicts/{name}" in files:
            raise ValueError(f"two candidates of this run share the id {run.candidate.id}")
        files[f"verdicts/{name}"] = dump_json(
            template_for(run, schema_ref=verdict_ref, redactor=red)
        )
        names.append(name)
    title = f"Validated savings by cost code — {result.project_id}, run {run_id}"
    files[SVG_NAME] = render_savings_svg(savings_by_code(result), redactor=red, title=title).encode(
        "utf-8"
    )
    files |= frame_files(result, red)
    files |= priced_files(result, red)
    provenance = _provenance(result, red, stamp)
    report = render_report(result, redactor=red, stamp=stamp, templates=names)
    # Last, so it lists what the report itself had to clean as well.
    provenance["redaction"] = {"kinds": sorted(red.kinds), "withheld": list(red.withheld)}
    files["provenance.json"] = dump_json(provenance)
    files["report.md"] = report.encode("utf-8")
    return dict(sorted(files.items()))


def write_run_outputs(
    result: RunResult,
    *,
    outbox: Path,
    run_id: str,
    stamp: str,
    schema_ref: str,
    into: Path | None = None,
) -> Path:
    """Build and publish ``outbox/runs/<project-id>/<run-id>/``; return it.

    ``schema_ref`` is :func:`schema_ref_for` of the run folder (``""`` leaves ``$schema`` out).
    With ``into``, the same folder is published as ``into/<run-id>/`` instead: a staging area
    that ``folders.move_run_folder`` later moves into the outbox. Raises ``OutputExists`` when
    the folder exists with other content.
    """
    files = build_run_files(
        result, outbox=outbox, run_id=run_id, stamp=stamp, schema_ref=schema_ref
    )
    parent = into if into is not None else outbox / "runs" / result.project_id
    return publish_folder(files, parent=parent, name=run_id)
