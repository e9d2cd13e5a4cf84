"""The rows under a cost breakdown's header (a csv file's, streamed, or a sheet's) read into
posts, every problem at once.

Decides what each row is: a line; a subtotal (an empty code with a "Sum" text, or an account
whose sub-accounts add up to it); context (a heading: a code, or a code and a text, with no figure
at all; a note: a text with neither a code nor a figure, "Alle priser eks. mva."), which the
import report names; or a problem: a non-number where a number belongs, a sum that quantity ×
unit price does not give, a figure with no sum, a quantity without a unit, a unit the vocabulary
does not know, an unknown code, a code twice. A subtotal is never named for what its own lines'
problems already say. Pure: rows in (consumed once, never held), posts or problems out; what is
held is the posts, bounded by what a bundle may hold, and at most ``MAX_PROBLEMS`` problems.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from typing import Final

from portfolio_optimiser.context.ir import MAX_COST_LINES
from portfolio_optimiser.context.vocabulary import unknown_unit

from .numbers import NumberFormat, NumberRefused, parse_number
from .posts import Origin, Post, Problem, sum_problem
from .tabular import CODE, Cell, Columns, cell_text, field_text, is_subtotal
from .tabular_read import MAX_PROBLEMS, Problems, RowsRead, spaced

__all__ = ["MAX_LINES", "MAX_PROBLEMS", "RowsRead", "posts_of"]

MAX_LINES: Final = MAX_COST_LINES
"""The lines one bundle may hold (the IR refuses more): a file of more is refused at import."""
_FIGURES: Final = ("amount", "quantity", "unit_price", "low", "likely", "high", "unit")
"""A row with any of these is meant as a line (or is wrong as one); a row with none is context."""


def _place(origin: Origin) -> str:
    """A row's place within its file, for a sentence that names the file once."""
    sheet = f"sheet {origin.sheet!r}, " if origin.sheet else ""
    return f"{sheet}row {origin.row}"


def _said(text: str) -> str:
    return text if len(text) <= 60 else text[:59].rstrip() + "…"


def _context(
    row: Sequence[Cell], columns: Columns, texts: Sequence[str]
) -> tuple[bool, str] | None:
    """(True, what) for a heading, (False, what) for a note, None for a row meant as a line.
    A row with a code and a figure but no sum is a line missing its sum, never a heading."""
    if any(field_text(row, columns, name) for name in _FIGURES):
        return None
    code = field_text(row, columns, "code")
    if code and CODE.fullmatch(code):
        title = field_text(row, columns, "title") or field_text(row, columns, "description")
        return True, _said(f"{code} {title}".strip())
    return False, _said(" ".join(t for t in texts if t))


def posts_of(
    rows: Iterable[tuple[Origin, Columns, Sequence[Cell]]],
    fmt: NumberFormat,
    *,
    units: Sequence[str] | None = None,
) -> RowsRead:
    """The rows' posts (each row read by its own sheet's columns), every problem, and what was
    skipped or taken as context. Codes are one namespace across sheets. ``units``: the config's
    own units beside the vocabulary; None: units are not checked (a caller without the config)."""
    read = RowsRead()
    problems = Problems()
    failed: set[str] = set()
    """Codes of rows with a problem: a subtotal over one would only repeat it, wrongly added."""
    last: Origin | None = None
    stopped = False
    for origin, columns, row in rows:
        last = origin
        texts = [cell_text(cell) for cell in row]
        if not any(texts):
            continue
        if is_subtotal(row, columns, texts):
            title = field_text(row, columns, "title")
            read.skipped.add(f"{origin}: a subtotal ({title or ' '.join(texts).strip()})")
            continue
        context = _context(row, columns, texts)
        if context is not None:
            heading, said = context
            (read.headings if heading else read.notes).add(f"{_place(origin)} ({said})")
            continue
        post, found = _post(origin, row, columns, fmt, units)
        if found:
            problems.add(found)
            code = field_text(row, columns, "code")
            if code and len(failed) < MAX_PROBLEMS:
                failed.add(code)
        elif post is not None:
            read.posts.append(post)
            # Room for the account subtotals among them, which are found only at the end.
            if len(read.posts) > 2 * MAX_LINES:
                problems.add([_too_many(origin, None)])
                stopped = True
                break
    if not stopped:
        read.posts = _without_subtotals(read, problems, failed, fmt.show)
        if len(read.posts) > MAX_LINES and last is not None:
            problems.add([_too_many(Origin(last.file), len(read.posts))])
    read.problems = problems.listed()
    return read


def _too_many(origin: Origin, count: int | None) -> Problem:
    split = "split the estimate into several projects, one file each"
    if count is None:  # reading stopped here
        return Problem(
            origin,
            None,
            f"more than {spaced(MAX_LINES)} cost lines, more than a bundle holds (not read further); "
            + split,
        )
    return Problem(
        origin,
        None,
        f"{spaced(count)} cost lines, more than the {spaced(MAX_LINES)} a bundle holds; {split}",
    )


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
    text = field_text(row, columns, name)
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
    units: Sequence[str] | None,
) -> tuple[Post | None, list[Problem]]:
    """The row's post, or its problems."""
    problems: list[Problem] = []
    code = field_text(row, columns, "code")
    header = columns.headers

    def where(name: str) -> str | None:
        return header[columns.index[name]] if name in columns.index else None

    if not code:
        problems.append(Problem(origin, where("code"), "no code; write the account or post number"))
    elif not CODE.fullmatch(code):
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
    unit = field_text(row, columns, "unit") or None
    if amount is None and quantity is not None and unit_price is not None:
        amount = quantity * unit_price
    if amount is None and not problems:
        problems.append(Problem(origin, where("amount"), "no sum; write the line's amount"))
    if quantity is not None and unit is None:
        problems.append(
            Problem(
                origin,
                where("unit"),
                f"a quantity ({fmt.show(quantity)}) without a unit; write it (m2, m, stk…)",
            )
        )
    unknown = unknown_unit(unit, units) if unit is not None and units is not None else None
    if unknown is not None:
        problems.append(Problem(origin, where("unit"), unknown))
    low, likely, high = (
        _figure(origin, row, columns, name, fmt, problems) for name in ("low", "likely", "high")
    )
    problems += _triple_problems(origin, where, low, likely, high, amount, fmt.show)
    problems += _drawn_problems(
        origin, where, field_text(row, columns, "distribution"), low, likely or amount, high
    )
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
    if problems or amount is None:
        return None, problems
    title = field_text(row, columns, "title")
    description = field_text(row, columns, "description") or None
    return Post(
        origin=origin,
        code=code,
        # A line with no title of its own is named by its description's first line, else its code.
        title=title or (description.splitlines()[0].strip() if description else "") or code,
        amount=amount,
        quantity=quantity,
        unit=unit,
        unit_price=unit_price,
        ns3451=field_text(row, columns, "ns3451") or None,
        ns3420=field_text(row, columns, "ns3420") or None,
        description=description,
        post=columns.posts,
        low=low,
        likely=likely,
        high=high,
        distribution=field_text(row, columns, "distribution").lower() or None,
        correlation_group=field_text(row, columns, "correlation_group") or None,
    ), []


_DRAWN: Final = ("pert", "triangular", "normal")


def _drawn_problems(
    origin: Origin,
    where: Callable[[str], str | None],
    drawn: str,
    low: Decimal | None,
    mode: Decimal | None,
    high: Decimal | None,
) -> list[Problem]:
    """A distribution the frame does not draw, or a normal one around a skewed triple: said at
    the import, not by the run that would refuse the bundle."""
    if not drawn:
        return []
    if drawn.lower() not in _DRAWN:
        return [
            Problem(origin, where("distribution"), f"{drawn!r} is not pert, triangular or normal")
        ]
    if drawn.lower() == "normal" and None not in (low, mode, high):
        assert low is not None and mode is not None and high is not None
        if abs((mode - low) - (high - mode)) > Decimal("0.5"):
            return [
                Problem(
                    origin,
                    where("distribution"),
                    "a normal distribution is symmetric: its most likely figure must lie midway "
                    "from min to max (its P10 and P90); write pert or triangular for a skewed one",
                )
            ]
    return []


def _triple_problems(
    origin: Origin,
    where: Callable[[str], str | None],
    low: Decimal | None,
    likely: Decimal | None,
    high: Decimal | None,
    amount: Decimal | None,
    show: Callable[[Decimal], str],
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
                f"the {said} {show(mode)} is outside min {show(low)} to max {show(high)}; "
                "correct the range",
            )
        ]
    return []


def _without_subtotals(
    read: RowsRead, problems: Problems, failed: set[str], show: Callable[[Decimal], str]
) -> list[Post]:
    """An account whose sub-accounts (21, 22… under 2) are lines too is their subtotal when they
    add up to it, and a problem when they do not, unless a line under it has a problem of its own
    (then it was not added, and the subtotal's figures would mislead); a code twice is a problem."""
    posts = read.posts
    seen: dict[str, Post] = {}
    for post in posts:
        if post.code in seen:
            problems.add(
                [
                    Problem(
                        post.origin,
                        None,
                        f"code {post.code} again (first at {seen[post.code].origin}); merge the "
                        "two lines or give them their own codes",
                    )
                ]
            )
        seen.setdefault(post.code, post)

    def parent_of(code: str) -> str | None:
        return next((p for p in _parents(code) if p in seen), None)

    direct: dict[str, list[Post]] = {}
    for code, post in seen.items():
        parent = parent_of(code)
        if parent is not None:
            direct.setdefault(parent, []).append(post)
    silent = {parent for code in failed if (parent := parent_of(code)) is not None}
    kept = []
    for post in posts:
        under = direct.get(post.code, [])
        if not under:
            kept.append(post)
            continue
        total = sum((c.amount for c in under), Decimal(0))
        if abs(total - post.amount) <= Decimal("0.5") * len(under):
            read.skipped.add(
                f"{post.origin}: a subtotal of {post.code} ({len(under)} lines under it)"
            )
        elif post.code not in silent:
            problems.add(
                [
                    Problem(
                        post.origin,
                        None,
                        f"account {post.code} says {show(post.amount)} but the {len(under)} "
                        f"line(s) under it add up to {show(total)}; correct it, or delete the "
                        "subtotal row",
                    )
                ]
            )
    return kept


def _parents(code: str) -> list[str]:
    """The codes a line may sit under, nearest first: 01.12 and 01 for 01.12.1, 21 and 2 for
    213."""
    if "." in code:
        parts = code.split(".")
        return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]
    return [code[:i] for i in range(len(code) - 1, 0, -1)]
