"""The run-output writer: every file of ``outbox/runs/<project-id>/<run-id>/``, published at once.

Decides: the contents of ``proposals.json`` (the schema is the contract, checked before anything is
published), ``provenance.json`` (``validator_decision`` mirrors only the validator; the checker is
reported apart), ``report.md`` with its chart, and the verdict templates; and how the folder
appears. It is built in a hidden sibling ``.tmp-<run-id>-<random>/``, every file and folder is
fsynced, then the folder is renamed into place without replacing anything: a reader sees no run
folder or a whole one. A target that already exists is accepted only if it holds the same bytes (a
re-run of the same run id after a crash); anything else is :class:`OutputExists`.

Same input and stamp give the same bytes: the clock is never read, and nothing depends on set or
directory order.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import hashlib
import os
import re
import secrets
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import jsonschema

from portfolio_optimiser._atomic import fsync_dir
from portfolio_optimiser.context.decisions import Rejected
from portfolio_optimiser.context.frame import Frame
from portfolio_optimiser.errors import UserError
from portfolio_optimiser.resources import commons_dir, load_schema

from .frame_report import frame_files
from .report import SVG_NAME, Redactor, render_report, render_savings_svg, savings_by_code
from .templates import VERDICT_SCHEMA, dump_json, template_for, template_name

if TYPE_CHECKING:  # the pipeline package imports agent_framework; the outputs never do
    from portfolio_optimiser.pipeline.outcome import CandidateRun, RunResult

__all__ = [
    "OutputExists",
    "build_run_files",
    "move_run_folder",
    "schema_ref_for",
    "write_run_outputs",
]

PROPOSALS_SCHEMA: Final = "proposals.schema.json"
_PROJECT_ID: Final = re.compile(r"^[a-z0-9][a-z0-9-]{0,79}$")
# A run id names a folder: no separators, no leading dot (so never "..", never hidden).
_RUN_ID: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class OutputExists(UserError, FileExistsError):
    """The run folder already exists with different content; nothing was replaced."""

    def __init__(self, folder: Path) -> None:
        super().__init__(
            f"{folder} already exists and holds different outputs; nothing was replaced. "
            "Use a new run id, or move the old folder away if it should be written again"
        )
        self.folder = folder


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
    that :func:`move_run_folder` later moves into the outbox. Raises :class:`OutputExists` when
    the folder exists with other content.
    """
    files = build_run_files(
        result, outbox=outbox, run_id=run_id, stamp=stamp, schema_ref=schema_ref
    )
    parent = into if into is not None else outbox / "runs" / result.project_id
    return _publish_folder(files, parent=parent, name=run_id)


def move_run_folder(staged: Path, target: Path) -> Path:
    """Move a staged run folder to ``target`` whole; return ``target``.

    Idempotent over its own bytes: moved before (``staged`` gone, ``target`` there) or the same
    bytes already at ``target`` is done; other bytes at ``target`` raise :class:`OutputExists`.
    Across file systems (a state directory elsewhere) the files are published again, atomically.
    """
    if not staged.exists():
        if target.is_dir():
            return target
        raise FileNotFoundError(f"{staged}: the staged run folder is missing")
    created = _make_parents(target.parent)
    try:
        moved = _rename_noreplace(staged, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        files = _tree(staged)
        if files is None:
            raise OutputExists(staged) from None
        _publish_folder(files, parent=target.parent, name=target.name)
        shutil.rmtree(staged)
        return target
    if not moved:
        if _tree(target) != _tree(staged):
            raise OutputExists(target)
        shutil.rmtree(staged)
        return target
    fsync_dir(target.parent)
    fsync_dir(staged.parent)
    for folder in created:
        fsync_dir(folder.parent)
    return target


def _publish_folder(files: Mapping[str, bytes], *, parent: Path, name: str) -> Path:
    target = parent / name
    created = _make_parents(parent)
    tmp = _make_tmp(parent, name)
    try:
        for rel, data in files.items():
            path = tmp / rel
            if not path.parent.exists():
                path.parent.mkdir()
            _write_file(path, data)
        # Deepest folders first, so each folder's entries are durable before it is renamed.
        inner = {(tmp / rel).parent for rel in files} - {tmp}
        for folder in sorted(inner, key=lambda p: (-len(p.parts), p)):
            fsync_dir(folder)
        fsync_dir(tmp)
        if not _rename_noreplace(tmp, target):
            if _tree(target) == dict(files):
                shutil.rmtree(tmp)
                return target  # the same run written before a crash: already done
            raise OutputExists(target)
        fsync_dir(parent)
        for folder in created:
            fsync_dir(folder.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _make_parents(parent: Path) -> list[Path]:
    """Create ``parent`` and its missing ancestors; return the ones created, outermost first."""
    missing = [p for p in (parent, *parent.parents) if not p.exists()]
    parent.mkdir(parents=True, exist_ok=True)
    return missing[::-1]


def _make_tmp(parent: Path, name: str) -> Path:
    while True:
        # Hidden, and beside the target so the rename stays on one file system.
        tmp = parent / f".tmp-{name}-{secrets.token_hex(4)}"
        try:
            tmp.mkdir(mode=0o755)
        except FileExistsError:
            continue
        return tmp


def _write_file(path: Path, data: bytes) -> None:
    with path.open("xb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _tree(folder: Path) -> dict[str, bytes] | None:
    """A folder's files by relative path, or None when it holds anything but files and folders."""
    found: dict[str, bytes] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            return None
        if path.is_file():
            found[path.relative_to(folder).as_posix()] = path.read_bytes()
        elif not path.is_dir():
            return None
    return found


_AT_FDCWD: Final = -100
_RENAME_NOREPLACE: Final = 1


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    """Linux renameat2(2), which refuses to replace the target atomically; None where absent."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function: Any = libc.renameat2
    except (OSError, AttributeError, TypeError):
        return None
    function.argtypes = (
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    )
    function.restype = ctypes.c_int
    native: Callable[..., int] = function
    return native


def _rename_noreplace(src: Path, dst: Path) -> bool:
    """Move ``src`` to ``dst`` unless ``dst`` exists: True when moved, False when it existed."""
    native = _renameat2()
    if native is not None:
        if native(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return True
        code = ctypes.get_errno()
        if code == errno.EEXIST:
            return False
        if code not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
            raise OSError(code, os.strerror(code), str(dst))
    # Without renameat2 (another OS, or a file system without the flag): rename(2) never replaces
    # a non-empty folder, and the check below keeps it off an existing empty one too, save for a
    # race with a process creating an empty folder of this very name in between.
    if dst.exists() or dst.is_symlink():
        return False
    try:
        src.rename(dst)
    except OSError as exc:
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
            return False
        raise
    return True
