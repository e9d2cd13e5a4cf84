"""A published run's ``proposals.json``, read back as one typed, read-only document.

Decides: what a reader of a run folder may rely on in its ``proposals.json`` — the project, the
run, and each candidate with its key, its claimed saving, its reasoning ids and the two
falsifiers' words — and that a file which is not such a document is one :class:`ProposalsError`
naming the file and the field (or the line and column of broken JSON). The schema
(``proposals.schema.json``) is the contract: the writer checks the whole document against it
before it publishes; :func:`read_proposals` checks each field it reads against the type the schema
gives it (field by field, not the whole schema again: the portfolio page reads every project's
latest run after every run, and a full validation costs ten times the parse), so no reader
indexes raw JSON. Whether a candidate awaits a verdict, or counts as validated, is asked of
``context.standing``, as for the run itself.

Never writes, and imports no model framework.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NoReturn, cast, get_args

from portfolio_optimiser.context import standing
from portfolio_optimiser.context.standing import CheckerWord, ValidatorWord
from portfolio_optimiser.errors import UserError

__all__ = ["Proposals", "ProposalsError", "ProposedCandidate", "ProposedFrame", "read_proposals"]

SCHEMA_VERSION: Final = 1
"""The ``schema_version`` of ``proposals.schema.json`` this model reads."""
_VALIDATOR_WORDS: Final = get_args(ValidatorWord)
_CHECKER_WORDS: Final = get_args(CheckerWord)


class ProposalsError(UserError, ValueError):
    """A ``proposals.json`` that is not a run's proposals; ``str(exc)`` names the file and where."""

    def __init__(self, path: Path, where: str, problem: str) -> None:
        super().__init__(
            f"{path} is not a run's proposals ({where}: {problem}); it is the daemon's own "
            "output, never edited by hand: put back the file as the daemon wrote it"
        )
        self.path = path
        self.where = where


@dataclass(frozen=True)
class ProposedCandidate:
    """One candidate of a published run, as its ``proposals.json`` holds it."""

    id: str
    project_id: str
    title: str
    """Empty when the candidate has none."""
    affected_codes: tuple[str, ...]
    measure_type: str
    claimed_saving_nok: int | float
    saving_literal: str
    """The claimed saving as written: part of the candidate's key, never normalised."""
    unit: str | None
    origin: str
    """Where it came from (``measure-option:<id>``, ``verdict:<id>``, ...); empty when unsaid."""
    validator: ValidatorWord
    """The deterministic validator's outcome, and only the validator's."""
    checker: CheckerWord
    """The checker's outcome, kept apart from the validator's."""
    assessment: str | None
    disagreement: str | None
    decide_by: str | None = None
    """Its measure's latest decision point (a date first, or a phase); None when unsaid."""

    @property
    def awaits_verdict(self) -> bool:
        """An expert's verdict is asked on it (:func:`standing.awaits_verdict`)."""
        return standing.awaits_verdict(self.validator)

    @property
    def validated(self) -> bool:
        """Its saving counts as validated (:func:`standing.validated`)."""
        return standing.validated(self.validator, self.checker)


@dataclass(frozen=True)
class ProposedOutcome:
    """A finished project's final cost against its frames, as ``proposals.json`` holds it."""

    final_cost_nok: float
    p50_nok: float
    p85_nok: float


@dataclass(frozen=True)
class ProposedFrame:
    """What a run's frame flags for the portfolio page: a simulation that diverges from the
    stated frame, a kostnadsramme below the styringsramme (the kuttliste items that make it so)."""

    divergence: float | None
    incoherent: tuple[str, ...]


@dataclass(frozen=True)
class Proposals:
    """A published run's ``proposals.json``: its project, its run and its candidates, in order."""

    project_id: str
    run_id: str
    candidates: tuple[ProposedCandidate, ...]
    outcome: ProposedOutcome | None = None
    frame: ProposedFrame | None = None
    """Set only when the frame flags something."""


def read_proposals(path: Path) -> Proposals:
    """The ``proposals.json`` at ``path``.

    Raises :class:`ProposalsError` when the file is not UTF-8 JSON or a field this model reads is
    missing or not of its schema's type; ``OSError`` when it cannot be read at all.
    """
    raw = path.read_bytes()
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ProposalsError(path, f"byte {exc.start}", "not UTF-8") from None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise ProposalsError(path, where, f"not JSON ({exc.msg})") from None
    top = _Fields(path, doc, "")
    version = top.get("schema_version", int, "a schema version")
    if version != SCHEMA_VERSION:
        top.refuse("schema_version", f"{version!r} is not {SCHEMA_VERSION}, the version this reads")
    return Proposals(
        project_id=top.text("project_id"),
        run_id=top.text("run_id"),
        candidates=tuple(
            _candidate(_Fields(path, c, f"candidates/{i}"))
            for i, c in enumerate(top.get("candidates", list, "a list"))
        ),
        outcome=_outcome(top.within("outcome")) if "outcome" in doc else None,
        frame=_flags(top.within("frame")) if "frame" in doc else None,
    )


def _flags(f: _Fields) -> ProposedFrame | None:
    divergent = f.node.get("divergent", False) is True
    divergence = f.node.get("divergence")
    if divergent and (isinstance(divergence, bool) or not isinstance(divergence, int | float)):
        f.refuse("divergence", f"{_shown(divergence)} is not a number")
    share = float(divergence) if divergent and isinstance(divergence, int | float) else None
    incoherent = f.node.get("incoherent", [])
    if not isinstance(incoherent, list) or not all(isinstance(i, str) for i in incoherent):
        f.refuse("incoherent", f"{_shown(incoherent)} is not a list of kuttliste items")
    if not divergent and not incoherent:
        return None
    return ProposedFrame(share, tuple(incoherent))


def _outcome(o: _Fields) -> ProposedOutcome:
    figures = [o.get(k, int | float, "a number") for k in ("final_cost_nok", "p50_nok", "p85_nok")]
    for key, value in zip(("final_cost_nok", "p50_nok", "p85_nok"), figures, strict=True):
        if isinstance(value, bool):
            o.refuse(key, f"{value!r} is not a number")
    return ProposedOutcome(*(float(v) for v in figures))


def _candidate(c: _Fields) -> ProposedCandidate:
    codes = c.get("affected_codes", list, "a list of codes")
    if not codes or not all(isinstance(code, str) for code in codes):
        c.refuse("affected_codes", f"{_shown(codes)} is not a non-empty list of codes")
    saving = c.get("claimed_saving_nok", int | float, "a number")
    if isinstance(saving, bool):
        c.refuse("claimed_saving_nok", f"{saving!r} is not a number")
    return ProposedCandidate(
        id=c.text("id"),
        project_id=c.text("project_id"),
        title=c.text_or_none("title") or "",
        affected_codes=tuple(codes),
        measure_type=c.text("measure_type"),
        claimed_saving_nok=saving,
        saving_literal=c.text("saving_literal"),
        unit=c.text_or_none("unit"),
        origin=c.text_or_none("origin") or "",
        validator=cast(ValidatorWord, c.within("validator").word("outcome", _VALIDATOR_WORDS)),
        checker=cast(CheckerWord, c.within("checker").word("outcome", _CHECKER_WORDS)),
        assessment=c.text_or_none("assessment"),
        disagreement=c.text_or_none("disagreement"),
        decide_by=c.text_or_none("decide_by"),
    )


class _Fields:
    """One JSON object of the document, read field by field; a wrong field is named, with its
    path from the top (``candidates/2/validator/outcome``)."""

    def __init__(self, path: Path, node: Any, where: str) -> None:
        self.path, self.where = path, where
        if not isinstance(node, dict):
            self.refuse("", f"{_shown(node)} is not an object")
        self.node: dict[str, Any] = node

    def refuse(self, key: str, problem: str) -> NoReturn:
        field = "/".join(part for part in (self.where, key) if part)
        raise ProposalsError(self.path, f"field {field}" if field else "the top level", problem)

    def get(self, key: str, kind: Any, what: str) -> Any:
        if key not in self.node:
            self.refuse(key, "missing")
        value = self.node[key]
        if not isinstance(value, kind):
            self.refuse(key, f"{_shown(value)} is not {what}")
        return value

    def text(self, key: str) -> str:
        value: str = self.get(key, str, "a string")
        return value

    def text_or_none(self, key: str) -> str | None:
        """Absent and null alike are None."""
        if self.node.get(key) is None:
            return None
        value: str = self.get(key, str, "a string or null")
        return value

    def word(self, key: str, words: tuple[str, ...]) -> str:
        value = self.text(key)
        if value not in words:
            self.refuse(key, f"{value!r} is not one of {', '.join(words)}")
        return value

    def within(self, key: str) -> _Fields:
        return _Fields(
            self.path, self.get(key, dict, "an object"), f"{self.where}/{key}".lstrip("/")
        )


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."
