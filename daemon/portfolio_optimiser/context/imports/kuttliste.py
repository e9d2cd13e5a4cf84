"""A kuttliste (the planner's list of known reductions) in a spreadsheet: a sheet of the workbook,
or a second file beside the estimate, read into measures.

Decides which sheet or file is one (its name says so, or its header names a measure and a
saving), what each column holds (Norwegian and English headers), and what a row becomes: a
measure option with its id (the row's number, else ``k-<row>``), the lines it touches (codes of
the estimate, comma-separated), its saving, and its type, decision point and consequence where
given. A measure touching no line of the estimate is a problem, named with its row.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Final

from .numbers import NumberFormat, NumberRefused, detect_format, parse_number
from .posts import ImportRefused, Measure, Origin, Post, Problem
from .tabular import HEADER_ROWS, Cell, cell_text, normalise_header

__all__ = [
    "NOT_A_KUTTLISTE",
    "UNTYPED",
    "KuttlisteRead",
    "is_kuttliste_name",
    "kuttliste_beside",
    "kuttliste_header",
    "measures_of",
    "read_kuttliste",
]

NOT_A_KUTTLISTE: Final = (
    "is named as a kuttliste but no row names a measure (Tiltak), the lines it touches (Konto) "
    "and its saving (Besparelse); add those headers"
)
UNTYPED: Final = "unspecified"
"""The type of a measure whose kuttliste has no type column: learning groups it with its kind."""
_NAMES: Final = frozenset(
    {
        "kuttliste",
        "kutt",
        "kuttforslag",
        "reduksjonsliste",
        "reduksjoner",
        "tiltaksliste",
        "cutlist",
    }
)
_SYNONYMS: Final = {
    "id": ("nr", "id", "tiltaksnr", "tiltaknr", "nummer", "no", "lopenr"),
    "title": ("tiltak", "kuttforslag", "measure", "tittel", "title", "navn", "name"),
    "codes": ("konto", "kontoer", "postnr", "poster", "bygningsdel", "kode", "koder", "codes",
              "account", "accounts", "affectedcodes"),
    "saving": ("besparelse", "reduksjon", "kutt", "saving", "savings", "belop", "verdi",
               "estimertbesparelse", "kuttbelop"),
    "type": ("type", "tiltakstype", "measuretype", "kategori"),
    "decide_by": ("frist", "beslutningspunkt", "senestebeslutning", "beslutningstidspunkt",
                  "decideby", "deadline", "latestdecisionpoint"),
    "consequence": ("konsekvens", "konsekvenser", "consequence", "consequences"),
    "description": ("beskrivelse", "description", "merknad", "note", "notes"),
}  # fmt: skip
_ID: Final = re.compile(r"[^a-z0-9]+")
_DISTINCT: Final = frozenset(
    {"tiltak", "kuttforslag", "measure", "tiltaksnr", "besparelse", "reduksjon", "kutt",
     "saving", "savings", "kuttbelop", "estimertbesparelse"}
)  # fmt: skip
"""Headers only a kuttliste has: a kalkyle's "Konto | Navn | Beløp" is not one."""


def is_kuttliste_name(name: str) -> bool:
    """A sheet or file named as a kuttliste (``Kuttliste``, ``nordvik-kuttliste.csv``)."""
    key = normalise_header(Path(name).stem if "." in name else name)
    return key in _NAMES or any(key.endswith(n) for n in ("kuttliste", "cutlist"))


def kuttliste_beside(path: Path) -> Path | None:
    """The kuttliste file beside an estimate: its own (``<name>-kuttliste``), else the one file
    named as a kuttliste (any case: ``Kuttliste.xlsx``); refused when that is not one file."""
    found = sorted(
        p
        for p in path.parent.iterdir()
        if p.is_file()
        and p != path
        and p.suffix.lower() in (".csv", ".xlsx")
        and is_kuttliste_name(p.name)
    )
    own = [
        p for p in found if normalise_header(p.stem) == normalise_header(f"{path.stem}kuttliste")
    ]
    chosen = own or found
    if len(chosen) > 1:
        names = ", ".join(p.name for p in chosen)
        raise ImportRefused(
            path.name,
            [
                Problem(
                    Origin(path.name),
                    None,
                    f"has {len(chosen)} kuttliste files beside it ({names}); keep one, or name "
                    f"its own {path.stem}-kuttliste{chosen[0].suffix}",
                )
            ],
        )
    return chosen[0] if chosen else None


def kuttliste_header(
    rows: Sequence[Sequence[Cell]], *, named: bool = False
) -> tuple[int, dict[str, int]] | None:
    """The header row of a kuttliste (a measure, its codes and its saving named) and its columns;
    unless the sheet or file is ``named`` as one, a header only a kuttliste has is needed."""
    for at, row in enumerate(rows[:HEADER_ROWS]):
        found: dict[str, int] = {}
        keys = [normalise_header(str(cell)) for cell in row]
        if not named and not _DISTINCT & set(keys):
            continue
        for i, key in enumerate(keys):
            field = next((f for f, words in _SYNONYMS.items() if key in words), None)
            if field is not None and field not in found:
                found[field] = i
        if {"title", "codes", "saving"} <= set(found):
            return at, found
    return None


def _text(row: Sequence[Cell], columns: dict[str, int], field: str) -> str:
    i = columns.get(field)
    return cell_text(row[i]) if i is not None and i < len(row) else ""


def measures_of(
    rows: Sequence[tuple[Origin, Sequence[Cell]]],
    columns: dict[str, int],
    headers: Sequence[Cell],
    fmt: NumberFormat,
    posts: Sequence[Post],
) -> tuple[list[Measure], list[Problem]]:
    """The kuttliste's measures and every problem, each at its row."""
    codes = {p.code for p in posts}
    measures: list[Measure] = []
    problems: list[Problem] = []
    ids: dict[str, Origin] = {}

    def column(field: str) -> str:
        return str(headers[columns[field]])

    for origin, row in rows:
        title = _text(row, columns, "title")
        if not title and not _text(row, columns, "saving"):
            continue  # a blank row, or a note under the list
        before = len(problems)
        touched = tuple(c for c in re.split(r"[,;\s]+", _text(row, columns, "codes")) if c)
        unknown = [c for c in touched if c not in codes]
        if not touched:
            problems.append(
                Problem(origin, column("codes"), "names no line; write the codes it touches")
            )
        elif unknown:
            problems.append(
                Problem(
                    origin,
                    column("codes"),
                    f"{', '.join(unknown)} is not a line of the estimate; write codes the estimate has",
                )
            )
        i = columns["saving"]
        cell = row[i] if i < len(row) else ""
        saving: Decimal | None = cell if isinstance(cell, Decimal) else None
        if saving is None and not _text(row, columns, "saving"):
            problems.append(Problem(origin, column("saving"), "no saving; write what it saves"))
        elif saving is None:
            try:
                saving = parse_number(_text(row, columns, "saving"), fmt)
            except NumberRefused as exc:
                problems.append(Problem(origin, column("saving"), f"{exc}; write a plain number"))
        raw_id = _text(row, columns, "id")
        ident = _ID.sub("-", f"k-{raw_id}".lower()).strip("-") if raw_id else f"k-row-{origin.row}"
        if ident in ids:
            problems.append(
                Problem(origin, column("id") if "id" in columns else None,
                        f"measure {raw_id} again (first at {ids[ident]}); give each its own number")
            )  # fmt: skip
        ids.setdefault(ident, origin)
        if len(problems) > before or saving is None:
            continue
        measures.append(
            Measure(
                origin=origin,
                id=ident,
                title=title or ident,
                codes=touched,
                saving=saving,
                measure_type=_text(row, columns, "type") or UNTYPED,
                decide_by=_text(row, columns, "decide_by") or None,
                consequence=_text(row, columns, "consequence") or None,
                description=_text(row, columns, "description") or None,
            )
        )
    return measures, problems


@dataclass(frozen=True)
class KuttlisteRead:
    header_at: int
    """0-based row of its header."""
    measures: list[Measure]
    problems: list[Problem]


def read_kuttliste(
    rows: Sequence[Sequence[Cell]],
    where: Callable[[int], Origin],
    posts: Sequence[Post],
    *,
    named: bool,
    comma_by_default: bool,
) -> KuttlisteRead | None:
    """A sheet's or a file's rows as a kuttliste (``where`` gives a 1-based row's origin), or
    None when no row is its header. Figures written as text are read in the format its savings
    column shows."""
    found = kuttliste_header(rows, named=named)
    if found is None:
        return None
    at, columns = found
    body = [(where(n), row) for n, row in enumerate(rows[at + 1 :], start=at + 2)]
    saving = columns["saving"]
    texts = [r[saving] for _o, r in body if saving < len(r) and isinstance(r[saving], str)]
    fmt = detect_format(
        (str(t) for t in texts if str(t).strip()), comma_by_default=comma_by_default
    )
    measures, problems = measures_of(body, columns, rows[at], fmt, posts)
    return KuttlisteRead(at, measures, problems)
