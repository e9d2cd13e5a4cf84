"""A csv export of a kalkyle or a cost breakdown, read into an estimate.

Decides the file's encoding (UTF-8, with or without a byte-order mark, else Windows-1252 as
Norwegian Excel saves it), its dialect (the delimiter of ``;``, ``,``, tab or ``|`` that splits
its header and rows alike), its header row (the first that names a code and an amount, within the
first rows), its number format (``numbers``), and the project it estimates (a side file, else the
file's name). States each of these in the estimate's ``how`` for the import report.
"""

from __future__ import annotations

import csv
import hashlib
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from .kuttliste import NOT_A_KUTTLISTE, read_kuttliste
from .numbers import detect_format
from .posts import Estimate, ImportRefused, Measure, Origin, Post, Problem, estimate_of
from .tabular import HEADER_ROWS, columns_of, header_row, posts_of, template_of

__all__ = ["MappingNeeded", "read_csv_estimate", "read_csv_kuttliste"]


_DELIMITERS: Final = (";", "\t", ",", "|")
_NUMERIC: Final = ("quantity", "unit_price", "amount")


class MappingNeeded(ImportRefused):
    """The header names no code or no amount column: ``template`` is the mapping to fill in."""

    def __init__(self, source: str, problems: Sequence[Problem], template: str) -> None:
        super().__init__(source, problems)
        self.template = template


def _decode(data: bytes, name: str) -> tuple[str, str]:
    if b"\x00" in data[:4096]:
        raise ImportRefused(
            name,
            [
                Problem(
                    Origin(name),
                    None,
                    "is binary, not a csv text file; export it as csv (semicolon-separated)",
                )
            ],
        )
    try:
        return data.decode("utf-8-sig"), "UTF-8"
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace"), "Windows-1252 (not UTF-8)"


def _dialect(lines: Sequence[str]) -> str:
    """The delimiter that splits the most of the first lines into the same number of fields."""
    best, score = ";", -1
    sample = [ln for ln in lines[:HEADER_ROWS] if ln.strip()]
    for delimiter in _DELIMITERS:
        widths = [len(next(csv.reader([ln], delimiter=delimiter))) for ln in sample]
        common = max(set(widths), key=widths.count) if widths else 1
        hits = sum(1 for w in widths if w == common) if common > 1 else 0
        if hits > score:
            best, score = delimiter, hits
    return best


def _rows(data: bytes, name: str) -> tuple[list[list[str]], str, str]:
    """The file's rows, its encoding and its delimiter."""
    text, encoding = _decode(data, name)
    delimiter = _dialect(text.splitlines())
    return list(csv.reader(io.StringIO(text), delimiter=delimiter)), encoding, delimiter


def read_csv_kuttliste(path: Path, posts: Sequence[Post]) -> tuple[list[Measure], str]:
    """The measures of a kuttliste csv beside an estimate, and how it was read; raises
    :class:`ImportRefused` with every problem of it."""
    rows, encoding, delimiter = _rows(path.read_bytes(), path.name)
    read = read_kuttliste(
        rows,
        lambda n: Origin(path.name, row=n),
        posts,
        named=True,
        comma_by_default=delimiter == ";",
    )
    if read is None:
        raise ImportRefused(path.name, [Problem(Origin(path.name, row=1), None, NOT_A_KUTTLISTE)])
    if read.problems:
        raise ImportRefused(path.name, read.problems)
    return read.measures, (
        f"Kuttliste {path.name} ({encoding}, header on row {read.header_at + 1}): "
        f"{len(read.measures)} item(s) imported."
    )


def read_csv_estimate(
    path: Path,
    *,
    mapping: Mapping[str, str] | None = None,
    project: Mapping[str, Any] | None = None,
    name: str | None = None,
) -> Estimate:
    """The estimate ``path`` holds (``name``: its name as the planner gave it); raises
    :class:`ImportRefused` with every problem at once (:class:`MappingNeeded` when its columns
    cannot be told)."""
    name = name or path.name
    data = path.read_bytes()
    rows, encoding, delimiter = _rows(data, name)
    header_at = header_row(rows, mapping)
    if header_at is None:
        first = next((row for row in rows[:HEADER_ROWS] if any(c.strip() for c in row)), [])
        found = columns_of(first, mapping).index
        missing = [f for f in ("code", "amount") if f not in found]
        raise MappingNeeded(
            name,
            [
                Problem(
                    Origin(name, row=1),
                    None,
                    f"no column recognised as {' or '.join(missing)} among "
                    f"{', '.join(repr(h) for h in first) or 'no headers'}; name them in a "
                    "mapping file (--mapping) and import again",
                )
            ],
            template_of(first),
        )
    columns = columns_of(rows[header_at], mapping)
    body = [
        (Origin(name, row=header_at + 2 + i), columns, row)
        for i, row in enumerate(rows[header_at + 1 :])
    ]
    figures = [
        row[columns.index[f]]
        for _origin, _columns, row in body
        for f in _NUMERIC
        if f in columns.index and columns.index[f] < len(row) and row[columns.index[f]].strip()
    ]
    fmt = detect_format(figures, comma_by_default=delimiter == ";")
    posts, problems, skipped = posts_of(body, fmt)
    if not posts and not problems:
        problems.append(Problem(Origin(name), None, "has no cost line under its header"))
    if problems:
        raise ImportRefused(name, problems)
    shown = {";": "semicolon", ",": "comma", "\t": "tab", "|": "bar"}[delimiter]
    how = (
        f"Read {name} (SHA-256 {hashlib.sha256(data).hexdigest()[:16]}…) as csv: {encoding}, "
        f"{shown}-separated, header on row {header_at + 1}.",
        f"Figures: {fmt.describe()}.",
        f"Columns: {columns.describe()}.",
        f"{len(posts)} line(s) imported; {len(skipped)} row(s) skipped.",
        *(f"Skipped {s}." for s in skipped),
    )
    return estimate_of(name, hashlib.sha256(data).hexdigest(), posts, how, project)
