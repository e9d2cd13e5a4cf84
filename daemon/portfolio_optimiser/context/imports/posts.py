"""One post model for every estimating source.

Decides what an imported line is (:class:`Post`: where it came from, its code, its NS 3451 and
NS 3420 codes where given, quantity, unit, unit price and sum), what a post that is context is
(:class:`TextPost`), what a problem of a file is and how it is told, and the estimate a file
becomes (:class:`Estimate`); the bundle it is written as is ``bundle``'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from portfolio_optimiser.context.validator import UNIT_PRICE_ROUNDING
from portfolio_optimiser.errors import UserError

__all__ = [
    "IMPORTER",
    "Estimate",
    "ImportRefused",
    "Measure",
    "Origin",
    "Post",
    "Problem",
    "TextPost",
    "estimate_of",
    "sum_problem",
]

IMPORTER: Final = "portfolio-optimiser import"


class ImportRefused(UserError, ValueError):
    """A file that cannot be imported: ``str(exc)`` lists every problem, each with its place."""

    def __init__(self, source: str, problems: Sequence[Problem]) -> None:
        self.source, self.problems = source, tuple(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(
            f"{source}: {len(self.problems)} problem(s), nothing imported; fix them and import "
            f"it again:\n{lines}"
        )


@dataclass(frozen=True)
class Origin:
    """Where a line came from: a file and its row (and sheet), or an XML post's GUID and path."""

    file: str
    row: int | None = None
    sheet: str | None = None
    guid: str | None = None
    path: str | None = None

    def __str__(self) -> str:
        where = [self.file]
        if self.sheet:
            where.append(f"sheet {self.sheet!r}")
        if self.row is not None:
            where.append(f"row {self.row}")
        if self.path:
            where.append(self.path)
        if self.guid:
            where.append(f"ID {self.guid}")
        return ", ".join(where)


@dataclass(frozen=True)
class Problem:
    """One problem of an input, at its place: ``str()`` is the sentence a planner reads."""

    origin: Origin
    field: str | None
    message: str

    def __str__(self) -> str:
        column = f", column {self.field}" if self.field else ""
        return f"{self.origin}{column}: {self.message}"


def sum_problem(
    origin: Origin,
    field: str | None,
    quantity: Decimal | None,
    unit_price: Decimal | None,
    amount: Decimal | None,
    *,
    sum_rounding: Decimal,
    show: Callable[[Decimal], str] = str,
) -> Problem | None:
    """The problem of a sum that quantity × unit price does not give beyond rounding, or None.

    A unit price rounded to øre is off by at most half an øre a unit; a sum by ``sum_rounding``
    (half an øre where the source writes øre, half a krone where it writes whole kroner)."""
    if amount is None or quantity is None or unit_price is None:
        return None
    product = quantity * unit_price
    if abs(product - amount) <= abs(quantity) * UNIT_PRICE_ROUNDING + sum_rounding:
        return None
    return Problem(
        origin,
        field,
        f"the sum {show(amount)} is not {show(quantity)} × {show(unit_price)} = "
        f"{show(product)}; correct the sum, the quantity or the unit price",
    )


@dataclass(frozen=True)
class Post:
    origin: Origin
    code: str
    """The line's code in the bundle: the account, or the post number."""
    title: str
    amount: Decimal
    quantity: Decimal | None = None
    unit: str | None = None
    unit_price: Decimal | None = None
    ns3451: str | None = None
    ns3420: str | None = None
    description: str | None = None
    post: bool = False
    """``code`` numbers a post of the estimate, not an account."""
    low: Decimal | None = None
    """A triple estimate, where the source gives one: its minimum, most likely and maximum."""
    likely: Decimal | None = None
    high: Decimal | None = None
    distribution: str | None = None
    """How the triple is drawn (pert, triangular, normal), where the source says."""
    correlation_group: str | None = None


@dataclass(frozen=True)
class TextPost:
    """A post that is context, not a line: a text post, a coded heading, or a main post whose
    value lies in its sub-posts. Kept in the bundle as description; never counted or compared."""

    origin: Origin
    code: str
    title: str
    text: str
    coded: bool = False


@dataclass(frozen=True)
class Measure:
    """One item of a kuttliste read with the estimate: it becomes a measure option."""

    origin: Origin
    id: str
    title: str
    codes: tuple[str, ...]
    saving: Decimal
    measure_type: str
    decide_by: str | None = None
    consequence: str | None = None
    description: str | None = None


@dataclass(frozen=True)
class Estimate:
    """An imported file: the project it estimates, its lines, and how it was read."""

    project_id: str
    name: str
    source: str
    """The file's name, as the planner knows it."""
    digest: str
    """SHA-256 of its bytes."""
    posts: tuple[Post, ...]
    category: str | None = None
    header: Mapping[str, Any] = field(default_factory=dict)
    """Further ``project.md`` fields from the side file (base estimate, P50, P85)."""
    how: tuple[str, ...] = ()
    """Sentences on how the file was read (format, dialect, skipped rows), for ``import.md``."""
    measures: tuple[Measure, ...] = ()
    """The kuttliste read with it (a sheet of the workbook, or a file beside it)."""
    options: tuple[Post, ...] = ()
    """Priced posts the file marks as options: kept apart from the base sum."""
    texts: tuple[TextPost, ...] = ()
    """Posts that are context (``TextPost``), in file order."""


def estimate_of(
    name: str,
    digest: str,
    posts: Sequence[Post],
    how: Sequence[str],
    project: Mapping[str, Any] | None,
    measures: Sequence[Measure] = (),
    *,
    options: Sequence[Post] = (),
    texts: Sequence[TextPost] = (),
) -> Estimate:
    """The estimate of a file read: its project from the side file, else from the file's name."""
    header = dict(project or {})
    title = Path(name).stem
    stem = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "project"
    return Estimate(
        project_id=str(header.pop("id", stem)),
        name=str(header.pop("name", title)),
        category=header.pop("category", None),
        source=name,
        digest=digest,
        posts=tuple(posts),
        header=header,
        how=tuple(how),
        measures=tuple(measures),
        options=tuple(options),
        texts=tuple(texts),
    )
