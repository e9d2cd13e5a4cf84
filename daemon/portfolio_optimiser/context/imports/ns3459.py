"""An NS 3459 file (the exchange format of NS 3420 posts, editions 2012 and 2023) read into an
estimate, streaming, as the tools write it (ISY Linker, ISY Beskrivelse and others).

Decides whether the file may be parsed at all (a DOCTYPE is refused, as the parser reports it
whatever the file's encoding, before the first element is read: NS 3459 files have none, and a
DTD is how entity bombs and external entities get in; the parser resolves no entity and reaches
no network either way), what the file is (``Prisforesporsel``, a price request with quantities
and no prices, or ``Pristilbud``, a priced tender; its project's name, its tool), its post-number
plan (the level types, ``Postnrplan``), and each ``Post`` as written (``RawPost``: its GUID, its
number and the level of each part, its NS 3420 ``Kode`` with heading and choices or its
``Tekst``, its ``Prisinfo``). What each post then is, ``ns3459_posts`` decides. Posts are read one
at a time and cleared, the RTF and pictures never kept, so a file of tens of thousands of posts
stays small in memory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from lxml import etree

from .ns3459_posts import Classified, RawPost, classify
from .posts import Estimate, ImportRefused, Origin, Problem, estimate_of

__all__ = ["NAMESPACE", "read_ns3459_estimate"]

NAMESPACE: Final = "http://www.standard.no/ns3459"


def _local(tag: object) -> str:
    """An element's name without its namespace (``{ns}Post`` → ``Post``); "" for a comment or
    a processing instruction. Split by hand: ``etree.QName`` per element was a third of a
    20 000-post file's read."""
    return tag.rpartition("}")[2] if isinstance(tag, str) else ""


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


def _refused(name: str, sentence: str) -> ImportRefused:
    return ImportRefused(name, [Problem(Origin(name, path="/"), None, sentence)])


_DOCTYPE_REFUSED: Final = (
    "has a DOCTYPE, which NS 3459 files never have (it is how entity bombs and external "
    "entities get in); export the file again from the tool"
)


def _levels(plan: Any) -> dict[str, str]:
    """The post-number plan's level types in order, each with its name (Type2 → Bygningsdel)."""
    types = _child(plan, "PostnrdelTyper")
    if types is None:
        return {}
    found: dict[str, str] = {}
    for n, level in enumerate(types, start=1):
        named = _text(level, "Navn") or (level.text or "").strip()
        found[_text(level, "Type") or named or f"level {n}"] = named
    return found


def _plain(element: Any) -> str:
    """A ``Tekst``'s unformatted text, with Windows line ends folded."""
    return _text(element, "Uformatert").replace("\r\n", "\n").replace("\r", "\n")


def _raw(element: Any, number: int, level_types: list[str]) -> RawPost:
    kode = _child(element, "Kode")
    words = _child(kode, "Kodetekst")
    choices = tuple(
        (child.get("Stikkord", "").strip(), _text(child, "Tekst"))
        for child in (words if words is not None else ())
        if _local(child.tag) in {"Matrisevalg", "Stikkordvalg"}
    )
    requirements = "\n".join(
        f"{krav.get('Gruppe', '')} {krav.get('Overskrift', '')}: {_plain(_child(krav, 'Tekst'))}"
        for other in (words if words is not None else ())
        if _local(other.tag) == "AndreKravJa"
        for krav in other
    )
    price = _child(element, "Prisinfo")
    numbered = _child(element, "Postnrdeler")
    parts = tuple(
        (_text(part, "Type"), _text(part, "Kode"))
        for part in (numbered if numbered is not None else ())
    )
    postnr = _text(element, "Postnr")
    return RawPost(
        number=number,
        guid=_text(element, "ID"),
        postnr=postnr,
        # Without Postnrdeler a number's parts are the plan's levels in order.
        parts=parts or tuple(zip(level_types, postnr.split("."), strict=False)),
        kode=_text(kode, "ID") or None,
        revision=_text(kode, "Revisjon") or None,
        heading=_text(words, "Overskrift"),
        choices=choices,
        requirements=requirements.strip(),
        text=_plain(_child(element, "Tekst")),
        priced=price is not None,
        option=price is not None and price.get("Opsjon", "0").strip() in {"1", "true"},
        unit=_text(price, "Enhet"),
        quantity=_text(price, "Mengde"),
        unit_price=_text(price, "Enhetspris"),
        amount=_text(price, "Sum"),
    )


@dataclass
class _Read:
    kind: str = ""
    version: str = ""
    project: str = ""
    program: str = ""
    levels: dict[str, str] = field(default_factory=dict)
    raws: list[RawPost] = field(default_factory=list)


def _read(path: Path, name: str) -> _Read:
    read = _Read()
    first = True
    events = etree.iterparse(
        str(path),
        events=("start", "end"),
        # Only the elements read: an event for every element was half a large file's read.
        tag=tuple(f"{{*}}{local}" for local in _READ),
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=False,
    )
    for event, element in events:
        local = _local(element.tag)
        if event == "start":
            if first:  # the parser has read the prolog, in whatever encoding: any DTD is known
                _refuse_doctype(element, name)
                first = False
            if local == "NS3459":
                read.version = element.get("Versjon", "") or "?"
            elif local in {"Prisforesporsel", "Pristilbud"}:
                read.kind = local
            continue
        if local == "Postnrplan":
            read.levels = _levels(element)
        elif local == "Generelt":
            read.program = " ".join(
                t for t in (_text(element, "ProgramNavn"), _text(element, "ProgramVersjon")) if t
            )
        elif local == "Navn" and _local(element.getparent().tag) == "ProsjektNS":
            read.project = (element.text or "").strip()
        elif local == "Post":
            read.raws.append(_raw(element, len(read.raws) + 1, list(read.levels)))
            element.clear()
            while element.getprevious() is not None:  # keep memory flat: drop read posts
                del element.getparent()[0]
    if first and events.root is not None:  # none of the elements read: the prolog all the same
        _refuse_doctype(events.root, name)
    return read


_READ: Final = ("NS3459", "Prisforesporsel", "Pristilbud", "Postnrplan", "Generelt", "Navn", "Post")


def _refuse_doctype(element: Any, name: str) -> None:
    info = element.getroottree().docinfo
    if info.doctype or info.internalDTD is not None:
        raise _refused(name, _DOCTYPE_REFUSED)


def read_ns3459_estimate(
    path: Path,
    *,
    mapping: Mapping[str, str] | None = None,
    project: Mapping[str, Any] | None = None,
    name: str | None = None,
    units: Sequence[str] | None = None,
) -> Estimate:
    """The estimate the NS 3459 file at ``path`` holds; raises :class:`ImportRefused` with every
    problem at once. ``mapping`` is for tabular files and is not used here; ``units``: the
    config's own units beside the vocabulary, against which each post's unit is checked (None:
    not checked)."""
    del mapping
    name = name or path.name
    with path.open("rb") as handle:  # streamed: a tender with images runs to tens of MB
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
    try:
        read = _read(path, name)
    except etree.XMLSyntaxError as exc:
        raise ImportRefused(
            name,
            [
                Problem(
                    Origin(name, path=f"line {exc.lineno}"),
                    None,
                    f"is not well-formed XML ({exc.msg}); export it again",
                )
            ],
        ) from None
    if not read.kind:
        raise _refused(
            name, "is not an NS 3459 price request or tender (no Prisforesporsel or Pristilbud)"
        )
    if not read.raws:
        raise _refused(name, "has no Post")
    posts = classify(read.raws, name=name, levels=read.levels, units=units)
    if posts.problems:
        raise ImportRefused(name, posts.problems)
    header = {"name": read.project} if read.project else {}
    header["document"] = "tender" if read.kind == "Pristilbud" else "price-request"
    return estimate_of(
        name,
        digest,
        posts.lines,
        _how(name, digest, read, posts),
        header | dict(project or {}),
        options=posts.options,
        texts=posts.texts,
    )


def _how(name: str, digest: str, read: _Read, posts: Classified) -> list[str]:
    """The import report's sentences: what the file is and what became of each of its posts."""
    tender = read.kind == "Pristilbud"
    posted = len(posts.lines) + len(posts.options)
    if not tender:
        kind = "price request"
    elif posted and posts.unpriced == posted:  # as exported before anyone priced it
        kind = "tender with no price on any post"
    else:
        kind = "priced tender"
    by = f", written by {read.program}" if read.program else ""
    levels = ", ".join(n for n in read.levels.values() if n) or "none named"
    how = [
        f"Read {name} (SHA-256 {digest[:16]}…) as NS 3459 version {read.version}: a {kind}{by}.",
        f"Post-number levels: {levels}"
        + (
            "; NS 3451 from the Bygningsdel level."
            if "Bygningsdel" in read.levels.values()
            else "."
        ),
        f"{len(read.raws)} post(s) read: {len(posts.lines)} cost line(s), {len(posts.options)} "
        f"option(s) kept apart from the base sum, {len(posts.texts)} text post(s) and heading(s) "
        f"kept as description ({posts.carried} of them main posts whose value lies in their "
        "sub-posts).",
        f"{posts.uncoded} cost line(s) and option(s) without an NS 3420 code, after each "
        "sub-post took its main post's: the portfolio does not compare them.",
    ]
    if posts.orphans:
        how.append(
            f"{posts.orphans} sub-post(s) whose main post the file leaves out (a tender without "
            "its unpriced posts): they carry no NS 3420 code of their own."
        )
    how += [
        f"Post number {number} is shared by two posts (IDs {first} and {second}): both imported, "
        "told apart by their GUIDs."
        for number, first, second in posts.shared
    ]
    if posts.unpriced:
        why = (
            "left unpriced in the tender, or its Enhetspris and Sum written as 0"
            if tender
            else "a price request"
        )
        how.append(
            f"{posts.unpriced} post(s) have a quantity and no price ({why}): imported at 0 NOK, "
            f"so nothing can be {'saved or checked' if tender else 'saved'} on them until they "
            "are priced."
        )
    return how
