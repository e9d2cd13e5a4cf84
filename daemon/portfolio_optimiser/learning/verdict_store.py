"""The learning store: expert verdicts, each keyed on its own candidate, and merged.

Decides: which candidate a verdict is about (its :class:`CandidateKey`) and what the store holds
after a merge; which verdicts are close to a project is ``insights``' question. There are two
readers, with two rules:

* :func:`seed_store_from_bundle` reads the curated context layer and fails fast. A ``type: verdict``
  page keys on its OWN ``affected_codes`` / ``measure_type`` / ``claimed_saving_nok`` — all three
  or none. A partial key, or a saving that is not a JSON number literal, raises
  :class:`VerdictFrontmatterError` naming the file: merging the missing half from the bundle's
  candidate would mint a key that belongs to no candidate. Validation, never repair. A page with
  no key falls back to the bundle's own candidate, so pages written before per-verdict keys stay
  where they were.
* :func:`load_verdicts_from_dir` reads the RAW verdict inbox and is tolerant: a missing folder, a
  foreign or half-written file is skipped and reported, never raised — the expert is mid-edit.

Never writes a file, never re-mints an id that was written down, never normalises a saving literal
(``30000`` and ``30000.0`` mint different ids; a normaliser would split one candidate's signal).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, NoReturn

from portfolio_optimiser.context.errors import BundleError
from portfolio_optimiser.context.frontmatter import Concept, read_concept
from portfolio_optimiser.context.ir import bundle_files, load_ir_projections
from portfolio_optimiser.context.models import (
    Candidate,
    Project,
    candidate_key_literal,
    identity_literal,
    mint_candidate_id,
)
from portfolio_optimiser.context.navigate import MAX_CONCEPT_BYTES, RESERVED_NAMES
from portfolio_optimiser.context.verdict import (
    APPROVING,
    Decision,
    Verdict,
    VerdictError,
    parse_verdict,
)
from portfolio_optimiser.errors import UserError

__all__ = [
    "KEY_FIELDS",
    "CandidateKey",
    "HistoryEntry",
    "LearnedVerdict",
    "LoadReport",
    "VerdictFrontmatterError",
    "VerdictStore",
    "key_from_summary",
    "load_verdicts_from_dir",
    "seed_store_from_bundle",
]

KEY_FIELDS: Final = ("affected_codes", "measure_type", "claimed_saving_nok")


class VerdictFrontmatterError(UserError, ValueError):
    """A verdict declares a candidate key that names no candidate; ``str(exc)`` says where and why."""


@dataclass(frozen=True)
class CandidateKey:
    """The structural key of the candidate a verdict judges; the saving is the literal as written."""

    project_id: str | None = None
    affected_codes: tuple[str, ...] = ()
    measure_type: str | None = None
    saving_literal: str | None = None
    unit: str | None = None
    """A reference price's unit: what identifies it, where others have their saving."""

    @classmethod
    def from_candidate(cls, candidate: Candidate) -> CandidateKey:
        return cls(
            candidate.project_id,
            candidate.affected_codes,
            candidate.measure_type,
            candidate.saving_literal,
            candidate.unit,
        )

    def candidate_id(self) -> str | None:
        """The id this key mints, or ``None`` when the key is not complete."""
        if not (self.project_id and self.affected_codes and self.measure_type):
            return None
        if self.saving_literal is None:
            return None
        return mint_candidate_id(
            self.project_id,
            self.affected_codes,
            self.measure_type,
            identity_literal(self.measure_type, self.saving_literal, self.unit),
        )


@dataclass(frozen=True)
class LearnedVerdict:
    """One expert decision as the store keeps it. The id is the one written down, verbatim."""

    candidate_id: str
    decision: Decision
    rationale: str
    reviewer: str
    key: CandidateKey
    source: Path
    realization_rate: float | None = None
    adjusted_saving_nok: float | int | None = None
    decided_at: str | None = None
    signed_with: str | None = None
    """The fingerprint of the SSH key whose signature proved the reviewer; None: unsigned."""
    decide_by: str | None = None
    """The decision point of the judged candidate's measure, as its summary (or page) gives it:
    a measure learned from this verdict carries it."""

    @property
    def approves(self) -> bool:
        return self.decision in APPROVING

    @classmethod
    def from_verdict(
        cls,
        verdict: Verdict,
        *,
        source: Path,
        key: CandidateKey | None = None,
        signed_with: str | None = None,
    ) -> LearnedVerdict:
        """A parsed verdict file; the key comes from its candidate summary unless given."""
        if key is None:
            key = key_from_summary(verdict.candidate, where=f"{source.name} field candidate")
        return cls(
            candidate_id=verdict.id,
            decision=verdict.decision,
            rationale=verdict.rationale,
            reviewer=verdict.reviewer,
            key=key,
            source=source,
            realization_rate=verdict.realization_rate,
            adjusted_saving_nok=verdict.adjusted_saving_nok,
            decided_at=verdict.decided_at,
            signed_with=signed_with,
            decide_by=_text(verdict.candidate or {}, "decide_by"),
        )


@dataclass(frozen=True)
class HistoryEntry:
    """A verdict that no longer counts: replaced by a later one, or withdrawn."""

    verdict: LearnedVerdict
    fate: Literal["superseded", "withdrawn"]


class VerdictStore:
    """The current verdict per candidate id. Merge, never replace: nothing earlier is lost."""

    def __init__(self) -> None:
        self._current: dict[str, LearnedVerdict] = {}
        self._history: list[HistoryEntry] = []

    def add(self, verdict: LearnedVerdict) -> None:
        """The last write for a candidate id wins; the one it replaces goes to ``history``."""
        earlier = self._current.pop(verdict.candidate_id, None)
        if earlier is not None:
            self._history.append(HistoryEntry(earlier, "superseded"))
        self._current[verdict.candidate_id] = verdict

    def retract(self, candidate_id: str) -> bool:
        """Withdraw a candidate's verdict (kept in ``history``). Returns whether one was current."""
        withdrawn = self._current.pop(candidate_id, None)
        if withdrawn is None:
            return False
        self._history.append(HistoryEntry(withdrawn, "withdrawn"))
        return True

    def get(self, candidate_id: str) -> LearnedVerdict | None:
        return self._current.get(candidate_id)

    def verdicts(self) -> list[LearnedVerdict]:
        """Every current verdict, approved or not, ordered by candidate id."""
        return sorted(self._current.values(), key=lambda v: v.candidate_id)

    def approved(self) -> list[LearnedVerdict]:
        return [v for v in self.verdicts() if v.approves]

    @property
    def history(self) -> tuple[HistoryEntry, ...]:
        return tuple(self._history)

    def __len__(self) -> int:
        return len(self._current)

    def __contains__(self, candidate_id: object) -> bool:
        return candidate_id in self._current


# --- keys ---------------------------------------------------------------------------------------


def _refuse_constant(name: str) -> NoReturn:
    # Python's json accepts NaN and Infinity; JSON does not, and neither does the IR.
    raise ValueError(name)


def _saving_literal(value: Any, where: str) -> str:
    """``str()`` of the raw value, accepted only when ``json.loads`` reads it as a finite number."""
    number: Any = None
    literal = ""
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        literal = candidate_key_literal(value)
        try:
            number = json.loads(literal, parse_constant=_refuse_constant)
        except ValueError:
            number = None
    if (
        literal != literal.strip()
        or isinstance(number, bool)
        or not isinstance(number, int | float)
        or not math.isfinite(number)
    ):
        raise VerdictFrontmatterError(
            f"{where} field claimed_saving_nok: {value!r} is not a JSON number literal; write a "
            "plain number such as 30000 (it is kept exactly as written)"
        )
    return literal


def _declared_key(fields: Mapping[str, Any], where: str) -> tuple[tuple[str, ...], str, str] | None:
    """The three key fields, or ``None`` when none is declared. Part of them is an error."""
    present = [name for name in KEY_FIELDS if fields.get(name) is not None]
    if not present:
        return None
    missing = [name for name in KEY_FIELDS if name not in present]
    if missing:
        raise VerdictFrontmatterError(
            f"{where}: declares {', '.join(present)} but not {', '.join(missing)}; a verdict's "
            "candidate key is all of affected_codes, measure_type and claimed_saving_nok or none "
            "of them, so add the missing field(s) or remove the others"
        )
    codes = fields["affected_codes"]
    if (
        not isinstance(codes, list | tuple)
        or not codes
        or not all(isinstance(code, str) and code.strip() for code in codes)
    ):
        raise VerdictFrontmatterError(
            f"{where} field affected_codes: {codes!r} is not a non-empty list of codes; put them "
            'in quotes, e.g. affected_codes: ["02.3"]'
        )
    measure_type = fields["measure_type"]
    if not isinstance(measure_type, str) or not measure_type.strip():
        raise VerdictFrontmatterError(
            f"{where} field measure_type: {measure_type!r} is not a measure type; write e.g. "
            "measure_type: simplification"
        )
    return tuple(codes), measure_type, _saving_literal(fields["claimed_saving_nok"], where)


def _text(fields: Mapping[str, Any], name: str) -> str | None:
    value = fields.get(name)
    return value if isinstance(value, str) and value.strip() else None


def key_from_summary(summary: Mapping[str, Any] | None, *, where: str) -> CandidateKey:
    """The key a verdict file's ``candidate`` summary declares; an empty key when it has none."""
    if summary is None:
        return CandidateKey()
    declared = _declared_key(summary, where)
    if declared is None:
        return CandidateKey(project_id=_text(summary, "project_id"))
    return CandidateKey(_text(summary, "project_id"), *declared, unit=_text(summary, "unit"))


# --- the curated layer (fail fast) --------------------------------------------------------------


def _number(fields: Mapping[str, Any], name: str, where: str) -> float | int | None:
    value = fields.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise VerdictFrontmatterError(f"{where} field {name}: {value!r} is not a plain number")
    return value


def _learned_from_page(concept: Concept, path: Path, key: CandidateKey) -> LearnedVerdict:
    fields, where = concept.frontmatter, concept.rel
    decision = fields.get("decision")
    if not isinstance(decision, str) or decision not in {d.value for d in Decision}:
        raise VerdictFrontmatterError(
            f"{where} field decision: {decision!r} is not a decision; write approved, "
            "approved_with_adjustment or rejected"
        )
    stated = fields.get("candidate_id", fields.get("id"))
    if stated is not None and not isinstance(stated, str):
        raise VerdictFrontmatterError(f"{where} field candidate_id: {stated!r} is not text")
    rationale = _text(fields, "rationale") or concept.body.strip()
    realization_rate = _number(fields, "realization_rate", where)
    return LearnedVerdict(
        # The id as written; minted only when the page names none (then it IS its key's id).
        candidate_id=stated or key.candidate_id() or f"concept:{concept.id}",
        decision=Decision(decision),
        rationale=rationale,
        reviewer=_text(fields, "reviewer") or "",
        key=key,
        source=path,
        realization_rate=None if realization_rate is None else float(realization_rate),
        adjusted_saving_nok=_number(fields, "adjusted_saving_nok", where),
        decided_at=_text(fields, "decided_at"),
        signed_with=_signed_with(fields.get("signed")),
        decide_by=_text(fields, "decide_by"),
    )


def _signed_with(signed: Any) -> str | None:
    """The key a promoted page says proved its reviewer (``signed.fingerprint``)."""
    found = signed.get("fingerprint") if isinstance(signed, dict) else None
    return found if isinstance(found, str) and found else None


def _bundle_candidate(project: Project | None) -> CandidateKey:
    """The key of the bundle's own candidate: its first measure option, else what is known."""
    if project is None:
        return CandidateKey()
    if not project.measure_options:
        return CandidateKey(project_id=project.id)
    option = project.measure_options[0]
    return CandidateKey(
        project.id,
        option.affected_codes,
        option.measure_type,
        candidate_key_literal(option.estimated_saving_nok),
    )


def seed_store_from_bundle(
    root: Path, store: VerdictStore | None = None, *, problems: list[tuple[str, str]] | None = None
) -> VerdictStore:
    """Add every ``type: verdict`` page under ``root`` to ``store`` (a new one when ``None``).

    Call it once per bundle (a project bundle, the wiki): "the bundle's own candidate" is only
    defined inside one bundle. A ``status: deprecated`` page is added and withdrawn at once, so
    its verdict counts only as history. Raises :class:`VerdictFrontmatterError` and the context
    layer's :class:`BundleError` family — unless ``problems`` is given: then a page that cannot be
    read or keyed is skipped and named there, so one damaged page never stops the others.
    """
    store = store if store is not None else VerdictStore()
    pages: list[tuple[Path, Concept]] = []
    has_project = False
    for path, rel in bundle_files(root):
        if path.name in RESERVED_NAMES:
            continue
        try:
            if path.stat().st_size > MAX_CONCEPT_BYTES:
                raise BundleError(
                    f"{rel}: is larger than {MAX_CONCEPT_BYTES // 1024} KiB; split it"
                )
            concept = read_concept(path, rel)
        except BundleError as exc:
            if problems is None:
                raise
            problems.append((rel, str(exc)))
            continue
        has_project = has_project or concept.type == "project"
        if concept.type == "verdict":
            pages.append((path, concept))
    # Only a bundle with a project has a candidate of its own (the wiki has none).
    project = load_ir_projections(root) if pages and has_project else None
    for path, concept in pages:
        try:
            declared = _declared_key(concept.frontmatter, concept.rel)
            if declared is None:
                key = _bundle_candidate(project)
            else:
                # The page's own project, else the bundle it sits in: a project, not a candidate field.
                project_id = _text(concept.frontmatter, "project_id")
                if project_id is None and project is not None:
                    project_id = project.id
                key = CandidateKey(project_id, *declared, unit=_text(concept.frontmatter, "unit"))
            learned = _learned_from_page(concept, path, key)
        except VerdictFrontmatterError as exc:
            if problems is None:
                raise
            problems.append((concept.rel, str(exc)))
            continue
        store.add(learned)
        if concept.frontmatter.get("status") == "deprecated":
            store.retract(learned.candidate_id)
    return store


# --- the RAW inbox (tolerant) -------------------------------------------------------------------


@dataclass
class LoadReport:
    """What a folder load took in (file names) and what it skipped, with the reason for each."""

    loaded: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def load_verdicts_from_dir(folder: Path, store: VerdictStore) -> LoadReport:
    """Merge every readable ``*.json`` verdict in ``folder`` into ``store``, in name order.

    Tolerant: the folder is the expert's workbench, so a missing folder, a foreign JSON, a file an
    editor has half written, or a summary with a partial key is skipped and reported, never raised.
    Ids are read verbatim. Hidden files (editor and atomic-writer temporaries) are not verdicts.
    """
    report = LoadReport()
    if not folder.is_dir():
        report.skipped.append((str(folder), "the verdict folder does not exist; nothing loaded"))
        return report
    for path in sorted(folder.iterdir()):
        name = path.name
        if name.startswith(".") or not name.lower().endswith(".json") or not path.is_file():
            continue
        try:
            learned = LearnedVerdict.from_verdict(
                parse_verdict(path.read_bytes(), name), source=path
            )
        except OSError as exc:
            report.skipped.append((name, f"{name}: cannot be read ({exc.strerror})"))
        except (VerdictError, VerdictFrontmatterError) as exc:
            report.skipped.append((name, str(exc)))
        else:
            store.add(learned)
            report.loaded.append(name)
    return report
