"""What each post of an NS 3459 file is, as the tools write them: pure.

Decides, from the posts as read (``RawPost``, in file order) and the post-number plan: which
posts are cost lines (priced: a ``Prisinfo``), which are options kept apart from the base sum
(``Opsjon``), which are context (a text post, a coded heading, a main post whose value lies in
its sub-posts); a post's title (its NS 3420 heading and chosen values, else the first line of its
text) and full text; the NS 3420 code a sub-post inherits from its main post (the nearest post
before it with its parent's number: sub-posts follow their main post); the NS 3451 building part
(the part of its number whose level is ``Bygningsdel``, a level a number may skip); and what is
wrong. Odd but readable is imported and named (two posts sharing a number are told apart by their
GUIDs); only what would be read wrongly is a problem (a GUID twice, a sum that quantity × unit
price does not give, a word where a number belongs, a quantity without a unit).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Final

from portfolio_optimiser.context.vocabulary import unknown_unit

from .posts import Origin, Post, Problem, TextPost, sum_problem

__all__ = ["Classified", "RawPost", "classify"]

_SUB_LEVELS: Final = ("underlopenr", "underløpenr")


@dataclass(frozen=True)
class RawPost:
    """One ``Post`` as the file writes it, before it is understood."""

    number: int
    """Its place among the file's posts (1 for the first)."""
    guid: str
    postnr: str
    parts: tuple[tuple[str, str], ...]
    """``Postnrdeler``: (level type, code) per part of its number."""
    kode: str | None = None
    revision: str | None = None
    heading: str = ""
    choices: tuple[tuple[str, str], ...] = ()
    """``Matrisevalg`` and ``Stikkordvalg``: (keyword, chosen text)."""
    requirements: str = ""
    text: str = ""
    priced: bool = False
    """It has a ``Prisinfo``."""
    option: bool = False
    unit: str = ""
    quantity: str = ""
    unit_price: str = ""
    amount: str = ""


@dataclass
class Classified:
    lines: list[Post] = field(default_factory=list)
    options: list[Post] = field(default_factory=list)
    texts: list[TextPost] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    carried: int = 0
    """Main posts whose value lies in their sub-posts (context, not lines)."""
    shared: list[tuple[str, str, str]] = field(default_factory=list)
    """(post number, first GUID, this GUID) for each post sharing a number with an earlier one."""
    orphans: int = 0
    """Sub-posts whose main post the file leaves out (a tender without its unpriced posts)."""
    unpriced: int = 0
    """Lines and options with a quantity and no price (none, or 0 with a Sum of 0)."""

    @property
    def uncoded(self) -> int:
        return sum(1 for p in (*self.lines, *self.options) if not p.ns3420)


def _fold(text: str) -> str:
    return text.strip().lower().replace("ø", "o").replace(" ", "")


def _decimal(text: str, origin: Origin, field_: str, problems: list[Problem]) -> Decimal | None:
    if not text:
        return None
    try:
        value = Decimal(text.replace(",", "."))
    except InvalidOperation:
        problems.append(Problem(origin, field_, f"{text!r} is not a number; write a plain number"))
        return None
    if not value.is_finite():
        problems.append(Problem(origin, field_, f"{text!r} is not a finite number"))
        return None
    return value


def _first_line(text: str) -> tuple[str, str]:
    """The first line with words in it, and what follows it (tools open texts with blank lines)."""
    lines = [line.strip() for line in text.splitlines()]
    for at, line in enumerate(lines):
        if line:
            return line, "\n".join(lines[at + 1 :]).strip()
    return "", ""


@dataclass(frozen=True)
class _Known:
    """What a later sub-post needs of a post it may sit under."""

    kode: str | None
    revision: str | None
    heading: str
    postnr: str


class _Plan:
    def __init__(self, levels: Mapping[str, str]) -> None:
        self.building = next((t for t, n in levels.items() if _fold(n) == "bygningsdel"), None)
        self.sub = next(
            (t for t, n in levels.items() if _fold(t) in _SUB_LEVELS or _fold(n) in _SUB_LEVELS),
            "Underlopenr",
        )

    def is_sub(self, raw: RawPost) -> bool:
        return bool(raw.parts) and raw.parts[-1][0] == self.sub

    def part(self, raw: RawPost) -> str | None:
        return next((code for kind, code in raw.parts if kind == self.building), None)


def _described(raw: RawPost, under: _Known | None, rest: str) -> str | None:
    """The post's whole text, as the concept file keeps it."""
    said = []
    if under is not None and under.heading:
        said.append(f"Under {under.postnr} {under.heading}.")
    said += [f"{key.rstrip(':')}: {value}" for key, value in raw.choices]
    said += [part for part in (rest, raw.requirements.strip()) if part]
    return "\n".join(said) or None


def _title(raw: RawPost, under: _Known | None) -> tuple[str, str]:
    """A heading and its chosen values, or a main post's heading and the sub-post's first line,
    else the text's first line; and the rest of the text."""
    first, rest = _first_line(raw.text)
    if raw.heading:
        values = ", ".join(value for _key, value in raw.choices if value)
        return (f"{raw.heading} — {values}" if values else raw.heading), rest
    if under is not None and under.heading:
        return (f"{under.heading} — {first}" if first else under.heading), rest
    return first or raw.postnr, rest


def classify(
    raws: Sequence[RawPost],
    *,
    name: str,
    levels: Mapping[str, str],
    units: Sequence[str] | None = None,
) -> Classified:
    """Every post of a file understood, in file order, with every problem at once."""
    plan = _Plan(levels)
    out = Classified()
    guids: dict[str, Origin] = {}
    numbers: dict[str, str] = {}
    known: dict[str, _Known] = {}
    codes: dict[str, int] = {}
    subs_of: dict[str, int] = {}
    for raw in raws:
        origin = Origin(
            name, guid=raw.guid or None, path=f"Post {raw.number} ({raw.postnr or 'no Postnr'})"
        )
        if not raw.postnr:
            out.problems.append(Problem(origin, "Postnr", "no post number; every post needs one"))
            continue
        if raw.guid and raw.guid in guids:
            out.problems.append(
                Problem(origin, "ID", f"GUID {raw.guid} again (first at {guids[raw.guid]})")
            )
            continue
        if raw.guid:
            guids[raw.guid] = origin
        if raw.postnr in numbers:
            out.shared.append((raw.postnr, numbers[raw.postnr], raw.guid))
        else:
            numbers[raw.postnr] = raw.guid
        parent = ".".join(code for _kind, code in raw.parts[:-1])
        under = known.get(parent) if plan.is_sub(raw) else None
        if plan.is_sub(raw):
            if under is None:
                out.orphans += 1
            else:
                subs_of[parent] = subs_of.get(parent, 0) + 1
        kode = raw.kode or (under.kode if under else None)
        known[raw.postnr] = _Known(
            kode, raw.revision or (under.revision if under else None), raw.heading, raw.postnr
        )
        title, rest = _title(raw, under)
        description = _described(raw, under, rest)
        if not raw.priced:
            out.texts.append(TextPost(origin, raw.postnr, title, description or "", bool(raw.kode)))
            continue
        post = _line(raw, origin, title, description, kode, plan, out.problems, units)
        if post is None:
            continue
        seen = codes.get(raw.postnr, 0)
        codes[raw.postnr] = seen + 1
        if seen:  # a bundle's codes are unique: the second post of a number is told apart
            post = replace(post, code=f"{raw.postnr}#{seen + 1}")
        if post.quantity is not None and not post.unit_price and not post.amount:
            # No price, or a price of 0 with a Sum of 0: as ISY Linker exports a tender that was
            # never priced (every Enhetspris and Sum written as 0).
            out.unpriced += 1
        (out.options if raw.option else out.lines).append(post)
    out.carried = sum(1 for t in out.texts if subs_of.get(t.code))
    return out


def _line(
    raw: RawPost,
    origin: Origin,
    title: str,
    description: str | None,
    kode: str | None,
    plan: _Plan,
    problems: list[Problem],
    units: Sequence[str] | None,
) -> Post | None:
    """A priced post as a line; a tender's post left unpriced is imported at 0 and counted."""
    before = len(problems)
    unit = raw.unit or None
    quantity = _decimal(raw.quantity, origin, "Prisinfo/Mengde", problems)
    unit_price = _decimal(raw.unit_price, origin, "Prisinfo/Enhetspris", problems)
    amount = _decimal(raw.amount, origin, "Prisinfo/Sum", problems)
    if quantity is not None and unit is None:
        problems.append(
            Problem(origin, "Prisinfo/Enhet", f"a quantity ({quantity}) without a unit")
        )
    unknown = unknown_unit(unit, units) if unit is not None and units is not None else None
    if unknown is not None:
        problems.append(Problem(origin, "Prisinfo/Enhet", unknown))
    # NS 3459 writes sums in øre (2 decimals).
    wrong = sum_problem(
        origin, "Prisinfo/Sum", quantity, unit_price, amount, sum_rounding=Decimal("0.005")
    )
    if wrong is not None:
        problems.append(wrong)
    if len(problems) > before:
        return None
    if amount is None and quantity is not None and unit_price is not None:
        amount = (quantity * unit_price).quantize(Decimal("0.01"))
    return Post(
        origin=origin,
        code=raw.postnr,
        title=title,
        amount=amount if amount is not None else Decimal(0),
        quantity=quantity,
        unit=unit,
        unit_price=unit_price,
        ns3451=plan.part(raw),
        ns3420=kode,
        description=description,
        post=True,
    )
