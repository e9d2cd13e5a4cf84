"""A table of cost lines in one concept: ``type: cost-lines``, one line per row of its body's table.

A priced tender has thousands of posts; one file per post is slow to write and read and soon
more than a bundle may hold, and a planner reads a building part's posts as one table anyway.
The body's first pipe table is read: its header names cost-line fields (``code``, ``title``,
``amount_nok``, ``quantity``, ``unit``, ``unit_price_nok``, ``ns3451``, ``ns3420``, ``post``,
``imported_from``…), each row is one line. The frontmatter may give ``post``, ``unit``,
``ns3451`` or ``ns3420`` for every row that leaves it empty. Figures are plain numbers, as in a cost-line's frontmatter.
Every problem is named with its file line and column, all at once. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from pydantic import ValidationError

from .frontmatter import Concept
from .models import CostLine

__all__ = ["DEFAULTS", "MAX_ROWS", "TABLE_FIELDS", "cost_table_lines", "table_cell", "table_row"]

TABLE_FIELDS: Final = tuple(k for k in CostLine.model_fields if k != "source")
DEFAULTS: Final = frozenset(
    {"unit", "ns3451", "ns3420", "post", "distribution", "correlation_group"}
)
"""The fields a table's frontmatter may give for every row: never its title, which names the
table, nor a code or a figure, which are each line's own."""
MAX_ROWS: Final = 10_000
"""Rows of one table: an import writes 500 a file; more is a bundle to split."""
_FIGURES: Final = frozenset(
    {"amount_nok", "quantity", "unit_price_nok", "min_nok", "likely_nok", "max_nok"}
)
_INTEGER: Final = re.compile(r"^-?\d+$")
_DECIMAL: Final = re.compile(r"^-?\d+\.\d+$")
_DELIMITER: Final = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?$")
_TRUE: Final = frozenset({"true", "yes", "ja", "x"})
_FALSE: Final = frozenset({"false", "no", "nei", ""})


def table_cell(value: Any) -> str:
    """A value as a table cell: one line, pipes escaped."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else ""
    text = " ".join(str(value).split())
    return text.replace("\\", "\\\\").replace("|", "\\|")


def table_row(cells: Sequence[Any]) -> str:
    return "| " + " | ".join(table_cell(c) for c in cells) + " |"


def _cells(line: str) -> list[str]:
    text = line.strip()
    text = text[1:] if text.startswith("|") else text
    if text.endswith("|") and not text.endswith("\\|"):
        text = text[:-1]
    cells, current, escaped = [], [], False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "|":
            cells.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    cells.append("".join(current).strip())
    return cells


def _table(body: str) -> Iterator[tuple[int, list[str]]]:
    """The first table's rows as (body line index, cells), the header first."""
    lines = body.split("\n")
    for i, line in enumerate(lines[:-1]):
        if line.lstrip().startswith("|") and _DELIMITER.match(lines[i + 1].strip()):
            yield i, _cells(line)
            for j in range(i + 2, len(lines)):
                if not lines[j].lstrip().startswith("|"):
                    return
                yield j, _cells(lines[j])
            return


def _value(field: str, text: str) -> tuple[Any, str | None]:
    """The cell as the IR takes it, or the sentence saying why it cannot be."""
    if field in _FIGURES:
        if _INTEGER.match(text):
            return int(text), None
        if _DECIMAL.match(text):
            return float(text), None
        return None, (
            f"{text!r} is not a number; write a plain number without spaces or thousands "
            "separators, e.g. 12480000 or 2400.5"
        )
    if field == "post":
        lowered = text.lower()
        if lowered in _TRUE | _FALSE:
            return lowered in _TRUE, None
        return None, f"{text!r} is neither true nor empty"
    return text, None


def cost_table_lines(concept: Concept) -> tuple[list[CostLine], list[str], set[str]]:
    """The cost lines of a ``type: cost-lines`` concept, a sentence for every problem, and every
    code a row names (sound or not)."""
    rel = concept.rel
    defaults = {k: v for k, v in concept.frontmatter.items() if k in DEFAULTS}
    rows = list(_table(concept.body))
    if not rows:
        return (
            [],
            [
                f"{rel}: a cost-lines concept has no table; write a header row such as "
                "'| code | title | amount_nok |', a row of '---', then one row per line"
            ],
            set(),
        )
    (header_at, header), body = rows[0], rows[1:]
    problems = [
        f"{rel} line {concept.body_line + header_at} column {name!r}: is not a cost-line field; "
        f"write one of {', '.join(TABLE_FIELDS)}"
        for name in header
        if name not in TABLE_FIELDS
    ]
    if problems:
        return [], problems, set()
    if len(body) > MAX_ROWS:
        too_many = (
            f"{rel}: {len(body)} rows, more than the {MAX_ROWS} a table may hold; split it into "
            "several files"
        )
        return [], [too_many], set()
    lines: list[CostLine] = []
    named: set[str] = set()
    for at, cells in body:
        where = f"{rel} line {concept.body_line + at}"
        if len(cells) != len(header):
            problems.append(
                f"{where}: has {len(cells)} cells, the header {len(header)}; a '|' inside a "
                "cell is written '\\|'"
            )
            continue
        row = dict(zip(header, cells, strict=True))
        named.add(row.get("code", ""))
        line, found = _line(rel, where, row, defaults)
        problems += found
        if line is not None:
            lines.append(line)
    return lines, problems, named - {""}


def _line(
    rel: str, where: str, row: Mapping[str, str], defaults: Mapping[str, Any]
) -> tuple[CostLine | None, list[str]]:
    data: dict[str, Any] = dict(defaults)
    problems: list[str] = []
    code = row.get("code", "")
    named = f"{where} (code {code})" if code else where
    for field, text in row.items():
        if text == "":
            continue
        value, problem = _value(field, text)
        if problem is not None:
            problems.append(f"{named} column {field}: {problem}")
        else:
            data[field] = value
    if problems:
        return None, problems
    try:
        return CostLine.model_validate(data | {"source": rel}), []
    except ValidationError as exc:
        for error in exc.errors():
            field = ".".join(str(p) for p in error["loc"])
            message = str(error.get("msg", "is not valid")).removeprefix("Value error, ")
            if error["type"] == "missing":
                message = f"is empty; every row needs its {field}"
            problems.append(
                f"{named}{f' column {field}' if field else ''}: {message[0].lower() + message[1:]}"
            )
        return None, problems
