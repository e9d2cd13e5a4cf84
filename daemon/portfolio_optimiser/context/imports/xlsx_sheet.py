"""What a workbook's values do not say, read from its sheets' XML as a stream: the rows a planner
hid, the formula cells Excel never computed (a formula without a saved value reads as an empty
cell, and an empty amount must not pass for a missing one), and each sheet's extent, which is
checked before the values are read into a grid of that size.

The values themselves come from python-calamine, twenty times faster than openpyxl's; this scan
reads only each row's attributes and each formula cell, and keeps one row in memory.
"""

from __future__ import annotations

import posixpath
import re
import zipfile
from dataclasses import dataclass, field
from typing import IO, Any, Final

from lxml import etree

__all__ = ["SheetFacts", "column_index", "column_letter", "sheet_facts"]

_MAIN: Final = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_REL: Final = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PKG: Final = "http://schemas.openxmlformats.org/package/2006/relationships"
_REF: Final = re.compile(r"^([A-Z]+)(\d+)$")
_ROW, _CELL, _F, _V = (f"{{{_MAIN}}}{t}" for t in ("row", "c", "f", "v"))
_BESIDE: Final = tuple(f"{{{_MAIN}}}{t}" for t in ("mergeCell", "hyperlink", "col"))


@dataclass
class SheetFacts:
    hidden_rows: list[int] = field(default_factory=list)
    """1-based numbers of the rows hidden in the sheet."""
    unsaved: dict[tuple[int, int], str] = field(default_factory=dict)
    """(row, 0-based column) → the formula of a cell that has no saved value."""
    rows: int = 0
    columns: int = 0
    """The sheet's extent: its last row and column that hold a cell."""

    @property
    def cells(self) -> int:
        return self.rows * self.columns


def column_index(letters: str) -> int:
    """``A`` → 0, ``AA`` → 26."""
    n = 0
    for char in letters:
        n = n * 26 + ord(char) - 64
    return n - 1


def column_letter(index: int) -> str:
    """0 → ``A``, 26 → ``AA``."""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(65 + rest) + letters
    return letters


def _parser() -> etree.XMLParser:
    return etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)


def _sheet_paths(book: zipfile.ZipFile) -> dict[str, str]:
    """Sheet name → its member in the zip, as the workbook's relationships name it."""
    workbook = etree.fromstring(book.read("xl/workbook.xml"), _parser())
    rels = etree.fromstring(book.read("xl/_rels/workbook.xml.rels"), _parser())
    targets = {r.get("Id"): r.get("Target", "") for r in rels.iter(f"{{{_PKG}}}Relationship")}
    found = {}
    for sheet in workbook.iter(f"{{{_MAIN}}}sheet"):
        target = targets.get(sheet.get(f"{{{_REL}}}id"), "")
        if target:
            path = target.lstrip("/") if target.startswith("/") else f"xl/{target}"
            found[sheet.get("name", "")] = posixpath.normpath(path)
    return found


def sheet_facts(book: zipfile.ZipFile) -> dict[str, SheetFacts]:
    """Each sheet's hidden rows, unsaved formulas and extent, by sheet name; raises
    ``ValueError`` for a sheet whose cell references are not references (a damaged workbook)."""
    facts: dict[str, SheetFacts] = {}
    for name, member in _sheet_paths(book).items():
        found = facts[name] = SheetFacts()
        try:
            stream = book.open(member)
        except KeyError:
            continue
        with stream:
            _scan(stream, found)
    return facts


def _scan(stream: IO[bytes], found: SheetFacts) -> None:
    number = 0
    # Rows, and the blocks beside them that can be long (merged cells, links), are each
    # dropped once read: one row is in memory at a time, whatever the sheet's size.
    for _event, element in etree.iterparse(
        stream, tag=(_ROW, *_BESIDE), resolve_entities=False, no_network=True, load_dtd=False
    ):
        if element.tag == _ROW:
            # A row or a cell may leave out its reference: then it is the next one.
            given = element.get("r")
            if given is not None and not given.isdigit():
                raise ValueError(f"row reference {given!r} is not a number")
            number = int(given) if given is not None else number + 1
            found.rows = max(found.rows, number)
            if element.get("hidden") in {"1", "true"}:
                found.hidden_rows.append(number)
            _cells(element, number, found)
        element.clear()
        while element.getprevious() is not None:
            del element.getparent()[0]


def _cells(row: Any, number: int, found: SheetFacts) -> None:
    column = -1
    for cell in row.iterchildren(_CELL):
        given = cell.get("r")
        if given is not None:
            ref = _REF.match(given)
            if ref is None:
                raise ValueError(f"cell reference {given!r} is not a reference")
            column = column_index(ref.group(1))
        else:
            column += 1
        found.columns = max(found.columns, column + 1)
        formula = cell.find(_F)
        if formula is None:
            continue
        value = cell.find(_V)
        if value is None or not (value.text or "").strip():
            found.unsaved[(number, column)] = formula.text or "(a shared formula)"
