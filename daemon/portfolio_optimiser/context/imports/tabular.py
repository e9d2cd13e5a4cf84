"""Rows of a cost breakdown (a csv file, later a sheet) read into posts, every problem at once.

Decides which column is which (headers in Norwegian and English, or a mapping file for headers it
does not know), which rows are lines and which are subtotals (an empty code with a "Sum" text, or
an account whose sub-accounts add up to it), and what is wrong with a row: a non-number where a
number belongs, a sum that quantity × unit price does not give, a quantity without a unit, an
unknown code, a code twice. Pure: rows in, posts or problems out.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from .numbers import NumberFormat, NumberRefused, parse_number
from .posts import Origin, Post, Problem, sum_problem

__all__ = [
    "FIELDS",
    "HEADER_ROWS",
    "Cell",
    "Columns",
    "cell_text",
    "columns_of",
    "header_row",
    "is_subtotal",
    "normalise_header",
    "posts_of",
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
    "title": ("emne", "tittel", "title", "navn", "name", "tekst", "text", "kontonavn"),
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
}
_POST_NUMBERS: Final = ("postnr", "postnummer", "post")
"""Code headers that number the estimate's posts, not accounts: such a line is compared across
projects by its NS 3420 code only."""
_SUBTOTAL: Final = re.compile(r"(?i)^\s*(sum|total|totalt|subtotal|delsum|sub-total)\b")
_CODE: Final = re.compile(r"^\d{1,6}(?:\.\d{1,6})*$")
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


def _cell(row: Sequence[Cell], columns: Columns, name: str) -> str:
    i = columns.index.get(name)
    return cell_text(row[i]) if i is not None and i < len(row) else ""


def cell_text(cell: Cell) -> str:
    """A cell as text: a number as its exact decimal, without an exponent."""
    return cell.strip() if isinstance(cell, str) else f"{cell.normalize():f}"


def is_subtotal(row: Sequence[Cell], columns: Columns) -> bool:
    """A row with no code and a "Sum" (Total, Delsum…) text: a subtotal, never a line."""
    texts = [cell_text(cell) for cell in row]
    title = _cell(row, columns, "title")
    return not _cell(row, columns, "code") and bool(
        _SUBTOTAL.match(title) or _SUBTOTAL.match(" ".join(texts))
    )


def posts_of(
    rows: Sequence[tuple[Origin, Columns, Sequence[Cell]]], fmt: NumberFormat
) -> tuple[list[Post], list[Problem], list[str]]:
    """The rows' posts (each row read by its own sheet's columns), every problem, and what was
    skipped (for the import report). Codes are one namespace across sheets."""
    posts: list[Post] = []
    problems: list[Problem] = []
    skipped: list[str] = []
    for origin, columns, row in rows:
        texts = [cell_text(cell) for cell in row]
        if not any(texts):
            continue
        if is_subtotal(row, columns):
            title = _cell(row, columns, "title")
            skipped.append(f"{origin}: a subtotal ({title or ' '.join(texts).strip()})")
            continue
        post = _post(origin, row, columns, fmt, problems)
        if post is not None:
            posts.append(post)
    return _without_subtotals(posts, problems, skipped), problems, skipped


def _figure(
    origin: Origin,
    row: Sequence[Cell],
    columns: Columns,
    name: str,
    fmt: NumberFormat,
    problems: list[Problem],
) -> Decimal | None:
    i = columns.index.get(name)
    cell = row[i] if i is not None and i < len(row) else ""
    if isinstance(cell, Decimal):
        return cell  # a number the sheet stored as one
    text = _cell(row, columns, name)
    if not text:
        return None
    try:
        return parse_number(text, fmt)
    except NumberRefused as exc:
        problems.append(
            Problem(origin, columns.headers[columns.index[name]], f"{exc}; write a plain number")
        )
        return None


def _post(
    origin: Origin,
    row: Sequence[Cell],
    columns: Columns,
    fmt: NumberFormat,
    problems: list[Problem],
) -> Post | None:
    before = len(problems)
    code = _cell(row, columns, "code")
    header = columns.headers

    def where(name: str) -> str | None:
        return header[columns.index[name]] if name in columns.index else None

    if not code:
        problems.append(Problem(origin, where("code"), "no code; write the account or post number"))
    elif not _CODE.fullmatch(code):
        problems.append(
            Problem(
                origin,
                where("code"),
                f"{code!r} is not an NS 3451 or NS 3453 code or a post number (e.g. 21, 02.3 or 01.12.1)",
            )
        )
    amount = _figure(origin, row, columns, "amount", fmt, problems)
    quantity = _figure(origin, row, columns, "quantity", fmt, problems)
    unit_price = _figure(origin, row, columns, "unit_price", fmt, problems)
    unit = _cell(row, columns, "unit") or None
    if amount is None and quantity is not None and unit_price is not None:
        amount = quantity * unit_price
    if amount is None and len(problems) == before:
        problems.append(Problem(origin, where("amount"), "no sum; write the line's amount"))
    if quantity is not None and unit is None:
        problems.append(
            Problem(
                origin,
                where("unit"),
                f"a quantity ({fmt.show(quantity)}) without a unit; write it (m2, m, stk…)",
            )
        )
    low, likely, high = (
        _figure(origin, row, columns, name, fmt, problems) for name in ("low", "likely", "high")
    )
    problems += _triple_problems(origin, where, low, likely, high, amount)
    # Spreadsheets often show sums in whole kroner.
    wrong = sum_problem(
        origin,
        where("amount"),
        quantity,
        unit_price,
        amount,
        sum_rounding=Decimal("0.5"),
        show=fmt.show,
    )
    if wrong is not None:
        problems.append(wrong)
    if len(problems) > before or amount is None:
        return None
    return Post(
        origin=origin,
        code=code,
        title=_cell(row, columns, "title") or code,
        amount=amount,
        quantity=quantity,
        unit=unit,
        unit_price=unit_price,
        ns3451=_cell(row, columns, "ns3451") or None,
        ns3420=_cell(row, columns, "ns3420") or None,
        description=_cell(row, columns, "description") or None,
        post=columns.posts,
        low=low,
        likely=likely,
        high=high,
    )


def _triple_problems(
    origin: Origin,
    where: Callable[[str], str | None],
    low: Decimal | None,
    likely: Decimal | None,
    high: Decimal | None,
    amount: Decimal | None,
) -> list[Problem]:
    """A triple estimate's problems: one extreme without the other, or figures out of order."""
    if low is None and high is None:
        if likely is None:
            return []
        return [Problem(origin, where("likely"), "a most likely figure without min and max")]
    if low is None or high is None:
        given, missing = ("high", "min") if low is None else ("low", "max")
        return [
            Problem(
                origin,
                where(given),
                f"a triple estimate without its {missing}; write both or neither",
            )
        ]
    mode = likely if likely is not None else amount
    if mode is not None and not low <= mode <= high:
        said = "most likely figure" if likely is not None else "sum (no most likely figure given)"
        return [
            Problem(
                origin,
                where("likely" if likely is not None else "amount"),
                f"the {said} {mode} is outside min {low} to max {high}; correct the range",
            )
        ]
    return []


def _without_subtotals(
    posts: list[Post], problems: list[Problem], skipped: list[str]
) -> list[Post]:
    """An account whose sub-accounts (21, 22… under 2) are lines too is their subtotal when they
    add up to it, and a problem when they do not; a code twice is a problem."""
    seen: dict[str, Post] = {}
    for post in posts:
        if post.code in seen:
            problems.append(
                Problem(
                    post.origin,
                    None,
                    f"code {post.code} again (first at {seen[post.code].origin}); merge the two lines or give them their own codes",
                )
            )
        seen.setdefault(post.code, post)
    direct: dict[str, list[Post]] = {}
    for code, post in seen.items():
        parent = next((p for p in _parents(code) if p in seen), None)
        if parent is not None:
            direct.setdefault(parent, []).append(post)
    kept = []
    for post in posts:
        under = direct.get(post.code, [])
        if not under:
            kept.append(post)
            continue
        total = sum((c.amount for c in under), Decimal(0))
        if abs(total - post.amount) <= Decimal("0.5") * len(under):
            skipped.append(
                f"{post.origin}: a subtotal of {post.code} ({len(under)} lines under it)"
            )
        else:
            problems.append(
                Problem(
                    post.origin,
                    None,
                    f"account {post.code} says {post.amount} but the {len(under)} line(s) "
                    f"under it add up to {total}; correct it, or delete the subtotal row",
                )
            )
    return kept


def _parents(code: str) -> list[str]:
    """The codes a line may sit under, nearest first: 01.12 and 01 for 01.12.1, 21 and 2 for
    213."""
    if "." in code:
        parts = code.split(".")
        return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]
    return [code[:i] for i in range(len(code) - 1, 0, -1)]
