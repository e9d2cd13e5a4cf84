"""The columns of a cost breakdown (a csv file or a sheet): which row is the header and which
column holds which field.

Decides which column is which (headers in Norwegian and English, or a mapping file for headers it
does not know; a description column is the title where no title column stands beside it), where
the header is (a title block may stand above it), and which rows are subtotals by their text (an
empty code with a "Sum" text). What the rows below the header become is ``tabular_rows``'. Pure.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

__all__ = [
    "CODE",
    "FIELDS",
    "HEADER_ROWS",
    "Cell",
    "Columns",
    "cell_text",
    "columns_of",
    "field_text",
    "header_row",
    "is_subtotal",
    "normalise_header",
    "template_of",
]

Cell = str | Decimal
"""A cell as read: text (a csv's every cell, a sheet's text), or a number a sheet stored as one."""

FIELDS: Final = (
    "code",
    "ns3451",
    "ns3420",
    "title",
    "description",
    "quantity",
    "unit",
    "unit_price",
    "amount",
    "low",
    "likely",
    "high",
    "distribution",
    "correlation_group",
)
_SYNONYMS: Final[Mapping[str, tuple[str, ...]]] = {
    # Headers as ISY Calcus, Holte, G-prog and in-house templates write them, folded (lower case,
    # no spaces, dots or accents). The first column a field matches takes it.
    "code": (
        "konto",
        "kontonr",
        "kontonummer",
        "account",
        "code",
        "kode",
        "kostnadskode",
        "postnr",
        "postnummer",
        "post",
    ),
    "ns3451": ("ns3451", "bygningsdel", "bygningsdelskode", "buildingpart"),
    "ns3420": ("ns3420", "ns3420kode", "beskrivelseskode"),
    "title": (
        "emne",
        "tittel",
        "title",
        "navn",
        "name",
        "tekst",
        "text",
        "kontonavn",
        "kontotekst",
        "betegnelse",
        "benevnelse",
        "posttekst",
    ),
    "description": ("beskrivelse", "description", "merknad", "note", "notes"),
    "quantity": ("mengde", "antall", "quantity", "qty", "ant"),
    "unit": ("enhet", "enh", "unit", "ehet"),
    "unit_price": ("enhetspris", "pris", "ehpris", "enhpris", "unitprice", "price", "rate"),
    "amount": ("sum", "belop", "totalt", "total", "amount", "kostnad", "sumkr", "belopnok"),
    # A triple estimate's extremes and mode (PERT's): a P10 or P90 column is not one, and is
    # left to a mapping file that says what it is.
    "low": ("min", "minimum", "lav", "lavt", "laveste", "low", "minnok"),
    "likely": ("sannsynlig", "mestsannsynlig", "likely", "mostlikely", "modus", "likelynok"),
    "high": ("max", "maks", "maksimum", "hoy", "hoyt", "hoyeste", "high", "maxnok"),
    # How the triple is drawn, and the group it moves with: what the export writes them as.
    "distribution": ("fordeling", "distribution"),
    "correlation_group": ("korrelasjonsgruppe", "correlationgroup", "korrelasjon"),
}
_POST_NUMBERS: Final = ("postnr", "postnummer", "post")
"""Code headers that number the estimate's posts, not accounts: such a line is compared across
projects by its NS 3420 code only."""
_DESCRIBES: Final = ("beskrivelse", "description", "beskrivelsestekst")
"""Description headers that are a line's title where no title column stands beside them: a
breakdown with one text column often calls it its description. A remark column (``Merknad``)
is never a title."""
_SUBTOTAL: Final = re.compile(r"(?i)^\s*(sum|total|totalt|subtotal|delsum|sub-total)\b")
CODE: Final = re.compile(r"^\d{1,6}(?:\.\d{1,6})*$")
"""An NS 3451 building part (2, 21, 213), an NS 3453 / Prosesskode account (02.3) or a post
number (01.12.1, 03.36.1204)."""


def normalise_header(text: str) -> str:
    folded = unicodedata.normalize("NFKD", text.replace("ø", "o").replace("Ø", "o"))
    plain = "".join(ch for ch in folded if not unicodedata.combining(ch)).lower()
    return re.sub(r"[^a-z0-9]", "", plain.replace("æ", "ae").replace("å", "a"))


@dataclass(frozen=True)
class Columns:
    """Which column (0-based) holds each field; ``headers`` as the file wrote them."""

    index: Mapping[str, int]
    headers: tuple[str, ...]

    @property
    def posts(self) -> bool:
        """The code column numbers posts (``Postnr``), not accounts."""
        i = self.index.get("code")
        return i is not None and normalise_header(self.headers[i]) in _POST_NUMBERS

    def describe(self) -> str:
        return ", ".join(f"{self.headers[i]!r} → {name}" for name, i in self.index.items())


def columns_of(headers: Sequence[str], mapping: Mapping[str, str] | None = None) -> Columns:
    """Each field's column: the mapping file's word first (its keys are headers as written),
    then the synonyms."""
    found: dict[str, int] = {}
    given = {normalise_header(k): v for k, v in (mapping or {}).items()}
    for i, header in enumerate(headers):
        key = normalise_header(header)
        name = given.get(key) or next((f for f, words in _SYNONYMS.items() if key in words), None)
        if name in FIELDS and name not in found:
            found[name] = i
    if "code" not in found and "ns3451" in found:
        found["code"] = found["ns3451"]  # an account-by-building-part breakdown
    described = found.get("description")
    if (
        "title" not in found
        and described is not None
        and normalise_header(headers[described]) in _DESCRIBES
        and normalise_header(headers[described]) not in given  # a mapping file says what it is
    ):
        found["title"] = found.pop("description")
    return Columns(found, tuple(headers))


HEADER_ROWS: Final = 20
"""The header is looked for in this many first rows (a title block may stand above it)."""


def header_row(rows: Sequence[Sequence[Cell]], mapping: Mapping[str, str] | None) -> int | None:
    """The first of the first rows that names a code and an amount column, or None; of a header
    over two rows (merged group titles above the column names), the row naming more columns."""
    fields = [set(columns_of([str(c) for c in row], mapping).index) for row in rows[:HEADER_ROWS]]
    at = next((i for i, names in enumerate(fields) if {"code", "amount"} <= names), None)
    if at is not None and at + 1 < len(fields) and fields[at + 1] > fields[at]:
        return at + 1
    return at


def template_of(headers: Sequence[str]) -> str:
    """The mapping file a planner fills in when a header is not recognised (TOML)."""
    lines = [
        "# Which of your columns is which. Write one of: " + ", ".join(FIELDS) + ",",
        "# or leave a column out. code and amount are needed; the others when the file has them.",
        "[columns]",
    ]
    for header in headers:
        key = header.replace("\\", "\\\\").replace('"', '\\"')
        known = columns_of([header]).index
        guess = next(iter(known), "")
        lines.append(f'"{key}" = "{guess}"' + ("" if guess else "  # fill in or delete"))
    return "\n".join(lines) + "\n"


def field_text(row: Sequence[Cell], columns: Columns, name: str) -> str:
    """The row's cell of field ``name`` as text ("" where the row has no such cell)."""
    i = columns.index.get(name)
    return cell_text(row[i]) if i is not None and i < len(row) else ""


def cell_text(cell: Cell) -> str:
    """A cell as text: a number as its exact decimal, without an exponent."""
    return cell.strip() if isinstance(cell, str) else f"{cell.normalize():f}"


def is_subtotal(row: Sequence[Cell], columns: Columns, texts: Sequence[str] | None = None) -> bool:
    """A row with no code and a "Sum" (Total, Delsum…) text: a subtotal, never a line.
    ``texts``: the row's cells as text, where the caller has them already."""
    if field_text(row, columns, "code"):
        return False
    if _SUBTOTAL.match(field_text(row, columns, "title")):
        return True
    return bool(_SUBTOTAL.match(" ".join(texts if texts is not None else map(cell_text, row))))
