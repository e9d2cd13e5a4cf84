"""A published run's ``proposals.json``, read back as one typed, read-only document.

Decides: what a reader of a run folder may rely on in its ``proposals.json`` — the project, the
run, and each candidate with its key, its claimed saving, its reasoning ids and the two
falsifiers' words — and that a file which is not such a document is one :class:`ProposalsError`
naming the file and the field (or the line and column of broken JSON). The schema
(``proposals.schema.json``) is the contract: the writer checks it before it publishes, and
:func:`read_proposals` checks it again, so no reader indexes raw JSON. Whether a candidate awaits
a verdict, or counts as validated, is asked of ``context.standing``, as for the run itself.

Never writes, and imports no model framework.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import jsonschema

from portfolio_optimiser.context import standing
from portfolio_optimiser.context.standing import CheckerWord, ValidatorWord
from portfolio_optimiser.errors import UserError
from portfolio_optimiser.resources import load_schema

from .writer import PROPOSALS_SCHEMA

__all__ = ["Proposals", "ProposalsError", "ProposedCandidate", "read_proposals"]


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
    """"" when the candidate has none."""
    affected_codes: tuple[str, ...]
    measure_type: str
    claimed_saving_nok: int | float
    saving_literal: str
    """The claimed saving as written: part of the candidate's key, never normalised."""
    unit: str | None
    origin: str
    """Where it came from (``measure-option:<id>``, ``verdict:<id>``, ...); "" when unsaid."""
    validator: ValidatorWord
    """The deterministic validator's outcome, and only the validator's."""
    checker: CheckerWord
    """The checker's outcome, kept apart from the validator's."""
    assessment: str | None
    disagreement: str | None

    @property
    def awaits_verdict(self) -> bool:
        """An expert's verdict is asked on it (:func:`standing.awaits_verdict`)."""
        return standing.awaits_verdict(self.validator)

    @property
    def validated(self) -> bool:
        """Its saving counts as validated (:func:`standing.validated`)."""
        return standing.validated(self.validator, self.checker)


@dataclass(frozen=True)
class Proposals:
    """A published run's ``proposals.json``: its project, its run and its candidates, in order."""

    project_id: str
    run_id: str
    candidates: tuple[ProposedCandidate, ...]


def read_proposals(path: Path) -> Proposals:
    """The ``proposals.json`` at ``path``.

    Raises :class:`ProposalsError` when the file is not UTF-8 JSON or does not match the schema,
    naming the field; ``OSError`` when it cannot be read at all.
    """
    raw = path.read_bytes()
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ProposalsError(path, f"byte {exc.start}", "not UTF-8") from None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise ProposalsError(path, where, f"not JSON ({exc.msg})") from None
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(load_schema(PROPOSALS_SCHEMA)).iter_errors(doc)
    )
    if error is not None:
        field = [str(p) for p in error.absolute_path]
        missing = _missing(error)
        if missing is not None:
            field.append(missing)
        where = f"field {'/'.join(field)}" if field else "the top level"
        raise ProposalsError(path, where, error.message)
    return Proposals(
        project_id=doc["project_id"],
        run_id=doc["run_id"],
        candidates=tuple(_candidate(path, i, c) for i, c in enumerate(doc["candidates"])),
    )


def _missing(error: jsonschema.exceptions.ValidationError) -> str | None:
    """The property a ``required`` error is about: the field to name is the one that is absent."""
    if error.validator != "required" or not isinstance(error.instance, dict):
        return None
    names = cast(list[str], error.validator_value)
    return next((name for name in names if name not in error.instance), None)


def _candidate(path: Path, index: int, c: dict[str, Any]) -> ProposedCandidate:
    return ProposedCandidate(
        id=c["id"],
        project_id=c["project_id"],
        title=c.get("title") or "",
        affected_codes=tuple(c["affected_codes"]),
        measure_type=c["measure_type"],
        claimed_saving_nok=c["claimed_saving_nok"],
        saving_literal=c["saving_literal"],
        unit=c.get("unit"),
        origin=c.get("origin") or "",
        validator=c["validator"]["outcome"],
        checker=c["checker"]["outcome"],
        # The reasoning ids are the daemon's own, beside the schema's fields: checked here.
        assessment=_text_or_none(path, index, c, "assessment"),
        disagreement=_text_or_none(path, index, c, "disagreement"),
    )


def _text_or_none(path: Path, index: int, c: dict[str, Any], name: str) -> str | None:
    value = c.get(name)
    if value is not None and not isinstance(value, str):
        raise ProposalsError(
            path, f"field candidates/{index}/{name}", f"{value!r} is neither a string nor null"
        )
    return value
