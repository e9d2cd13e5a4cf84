"""An xlsx kalkyle or cost breakdown, read into an estimate, one sheet or several.

Decides whether the workbook may be opened at all (a zip within ``MAX_UNCOMPRESSED_BYTES`` and
``MAX_RATIO`` per member, so a zip bomb is refused before anything expands; an encrypted workbook
or an old ``.xls`` is named as such; a damaged one too), which sheets hold lines (those whose
first rows name a code and an amount; a cover sheet is skipped and said), and what each cell
holds: the value Excel saved, read-only. A formula cell Excel never computed has no saved value:
it is reported with its sheet and cell, never guessed.
"""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from openpyxl import load_workbook
from openpyxl.utils import get_column_letter

from .csv_file import MappingNeeded
from .numbers import detect_format
from .posts import Estimate, ImportRefused, Origin, Problem, estimate_of
from .tabular import Cell, Columns, columns_of, header_row, is_subtotal, posts_of, template_of

__all__ = ["MAX_RATIO", "MAX_UNCOMPRESSED_BYTES", "read_xlsx_estimate"]

MAX_UNCOMPRESSED_BYTES: Final = 512 * 1024 * 1024
"""A 20 000-row kalkyle expands to some 30 MB of sheet XML; this is far beyond any real one."""
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
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int | float):
        return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def _sheets(path: Path) -> Iterator[tuple[str, list[tuple[int, list[Cell], list[Any]]]]]:
    """Each sheet's rows: (row number, the saved values, the formulas as written)."""
    values = load_workbook(path, read_only=True, data_only=True)
    formulas = load_workbook(path, read_only=True, data_only=False)
    try:
        for sheet in values.worksheets:
            written = formulas[sheet.title]
            rows = []
            for number, (saved, as_written) in enumerate(
                zip(
                    sheet.iter_rows(values_only=True),
                    written.iter_rows(values_only=True),
                    strict=False,
                ),
                start=1,
            ):
                rows.append((number, [_cell(v) for v in saved], list(as_written)))
            yield sheet.title, rows
    finally:
        values.close()
        formulas.close()


def _unsaved(
    name: str,
    sheet: str,
    number: int,
    columns: Columns,
    saved: Sequence[Cell],
    as_written: Sequence[Any],
) -> list[Problem]:
    """Formula cells of the fields read whose value Excel never saved."""
    found = []
    for field, i in columns.index.items():
        written = as_written[i] if i < len(as_written) else None
        value = saved[i] if i < len(saved) else ""
        if isinstance(written, str) and written.startswith("=") and value == "":
            found.append(
                Problem(
                    Origin(name, row=number, sheet=sheet),
                    f"{get_column_letter(i + 1)} ({field})",
                    f"a formula ({written}) with no saved value; open the workbook in Excel or "
                    "LibreOffice and save it again, so its values are saved with it",
                )
            )
    return found


def read_xlsx_estimate(
    path: Path,
    *,
    mapping: Mapping[str, str] | None = None,
    project: Mapping[str, Any] | None = None,
    name: str | None = None,
) -> Estimate:
    """The estimate the workbook at ``path`` holds; raises :class:`ImportRefused` with every
    problem at once (:class:`MappingNeeded` when no sheet's columns can be told)."""
    name = name or path.name
    _check_zip(path, name)
    with path.open("rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
    body: list[tuple[Origin, Columns, Sequence[Cell]]] = []
    problems: list[Problem] = []
    how: list[str] = []
    first_header: list[str] = []
    for sheet, rows in _sheets(path):
        header_at = header_row([cells for _n, cells, _w in rows], mapping)
        if header_at is None:
            if not first_header and rows:
                first_header = [str(c) for c in rows[0][1]]
            how.append(f"Sheet {sheet!r} skipped: no row names a code and an amount.")
            continue
        columns = columns_of([str(c) for c in rows[header_at][1]], mapping)
        how.append(f"Sheet {sheet!r}: header on row {header_at + 1}; {columns.describe()}.")
        for number, cells, written in rows[header_at + 1 :]:
            # A subtotal's formula needs no saved value: the row is skipped, not read.
            unsaved = (
                []
                if is_subtotal(cells, columns)
                else _unsaved(name, sheet, number, columns, cells, written)
            )
            problems += unsaved
            if not unsaved:
                body.append((Origin(name, row=number, sheet=sheet), columns, cells))
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
    posts, row_problems, skipped = posts_of(body, fmt)
    problems += row_problems
    if problems:
        raise ImportRefused(name, problems)
    how = [
        f"Read {name} (SHA-256 {digest[:16]}…) as xlsx: the values Excel saved.",
        *how,
        f"Figures written as text: {fmt.describe()}.",
        f"{len(posts)} line(s) imported; {len(skipped)} row(s) skipped.",
        *(f"Skipped {s}." for s in skipped),
    ]
    return estimate_of(name, digest, posts, how, project)
