"""An xlsx kalkyle or cost breakdown, read into an estimate, one sheet or several.

Decides whether the workbook may be opened at all (a zip within ``MAX_UNCOMPRESSED_BYTES`` and
``MAX_RATIO`` per member, so a zip bomb is refused before anything expands; an encrypted workbook
or an old ``.xls`` is named as such; a damaged one too), which sheets hold lines (those whose
first rows name a code and an amount; a cover sheet is skipped and said), and what each cell
holds: the value Excel saved, read-only. A formula cell Excel never computed has no saved value:
it is reported with its sheet and cell, never guessed. A number is the 15 significant digits
Excel keeps and shows (a saved 18524.879999999997 is 18524.88), never the binary float's noise.
"""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from lxml import etree
from python_calamine import CalamineError, CalamineWorkbook

from .csv_file import MappingNeeded
from .kuttliste import (
    NOT_A_KUTTLISTE,
    KuttlisteRead,
    is_kuttliste_name,
    kuttliste_header,
    read_kuttliste,
)
from .numbers import detect_format, excel_number
from .posts import Estimate, ImportRefused, Measure, Origin, Post, Problem, estimate_of
from .tabular import HEADER_ROWS, Cell, Columns, columns_of, header_row, is_subtotal, template_of
from .tabular_rows import posts_of
from .xlsx_sheet import SheetFacts, column_letter, sheet_facts

__all__ = [
    "MAX_CELLS",
    "MAX_RATIO",
    "MAX_UNCOMPRESSED_BYTES",
    "read_xlsx_estimate",
    "read_xlsx_kuttliste",
]

MAX_UNCOMPRESSED_BYTES: Final = 512 * 1024 * 1024
"""A 20 000-row kalkyle expands to some 30 MB of sheet XML; this is far beyond any real one."""
MAX_CELLS: Final = 5_000_000
"""A sheet's extent (last row × last column): its values are read into a grid that size, so a
stray cell at XFD1048576 in a 6 KB file must be refused before it is read, not after."""
MAX_RATIO: Final = 200
"""Sheet XML compresses 10-30 times; a member a thousand times smaller than it expands is a bomb."""
_OLE: Final = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_NUMERIC: Final = ("quantity", "unit_price", "amount")


def _refuse(name: str, message: str) -> ImportRefused:
    return ImportRefused(name, [Problem(Origin(name), None, message)])


def _check_zip(path: Path, name: str) -> None:
    """Refuse what must not be opened: an encrypted workbook, a damaged zip, a zip bomb."""
    with path.open("rb") as handle:
        magic = handle.read(8)
    if magic == _OLE:
        raise _refuse(
            name,
            "is encrypted (password-protected) or an old .xls workbook; save it as .xlsx "
            "without a password and import it again",
        )
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except zipfile.BadZipFile:
        raise _refuse(
            name, "is damaged or truncated (not a complete xlsx); save or copy it again"
        ) from None
    total = sum(m.file_size for m in members)
    if total > MAX_UNCOMPRESSED_BYTES:
        raise _refuse(
            name,
            f"would expand to {total / 1_048_576:.0f} MiB, past the "
            f"{MAX_UNCOMPRESSED_BYTES // 1_048_576} MiB a workbook may; it is not a kalkyle",
        )
    for member in members:
        if member.compress_size and member.file_size / member.compress_size > MAX_RATIO:
            raise _refuse(
                name,
                f"member {member.filename} would expand {member.file_size // member.compress_size}"
                f" times (a zip bomb); it is not a kalkyle",
            )


def _cell(value: Any) -> Cell:
    if value is None or value == "":
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return excel_number(value)
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, datetime | date | time | timedelta):
        return str(value.isoformat()) if not isinstance(value, timedelta) else str(value)
    return str(value)


@dataclass
class _Sheet:
    name: str
    rows: list[list[Cell]]
    """Row ``i`` is the sheet's row ``i + 1``."""
    facts: SheetFacts
    merged: list[tuple[tuple[int, int], tuple[int, int]]]


def _fill_merged_header(sheet: _Sheet, last_row: int) -> list[str]:
    """A header cell merged down over two rows holds its text in its first row only: it is read
    in every row it covers, so a two-row header reads as one. Only merges that end by
    ``last_row`` (0-based: the header found, or the row below it) are filled: a merge among the
    lines is the lines' own, and filling it would copy a code or an amount."""
    filled = []
    for (top, left), (bottom, right) in sorted(sheet.merged):
        if bottom == top or bottom > last_row or bottom >= len(sheet.rows):
            continue
        text = sheet.rows[top][left] if left < len(sheet.rows[top]) else ""
        for r in range(top + 1, bottom + 1):
            row = sheet.rows[r]
            row.extend([""] * (right + 1 - len(row)))
            for c in range(left, right + 1):
                row[c] = text
        filled.append(f"{column_letter(left)}{top + 1}:{column_letter(right)}{bottom + 1}")
    return filled


def _sheets(path: Path, name: str) -> list[_Sheet]:
    """Each sheet's saved values (python-calamine), and what its XML says beside them."""
    try:
        with zipfile.ZipFile(path) as archive:
            facts = sheet_facts(archive)
        book = CalamineWorkbook.from_path(str(path))
    except (CalamineError, KeyError, ValueError, etree.XMLSyntaxError, zipfile.BadZipFile) as exc:
        raise _refuse(
            name, f"is damaged or not a workbook ({exc}); save it again as .xlsx and import it"
        ) from None
    wide = [(n, f) for n, f in facts.items() if f.cells > MAX_CELLS]
    if wide:
        sheet, far = wide[0]
        book.close()
        raise _refuse(
            name,
            f"sheet {sheet!r} reaches cell {column_letter(far.columns - 1)}{far.rows} "
            f"({far.rows} rows × {far.columns} columns, past the {MAX_CELLS:,} cells a kalkyle "
            "may span); delete what stands far beyond the estimate and save it again".replace(
                ",", " "
            ),
        )
    try:
        sheets = []
        for meta in book.sheets_metadata:
            data = book.get_sheet_by_name(meta.name)
            rows = [[_cell(v) for v in row] for row in data.to_python(skip_empty_area=False)]
            sheets.append(
                _Sheet(
                    meta.name,
                    rows,
                    facts.get(meta.name, SheetFacts()),
                    data.merged_cell_ranges or [],
                )
            )
        return sheets
    finally:
        book.close()


def _spans(numbers: Sequence[int]) -> str:
    spans: list[list[int]] = []
    for n in sorted(numbers):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _unsaved(name: str, sheet: _Sheet, number: int, columns: Columns) -> list[Problem]:
    """Formula cells of the fields read whose value Excel never saved."""
    return [
        Problem(
            Origin(name, row=number, sheet=sheet.name),
            f"{column_letter(i)} ({field})",
            f"a formula (={formula.removeprefix('=')}) with no saved value; open the workbook in "
            "Excel or LibreOffice and save it again, so its values are saved with it",
        )
        for field, i in columns.index.items()
        if (formula := sheet.facts.unsaved.get((number, i))) is not None
    ]


def _kuttliste_of(
    sheet: _Sheet, name: str, posts: Sequence[Post], *, named: bool
) -> KuttlisteRead | None:
    return read_kuttliste(
        sheet.rows,
        lambda n: Origin(name, row=n, sheet=sheet.name),
        posts,
        named=named,
        comma_by_default=True,
    )


def read_xlsx_kuttliste(path: Path, posts: Sequence[Post]) -> tuple[list[Measure], str]:
    """The measures of a kuttliste workbook beside an estimate (its first sheet that is one), and
    how it was read; raises :class:`ImportRefused` with every problem of it."""
    _check_zip(path, path.name)
    for sheet in _sheets(path, path.name):
        read = _kuttliste_of(sheet, path.name, posts, named=True)
        if read is None:
            continue
        if read.problems:
            raise ImportRefused(path.name, read.problems)
        return read.measures, (
            f"Kuttliste {path.name}, sheet {sheet.name!r} (header on row {read.header_at + 1}): "
            f"{len(read.measures)} item(s) imported."
        )
    raise _refuse(path.name, NOT_A_KUTTLISTE)


def read_xlsx_estimate(
    path: Path,
    *,
    mapping: Mapping[str, str] | None = None,
    project: Mapping[str, Any] | None = None,
    name: str | None = None,
    units: Sequence[str] | None = None,
) -> Estimate:
    """The estimate the workbook at ``path`` holds; raises :class:`ImportRefused` with every
    problem at once (:class:`MappingNeeded` when no sheet's columns can be told). ``units``: the
    config's own units beside the vocabulary (None: units are not checked)."""
    name = name or path.name
    _check_zip(path, name)
    with path.open("rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
    body: list[tuple[Origin, Columns, Sequence[Cell]]] = []
    problems: list[Problem] = []
    how: list[str] = []
    first_header: list[str] = []
    kuttliste: list[_Sheet] = []
    for sheet in _sheets(path, name):
        found = kuttliste_header(sheet.rows, named=is_kuttliste_name(sheet.name))
        if found is not None:
            kuttliste.append(sheet)
            how.append(f"Sheet {sheet.name!r}: a kuttliste, header on row {found[0] + 1}.")
            continue
        first = header_row(sheet.rows, mapping)
        merged = _fill_merged_header(sheet, HEADER_ROWS - 1 if first is None else first + 1)
        header_at = header_row(sheet.rows, mapping)
        if header_at is None:
            # The template's keys: the row most like a header (most text cells) of any sheet.
            for row in sheet.rows[:HEADER_ROWS]:
                texts = [str(c).strip() for c in row if isinstance(c, str) and c.strip()]
                if len(texts) > len(first_header):
                    first_header = texts
            how.append(f"Sheet {sheet.name!r} skipped: no row names a code and an amount.")
            continue
        columns = columns_of([str(c) for c in sheet.rows[header_at]], mapping)
        how.append(
            f"Sheet {sheet.name!r}: header on row {header_at + 1}"
            + (f" (merged cells {', '.join(merged)} read as one)" if merged else "")
            + f"; {columns.describe()}."
        )
        hidden = [n for n in sheet.facts.hidden_rows if n > header_at + 1]
        if hidden:
            how.append(
                f"Sheet {sheet.name!r}: row(s) {_spans(hidden)} are hidden in the workbook; read "
                "like the others, as Excel's own sums count them."
            )
        for number, cells in enumerate(sheet.rows[header_at + 1 :], start=header_at + 2):
            # A subtotal's formula needs no saved value: the row is skipped, not read.
            unsaved = [] if is_subtotal(cells, columns) else _unsaved(name, sheet, number, columns)
            problems += unsaved
            if not unsaved:
                body.append((Origin(name, row=number, sheet=sheet.name), columns, cells))
    if not body and not problems:
        raise MappingNeeded(
            name,
            [
                Problem(
                    Origin(name),
                    None,
                    "no sheet has a column recognised as code and one as amount; name them in "
                    "a mapping file (--mapping) and import again",
                )
            ],
            template_of(first_header),
        )
    figures = [
        str(cells[columns.index[f]])
        for _o, columns, cells in body
        for f in _NUMERIC
        if f in columns.index
        and columns.index[f] < len(cells)
        and isinstance(cells[columns.index[f]], str)
        and str(cells[columns.index[f]]).strip()
    ]
    fmt = detect_format(figures, comma_by_default=True)
    lines = posts_of(body, fmt, units=units)
    posts = lines.posts
    problems += lines.problems
    measures = []
    for sheet in kuttliste:
        read = _kuttliste_of(sheet, name, posts, named=is_kuttliste_name(sheet.name))
        if read is not None:
            measures += read.measures
            problems += read.problems
    if problems:
        raise ImportRefused(name, problems)
    how = [
        f"Read {name} (SHA-256 {digest[:16]}…) as xlsx: the values Excel saved (python-calamine).",
        *how,
        *([f"Figures written as text: {fmt.describe()}."] if figures else []),
        *lines.report(),
        *([f"{len(measures)} kuttliste item(s) imported."] if kuttliste else []),
    ]
    return estimate_of(name, digest, posts, how, project, measures)
