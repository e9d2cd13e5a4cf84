"""An NS 3459 file (the exchange format of NS 3420 posts, editions 2012 and 2023) read into an
estimate, streaming.

Decides whether the file may be parsed at all (a DOCTYPE is refused before parsing: NS 3459
files have none, and a DTD is how entity bombs and external entities get in; the parser resolves
no entity and reaches no network either way), what each ``Post`` is (its GUID ``ID``, its
``Postnr``, its NS 3420 code ``Kode/ID``, its ``Prisinfo``: unit, quantity, unit price, sum, and
its text, first line of ``Uformatert``), which NS 3451 building part a post belongs to (the
``Bygningsdel`` level of the post-number plan, ``ProsjektNS/Postnrplan``), and what is wrong:
a duplicate GUID, a sum quantity × unit price does not give, a non-number, a missing unit. A
price request (``Prisforesporsel``) has quantities and no prices: its lines are imported at no
amount, and the import report says so. Posts are read one at a time and cleared, so a file of
tens of thousands of posts with embedded images stays small in memory.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Final

from lxml import etree

from .posts import Estimate, ImportRefused, Origin, Post, Problem, estimate_of, sum_problem

__all__ = ["NAMESPACE", "read_ns3459_estimate"]

NAMESPACE: Final = "http://www.standard.no/ns3459"
_PROLOG_BYTES: Final = 65_536
_DOCTYPE: Final = re.compile(rb"<!DOCTYPE", re.IGNORECASE)


def _local(tag: object) -> str:
    return etree.QName(tag).localname if isinstance(tag, str) else ""


def _child(element: Any, *path: str) -> Any:
    """The first descendant along ``path`` of local names, or None."""
    for name in path:
        if element is None:
            return None
        element = next((c for c in element if _local(c.tag) == name), None)
    return element


def _text(element: Any, *path: str) -> str:
    found = _child(element, *path)
    return (found.text or "").strip() if found is not None else ""


def _refuse_doctype(path: Path, name: str) -> None:
    with path.open("rb") as handle:
        head = handle.read(_PROLOG_BYTES)
    first_element = re.search(rb"<[A-Za-z_]", head)
    prolog = head[: first_element.start()] if first_element else head
    if _DOCTYPE.search(prolog):
        raise ImportRefused(
            name,
            [
                Problem(
                    Origin(name, path="/"),
                    None,
                    "has a DOCTYPE, which NS 3459 files never have (it is how entity bombs and "
                    "external entities get in); export the file again from the tool",
                )
            ],
        )


def _levels(plan: Any) -> list[str]:
    """The post-number plan's level types in order (Kapittel, Bygningsdel, Hovedløpenr…)."""
    types = _child(plan, "PostnrdelTyper")
    if types is None:
        return []
    return [(_text(t, "Navn") or (t.text or "")).strip() for t in types]


def _decimal(text: str, origin: Origin, field: str, problems: list[Problem]) -> Decimal | None:
    if not text:
        return None
    try:
        value = Decimal(text.replace(",", "."))
    except InvalidOperation:
        problems.append(Problem(origin, field, f"{text!r} is not a number; write a plain number"))
        return None
    if not value.is_finite():
        problems.append(Problem(origin, field, f"{text!r} is not a finite number"))
        return None
    return value


def _post(
    element: Any, number: int, name: str, levels: list[str], priced: bool, problems: list[Problem]
) -> Post | None:
    guid = _text(element, "ID")
    postnr = _text(element, "Postnr")
    origin = Origin(name, guid=guid or None, path=f"Post {number} ({postnr or 'no Postnr'})")
    before = len(problems)
    if not postnr:
        problems.append(Problem(origin, "Postnr", "no post number; every post needs one"))
    price = _child(element, "Prisinfo")
    unit = _text(price, "Enhet") or None
    quantity = _decimal(_text(price, "Mengde"), origin, "Prisinfo/Mengde", problems)
    unit_price = _decimal(_text(price, "Enhetspris"), origin, "Prisinfo/Enhetspris", problems)
    amount = _decimal(_text(price, "Sum"), origin, "Prisinfo/Sum", problems)
    if quantity is not None and unit is None:
        problems.append(
            Problem(origin, "Prisinfo/Enhet", f"a quantity ({quantity}) without a unit")
        )
    if priced and amount is None and len(problems) == before:
        problems.append(
            Problem(origin, "Prisinfo/Sum", "no sum in a priced tender; price the post")
        )
    # NS 3459 writes sums in øre (2 decimals).
    wrong = sum_problem(
        origin, "Prisinfo/Sum", quantity, unit_price, amount, sum_rounding=Decimal("0.005")
    )
    if wrong is not None:
        problems.append(wrong)
    if len(problems) > before:
        return None
    text = _text(element, "Tekst", "Uformatert") or _text(element, "Uformatert")
    title, _, rest = text.partition("\n")
    parts = postnr.split(".")
    building = levels.index("Bygningsdel") if "Bygningsdel" in levels else -1
    return Post(
        origin=origin,
        code=postnr,
        title=title.strip() or postnr,
        amount=amount if amount is not None else Decimal(0),
        quantity=quantity,
        unit=unit,
        unit_price=unit_price,
        ns3451=parts[building] if 0 <= building < len(parts) else None,
        ns3420=_text(element, "Kode", "ID") or None,
        description=rest.strip() or None,
        post=True,
    )


def read_ns3459_estimate(
    path: Path,
    *,
    mapping: Mapping[str, str] | None = None,
    project: Mapping[str, Any] | None = None,
    name: str | None = None,
) -> Estimate:
    """The estimate the NS 3459 file at ``path`` holds; raises :class:`ImportRefused` with every
    problem at once. ``mapping`` is for tabular files and is not used here."""
    del mapping
    name = name or path.name
    _refuse_doctype(path, name)
    with path.open("rb") as handle:  # streamed: a tender with images runs to tens of MB
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
    problems: list[Problem] = []
    posts: list[Post] = []
    seen: dict[str, Origin] = {}
    numbers: dict[str, Origin] = {}
    levels: list[str] = []
    kind = version = ""
    number = 0
    try:
        events = etree.iterparse(
            str(path),
            events=("start", "end"),
            resolve_entities=False,
            no_network=True,
            load_dtd=False,
            huge_tree=False,
        )
        for event, element in events:
            local = _local(element.tag)
            if event == "start":
                if local == "NS3459":
                    version = element.get("Versjon", "")
                elif local in {"Prisforesporsel", "Pristilbud"}:
                    kind = local
                continue
            if local == "Postnrplan":
                levels = _levels(element)
            elif local == "Post":
                number += 1
                post = _post(element, number, name, levels, kind == "Pristilbud", problems)
                guid = post.origin.guid if post is not None else None
                if guid and guid in seen:
                    problems.append(
                        Problem(
                            post.origin if post else Origin(name),
                            "ID",
                            f"GUID {guid} again (first at {seen[guid]})",
                        )
                    )
                elif post is not None and post.code in numbers:
                    problems.append(
                        Problem(
                            post.origin,
                            "Postnr",
                            f"post number {post.code} again (first at {numbers[post.code]})",
                        )
                    )
                elif post is not None:
                    if guid:
                        seen[guid] = post.origin
                    numbers[post.code] = post.origin
                    posts.append(post)
                element.clear()
                while element.getprevious() is not None:  # keep memory flat: drop read posts
                    del element.getparent()[0]
    except etree.XMLSyntaxError as exc:
        problems.append(
            Problem(
                Origin(name, path=f"line {exc.lineno}"),
                None,
                f"is not well-formed XML ({exc.msg}); export it again",
            )
        )
    if not kind and not problems:
        problems.append(
            Problem(
                Origin(name),
                None,
                "is not an NS 3459 price request or tender (no Prisforesporsel or Pristilbud)",
            )
        )
    if not posts and not problems:
        problems.append(Problem(Origin(name), None, "has no Post"))
    if problems:
        raise ImportRefused(name, problems)
    unpriced = sum(1 for p in posts if p.unit_price is None)
    how = [
        f"Read {name} (SHA-256 {digest[:16]}…) as NS 3459"
        + (f" version {version}" if version else "")
        + f": a {'priced tender' if kind == 'Pristilbud' else 'price request'}.",
        f"Post-number levels: {', '.join(levels) or 'none named'}"
        + ("; NS 3451 from the Bygningsdel level." if "Bygningsdel" in levels else "."),
        f"{len(posts)} post(s) imported, each with its GUID and path.",
    ]
    if unpriced:
        how.append(
            f"{unpriced} post(s) have no price (a price request): imported at 0 NOK, so nothing "
            "can be saved on them until they are priced."
        )
    return estimate_of(name, digest, posts, how, project)
