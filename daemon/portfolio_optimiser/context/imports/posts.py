"""One post model for every estimating source, and the bundle it becomes.

Decides what an imported line is (:class:`Post`: where it came from, its code, its NS 3451 and
NS 3420 codes where given, quantity, unit, unit price and sum) and the concept files an import
becomes: ``project.md``, ``index.md``, and the lines as tables, one ``cost/<part>.md`` per NS 3451
building part (a ``cost-lines`` concept, :mod:`portfolio_optimiser.context.cost_table`), each line
naming its place in the source (``imported_from``), each file marked as generated from it
(``generated: true`` with an ``ingest_manifest`` naming the file and its digest); and an
``import.md`` saying how the file was read. Pure: it returns texts, it never writes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from portfolio_optimiser.context.cost_table import table_row
from portfolio_optimiser.context.ns3451 import ns3451_name
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
    "bundle_files_of",
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


def _number(value: Decimal) -> int | float:
    """A figure as the IR takes it: whole kroner as an integer, else the exact decimal."""
    return int(value) if value == value.to_integral_value() else float(value)


def _slug(code: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", code).strip("_") or "line"


def _concept(frontmatter: Mapping[str, Any], body: str) -> str:
    # Each value in JSON, which YAML 1.2 reads as it is: ten times faster than a YAML emitter
    # (0.65 ms a file, 13 s for a tender of 20 000 posts), and every string safely quoted.
    header = "".join(
        f"{key}: {json.dumps(value, ensure_ascii=False)}\n" for key, value in frontmatter.items()
    )
    return f"---\n{header}---\n\n{body.strip()}\n"


def estimate_of(
    name: str,
    digest: str,
    posts: Sequence[Post],
    how: Sequence[str],
    project: Mapping[str, Any] | None,
    measures: Sequence[Measure] = (),
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
    )


MAX_ROWS_PER_FILE: Final = 500
"""A building part's lines per concept file: a table a planner can still scroll, and a file far
below a concept's size bound even with every post's description beside it."""
_MAX_FILE_CHARS: Final = 1_000_000
_COLUMNS: Final = (
    ("code", "code"),
    ("title", "title"),
    ("quantity", "quantity"),
    ("unit", "unit"),
    ("unit_price", "unit_price_nok"),
    ("amount", "amount_nok"),
    ("ns3451", "ns3451"),
    ("ns3420", "ns3420"),
    ("low", "min_nok"),
    ("likely", "likely_nok"),
    ("high", "max_nok"),
)


def _figure(value: Decimal | None) -> str:
    """A figure exactly as the source gives it, as the IR reads it: 250.5, 1000, never 1E+3."""
    return "" if value is None else f"{value.normalize():f}"


def _part(post: Post) -> str:
    """The table a line goes into: a post's building part (else its post number's chapter); an
    account's part one level up (21 and 23 under 2; 231 and 236 under 23)."""
    if post.post:
        part = re.match(r"\d{1,2}", post.ns3451.strip()) if post.ns3451 else None
        return part.group(0) if part else post.code.split(".")[0]
    code = post.code.split(".")[0]
    return (
        code[: min(2, max(1, len(code) - 1))] if code.isdigit() and "." not in post.code else code
    )


def _chunks(posts: Sequence[Post]) -> list[list[Post]]:
    chunks: list[list[Post]] = [[]]
    size = 0
    for post in posts:
        grows = 200 + len(post.title) + len(post.description or "")
        if chunks[-1] and (len(chunks[-1]) >= MAX_ROWS_PER_FILE or size + grows > _MAX_FILE_CHARS):
            chunks.append([])
            size = 0
        chunks[-1].append(post)
        size += grows
    return chunks


def _table_title(part: str, n: int, posts: Sequence[Post]) -> str:
    # A post number's first level is its chapter, not a building part: named only as itself.
    named = ns3451_name(part) if any(p.ns3451 or not p.post for p in posts) else None
    return (f"{part} {named}" if named else part) + (f" ({n})" if n > 1 else "")


def _cost_table(title: str, posts: Sequence[Post], manifest: Mapping[str, Any]) -> str:
    frontmatter: dict[str, Any] = {"type": "cost-lines", "title": title}
    columns = [
        (a, f) for a, f in _COLUMNS if a == "title" or any(getattr(p, a) is not None for p in posts)
    ]
    mixed = len({p.post for p in posts}) > 1
    if posts[0].post and not mixed:
        frontmatter["post"] = True
    frontmatter |= {"generated": True, "ingest_manifest": dict(manifest)}
    header = [f for _a, f in columns] + (["post"] if mixed else []) + ["imported_from"]
    rows = [table_row(header), "|" + "---|" * len(header)]
    for post in posts:
        cells: list[Any] = [
            _figure(v) if isinstance(v := getattr(post, a), Decimal) else v for a, _f in columns
        ]
        rows.append(table_row([*cells, *([post.post] if mixed else []), str(post.origin)]))
    described = [
        f"## {post.code} {post.title}\n\n{post.description.strip()}"
        for post in posts
        if post.description and post.description.strip()
    ]
    return _concept(frontmatter, "\n\n".join([f"# {title}", "\n".join(rows), *described]))


def _measure_option(measure: Measure, manifest: Mapping[str, Any]) -> str:
    option: dict[str, Any] = {
        "type": "measure-option",
        "id": measure.id,
        "title": measure.title,
        "measure_type": measure.measure_type,
        "affected_codes": list(measure.codes),
        "estimated_saving_nok": _number(measure.saving),
    }
    if measure.decide_by:
        option["latest_decision_point"] = measure.decide_by
    if measure.consequence:
        option["consequence"] = measure.consequence
    option |= {"imported_from": str(measure.origin), "generated": True}
    option["ingest_manifest"] = dict(manifest)
    body = f"# {measure.id} {measure.title}\n\nFrom the kuttliste: {measure.origin}."
    if measure.description:
        body += f"\n\n{measure.description}"
    return _concept(option, body)


def bundle_files_of(estimate: Estimate) -> dict[str, str]:
    """The bundle an estimate becomes: bundle-relative path → text."""
    manifest = {"importer": IMPORTER, "source": estimate.source, "sha256": estimate.digest}
    parts: dict[str, list[Post]] = {}
    for post in estimate.posts:
        parts.setdefault(_part(post), []).append(post)
    files: dict[str, str] = {}
    links: list[str] = []
    for part, posts in parts.items():
        for n, chunk in enumerate(_chunks(posts), start=1):
            rel = f"cost/{_slug(part)}{f'-{n}' if n > 1 else ''}.md"
            tries = 1
            while rel in files:  # two parts that slug alike ("2" and "2 "): never one file
                tries += 1
                rel = f"cost/{_slug(part)}-{n}-{tries}.md"
            title = _table_title(part, n, chunk)
            files[rel] = _cost_table(title, chunk, manifest)
            links.append(f"* [{title}]({rel})")
    kuttliste: list[str] = []
    for measure in estimate.measures:
        rel = f"kuttliste/{measure.id}.md"
        files[rel] = _measure_option(measure, manifest)
        kuttliste.append(f"* [{measure.id} {measure.title}]({rel})")
    total = sum((p.amount for p in estimate.posts), Decimal(0))
    project: dict[str, Any] = {
        "type": "project",
        "id": estimate.project_id,
        "name": estimate.name,
        "currency": "NOK",
    }
    if estimate.category:
        project["category"] = estimate.category
    project |= {"base_estimate_nok": _number(total)} | dict(estimate.header)
    project |= {"generated": True, "ingest_manifest": manifest}
    files["project.md"] = _concept(
        project,
        f"# {estimate.name}\n\nImported from {estimate.source} ({len(estimate.posts)} lines).",
    )
    files["import.md"] = _concept(
        {"type": "import-report", "title": f"How {estimate.source} was read"},
        f"# How {estimate.source} was read\n\n"
        + "\n".join(f"* {sentence}" for sentence in estimate.how),
    )
    files["index.md"] = (
        f"# {estimate.name}\n\n* [Project](project.md)\n* [How the estimate was read](import.md)"
        "\n\n## Cost\n\n"
        + "\n".join(links)
        + ("\n\n## Kuttliste\n\n" + "\n".join(kuttliste) if kuttliste else "")
        + "\n"
    )
    return files
