"""The verdict file: an expert's hand-edited JSON decision on one candidate (DESIGN §3).

Decides: whether a file is a usable verdict, and if not, the one sentence that tells the expert
where (line and column, or field) and what to do. Common hand-editing damage is handled kindly —
a UTF-8 byte order mark and CRLF line ends are accepted — but never silently repaired: a trailing
comma is reported with its position. The id is read verbatim, never re-minted.
"""

from __future__ import annotations

import functools
import json
import math
import re
from datetime import datetime
from enum import StrEnum
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError as SchemaError
from pydantic import BaseModel, ConfigDict, Field

from portfolio_optimiser.errors import UserError
from portfolio_optimiser.resources import load_schema

__all__ = [
    "APPROVING",
    "CLOCK_SKEW_S",
    "Decision",
    "Verdict",
    "VerdictError",
    "decided_in_the_future",
    "parse_verdict",
]


class Decision(StrEnum):
    APPROVED = "approved"
    APPROVED_WITH_ADJUSTMENT = "approved_with_adjustment"
    REJECTED = "rejected"


APPROVING = frozenset({Decision.APPROVED, Decision.APPROVED_WITH_ADJUSTMENT})


class VerdictError(UserError):
    """A verdict file cannot be used; ``str(exc)`` says where and how to fix it."""


class Verdict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    schema_ref: str | None = Field(default=None, alias="$schema")
    id: str
    decision: Decision
    rationale: str
    reviewer: str
    realization_rate: float | None = None
    adjusted_saving_nok: float | int | None = None
    decided_at: str | None = None
    how_to_sign: str | None = None
    """Read-only guidance the template carries (the signing command); never read as a decision."""
    candidate: dict[str, Any] | None = None

    @property
    def approves(self) -> bool:
        return self.decision in APPROVING


def parse_verdict(data: bytes, source: str) -> Verdict:
    """Parse and validate the bytes of a verdict file named ``source``."""
    return _parsed(data, source)


@functools.lru_cache(maxsize=32)
def _parsed(data: bytes, source: str) -> Verdict:
    """The same bytes give the same verdict (it is frozen): a verdict taken in is parsed again
    for the page and for each learning fold, and its schema check is most of its cost."""
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise VerdictError(
            f"{source} line {line}: the file is not UTF-8 text; save it as UTF-8"
        ) from None
    if not text.strip():
        raise VerdictError(
            f"{source}: the file is empty; fill in the verdict template and save it again"
        )
    if len(data) > MAX_VERDICT_BYTES:
        raise VerdictError(
            f"{source}: the file is {len(data) // 1024} KiB; a verdict is a few lines of JSON, so "
            "start again from the template"
        )
    try:
        raw = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except _DuplicateKey as exc:
        lines = _top_level_key_lines(text).get(exc.key, [1])
        raise VerdictError(
            f"{source} line {lines[-1]}: the field {exc.key!r} appears twice; keep one"
        ) from None
    except json.JSONDecodeError as exc:
        raise VerdictError(f"{source} {_json_problem(text, exc)}") from None
    except (RecursionError, ValueError):
        # Brackets nested thousands deep, or an integer of thousands of digits: not a verdict.
        raise VerdictError(
            f"{source}: the text is not a verdict (nested too deeply or a number far too long); "
            "start again from the template"
        ) from None
    if not isinstance(raw, dict):
        raise VerdictError(
            f"{source} line 1: a verdict is a JSON object {{ … }}, not {_json_kind(raw)}"
        )
    for key, value in raw.items():
        if isinstance(value, float) and not math.isfinite(value):
            line = _line_of_key(text, key)
            raise VerdictError(
                f"{source} line {line}, field {key}: {value} is not a number JSON allows; "
                "write a plain number"
            )
    problems: dict[str, str] = {}  # one per field: its first error explains the rest
    for error in sorted(_validator().iter_errors(raw), key=_error_order):
        problems.setdefault(_field_of(error), _schema_problem(text, error))
    decided_at = raw.get("decided_at")
    if isinstance(decided_at, str) and "decided_at" not in problems:
        try:
            datetime.fromisoformat(decided_at.replace("Z", "+00:00"))
        except ValueError:
            line = _top_level_key_lines(text).get("decided_at", [1])[0]
            problems["decided_at"] = (
                f"line {line}, field decided_at: {decided_at!r} is not a real date and time; "
                "write e.g. 2026-11-30T12:00:00Z"
            )
    if len(problems) == 1:
        raise VerdictError(f"{source} {next(iter(problems.values()))}")
    if problems:
        by_line = sorted(problems.values(), key=lambda p: int(re.findall(r"\d+", p)[0]))
        listed = "\n".join(f"- {p}" for p in by_line)
        raise VerdictError(f"{source}: {len(problems)} problems; fix them all:\n{listed}")
    return Verdict.model_validate(raw)


MAX_VERDICT_BYTES = 256 * 1024

CLOCK_SKEW_S = 600.0
"""How far ahead of this machine's clock a ``decided_at`` may lie: another machine's clock."""


def decided_in_the_future(
    verdict: Verdict, data: bytes, source: str, *, now: datetime
) -> str | None:
    """The sentence refusing a ``decided_at`` later than ``now`` (beyond clock skew), or None.

    Apart from :func:`parse_verdict`, which is a function of the bytes alone: this one is of the
    moment it is read. A time without an offset is this machine's local time, as the expert's
    editor most likely wrote it."""
    if not verdict.decided_at:
        return None
    moment = datetime.fromisoformat(verdict.decided_at.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.astimezone()
    ahead_s = (moment - now).total_seconds()
    if ahead_s <= CLOCK_SKEW_S:
        return None
    text = data.decode("utf-8", "replace").removeprefix("\ufeff")
    line = _top_level_key_lines(text).get("decided_at", [1])[0]
    hours = ahead_s / 3600
    ahead = f"{hours:.0f} hours" if hours >= 1.5 else f"{ahead_s / 60:.0f} minutes"
    shown = now.astimezone(moment.tzinfo).replace(microsecond=0).isoformat()
    return (
        f"{source} line {line}, field decided_at: {verdict.decided_at!r} lies {ahead} in the "
        f"future (it is {shown.replace('+00:00', 'Z')} now); write when you decided, or leave "
        "the field out"
    )


@functools.cache
def _validator() -> jsonschema.Draft202012Validator:
    """The verdict schema's validator, made once: reading the schema and building its validator
    took most of a verdict's parse (each verdict is parsed twice: taken in, and on the page)."""
    return jsonschema.Draft202012Validator(load_schema("verdict.schema.json"))


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, list):
        return "a list [ … ]"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    return "an object"


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _json_problem(text: str, exc: json.JSONDecodeError) -> str:
    before = text[: exc.pos].rstrip()
    after = text[exc.pos :].lstrip()
    if before.endswith(",") and exc.msg.startswith(("Expecting property name", "Expecting value")):
        comma = len(before) - 1
        line = text.count("\n", 0, comma) + 1
        column = comma - (text.rfind("\n", 0, comma) + 1) + 1
        if after.startswith(","):
            second = exc.pos + (len(text) - exc.pos - len(after))
            line = text.count("\n", 0, second) + 1
            column = second - (text.rfind("\n", 0, second) + 1) + 1
            return f"line {line}, column {column}: a second comma here; remove one of the two"
        if after.startswith(("}", "]")):
            return (
                f"line {line}, column {column}: trailing comma after the last item; remove "
                "that comma"
            )
    return f"line {exc.lineno}, column {exc.colno}: not valid JSON ({exc.msg}); fix the text there"


def _field_of(error: SchemaError) -> str:
    """The top-level field an error is about (a missing or unknown one is named in quotes)."""
    if error.absolute_path:
        return str(error.absolute_path[0])
    named = re.search(r"'([^']+)'", error.message)
    return named.group(1) if named else error.message


def _error_order(error: SchemaError) -> tuple[int, list[str]]:
    # Missing required fields first: they explain most follow-on errors.
    return (0 if error.validator == "required" else 1, [str(p) for p in error.absolute_path])


def _top_level_key_lines(text: str) -> dict[str, list[int]]:
    """The lines on which each key of the outermost object is written (a key may repeat)."""
    found: dict[str, list[int]] = {}
    depth, line, i = 0, 1, 0
    while i < len(text):
        char = text[i]
        if char == "\n":
            line += 1
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
        elif char == '"':
            end = i + 1
            while end < len(text) and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            rest = text[end + 1 :].lstrip(" \t\r\n")
            if depth == 1 and rest.startswith(":"):
                try:
                    key = json.loads(text[i : end + 1])
                except ValueError:
                    key = text[i + 1 : end]
                found.setdefault(key, []).append(line)
            line += text.count("\n", i, end)
            i = end
        i += 1
    return found


def _line_of_key(text: str, key: str) -> int:
    return _top_level_key_lines(text).get(key, [1])[0]


def _shown(value: object) -> str:
    return (
        json.dumps(value, ensure_ascii=False)
        if not isinstance(value, dict | list)
        else _json_kind(value)
    )


def _schema_problem(text: str, error: SchemaError) -> str:
    path = [str(p) for p in error.absolute_path]
    field = path[0] if path else ""
    where = f"line {_line_of_key(text, field)}, field {'.'.join(path)}" if field else "line 1"
    kind = error.validator
    if kind == "required":
        missing = re.search(r"'([^']+)' is a required property", error.message)
        name = missing.group(1) if missing else "?"
        hint = {
            "adjusted_saving_nok": "approved_with_adjustment needs the saving you would sign off",
            "rationale": "say why, in your own words",
            "reviewer": "give your initials or name",
            "id": "copy it verbatim from the template",
        }.get(name, "add it")
        return f"{where}: the field {name} is missing; {hint}"
    if kind == "additionalProperties":
        extra = re.findall(r"'([^']+)'", error.message)
        name = extra[0] if extra else "?"
        return (
            f"line {_line_of_key(text, name)}: {name!r} is not a verdict field; check its spelling "
            "(fields: id, decision, rationale, reviewer, realization_rate, adjusted_saving_nok, decided_at)"
        )
    if field == "decision":
        if error.instance in ("", None):
            return f"{where}: the decision is empty; write approved, approved_with_adjustment or rejected"
        return f"{where}: {error.instance!r} is not a decision; write approved, approved_with_adjustment or rejected"
    if field == "rationale":
        return f"{where}: a rejection needs a rationale; say why, in your own words"
    if field == "reviewer":
        return f"{where}: the reviewer is empty; give your initials or name"
    if field == "id":
        return f"{where}: {error.instance!r} is not a candidate id; copy the id verbatim from the template"
    if field == "decided_at":
        return (
            f"{where}: {error.instance!r} is not a date and time; write e.g. 2026-11-30T12:00:00Z"
        )
    if field == "realization_rate":
        return f"{where}: {_shown(error.instance)} must be a number from 0 to 1"
    if field == "adjusted_saving_nok":
        return f"{where}: {_shown(error.instance)} must be a number of NOK above zero"
    if field == "candidate":
        return f"{where}: the candidate summary is read-only context; restore it from the template or delete the field"
    return f"{where}: {error.message}"
