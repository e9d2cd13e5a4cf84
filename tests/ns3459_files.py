"""NS 3459 files shaped as the tools write them, made by our own generator (never a copy of one).

The structures are those of public files written by ISY Linker Pluss 11.4–11.5 and ISY
Beskrivelse 11.4 (NS 3459:2012): ``NS3459/Prisforesporsel|Pristilbud`` holding ``Generelt``
(date, sender, program) and ``ProsjektNS`` (ID, name, currency, the post-number plan with its
level types and a tree of their codes, and ``Poster``). A post has its GUID as an ``ID`` child,
``Postnr`` joined from ``Postnrdeler`` (which may skip a level), ``Egenskaper``, then either a
``Kode`` (NS 3420 code, revision, ``Kodetekst``: heading, matrix and keyword choices, other
requirements) or a ``Tekst`` (``Uformatert`` with CRLF, often opening with blank lines, and the
RTF), never both; then ``Prisinfo`` where it is priced (a rule, unit, quantity, and in a tender
unit price and sum; ``Opsjon="1"`` on an option). Sub-posts (an ``Underlopenr`` level) follow
their main post as siblings: ISY Linker gives them no ``Kode`` (they inherit the main post's),
ISY Beskrivelse repeats the main post's. Linker's tender leaves out every post without
``Prisinfo``. Seen in a real file: two posts with distinct GUIDs sharing one post number.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Final, Literal
from xml.sax.saxutils import escape, quoteattr

__all__ = [
    "LEVELS",
    "XPost",
    "beskrivelse_posts",
    "guid",
    "linker_posts",
    "posts_of",
    "write_ns3459",
]

Kind = Literal["Pristilbud", "Prisforesporsel"]

LEVELS: Final = (
    ("Type1", "Kapittel", 2),
    ("Type2", "Bygningsdel", 3),
    ("Hovedlopenr", "Hovedløpenr", 0),
    ("Underlopenr", "Underløpenr", 15),
)
"""The usual plan: (Type, Navn, MaksLengde)."""


def guid(n: int) -> str:
    return f"{n:08x}-aaaa-4bbb-8ccc-{n:012x}"


@dataclass(frozen=True)
class XPost:
    guid: str
    parts: tuple[tuple[str, str], ...]
    """(level Type, code) for each part of the post number, in order (a level may be skipped)."""
    kode: str | None = None
    revisjon: str = "2022"
    overskrift: str = ""
    matrise: tuple[tuple[str, str], ...] = ()
    stikkord: tuple[tuple[str, str], ...] = ()
    krav: str = ""
    text: str | None = None
    """``Tekst/Uformatert``; a post has a Kode or a Tekst, never both."""
    unit: str | None = None
    quantity: Decimal | None = None
    price: Decimal | None = None
    total: str | None = None
    """The Sum as written, when it is not quantity × price (a planted error)."""
    option: bool = False
    rule: str | None = None
    parts_of_quantity: tuple[tuple[Decimal, str], ...] = ()

    @property
    def postnr(self) -> str:
        return ".".join(code for _type, code in self.parts)

    @property
    def priced(self) -> bool:
        return self.unit is not None


def _text_xml(text: str, newline: str, picture_bytes: int = 0) -> str:
    plain = escape(text.replace("\n", newline))
    # A picture lives inside the RTF as hex (\\pict), as the tools embed it.
    picture = "{\\pict\\pngblip " + "89" * picture_bytes + "}" if picture_bytes else ""
    rtf = (
        "{\\rtf1\\ansi "
        + escape(text.splitlines()[-1] if text.strip() else "")
        + picture
        + "\\par}"
    )
    return f'<Tekst OriginalFormat="RTF"><Uformatert>{plain}</Uformatert><RTF>{rtf}</RTF></Tekst>'


def _kode_xml(post: XPost, newline: str, picture_bytes: int = 0) -> str:
    choices = "".join(
        f"<Matrisevalg Stikkord={quoteattr(k)}><Tekst>{escape(v)}</Tekst></Matrisevalg>"
        for k, v in post.matrise
    ) + "".join(
        f"<Stikkordvalg Stikkord={quoteattr(k)}><Tekst>{escape(v)}</Tekst></Stikkordvalg>"
        for k, v in post.stikkord
    )
    krav = (
        '<AndreKravJa Tekst="Andre krav:"><KravA Gruppe="a)" Overskrift="Omfang og '
        f'prisgrunnlag">{_text_xml(post.krav, newline, picture_bytes)}</KravA></AndreKravJa>'
        if post.krav
        else '<AndreKravNei Tekst="Andre krav: Ingen"/>'
    )
    return (
        f"<Kode><ID>{escape(post.kode or '')}</ID><Revisjon>{post.revisjon}</Revisjon><Kodetekst>"
        f"<Overskrift>{escape(post.overskrift)}</Overskrift>{choices}{krav}</Kodetekst></Kode>"
    )


def _figure(value: Decimal) -> str:
    text = f"{value.normalize():f}"
    return text


def _prisinfo(post: XPost, kind: Kind) -> str:
    if not post.priced:
        return ""
    opsjon = ' Opsjon="1"' if post.option else ""
    inner = f"<Mengderegel>{escape(post.rule)}</Mengderegel>" if post.rule else ""
    inner += f"<Enhet>{escape(post.unit or '')}</Enhet>"
    if post.quantity is not None:
        inner += f"<Mengde>{_figure(post.quantity)}</Mengde>"
    if kind == "Pristilbud" and post.price is not None:
        total = post.total or _figure(
            ((post.quantity or Decimal(0)) * post.price).quantize(Decimal("0.01"))
        )
        inner += f"<Enhetspris>{_figure(post.price)}</Enhetspris><Sum>{total}</Sum>"
    if post.parts_of_quantity:
        inner += (
            "<Delmengder>"
            + "".join(
                f"<Delmengde><ID>{n}</ID><Mengde>{_figure(q)}</Mengde><Tekst>{escape(t)}</Tekst>"
                "</Delmengde>"
                for n, (q, t) in enumerate(post.parts_of_quantity, start=1)
            )
            + "</Delmengder>"
        )
    return f"<Prisinfo{opsjon}>{inner}</Prisinfo>"


def _post_xml(post: XPost, kind: Kind, newline: str, picture_bytes: int = 0) -> str:
    parts = "".join(
        f"<Postnrdel><Type>{t}</Type><Kode>{escape(c)}</Kode></Postnrdel>" for t, c in post.parts
    )
    nois = ";".join(c for _t, c in post.parts[:2]) + "#" + ".".join(c for _t, c in post.parts[2:])
    props = (
        "<Egenskaper>"
        + ("<Egenskap><Navn>Focus.Kodeversjon</Navn><Verdi>202202</Verdi></Egenskap>" if post.kode else "")
        + f"<Egenskap><Navn>NOIS.2009ID</Navn><Verdi>{escape(nois)}</Verdi></Egenskap></Egenskaper>"
    )  # fmt: skip
    body = (
        _kode_xml(post, newline, picture_bytes)
        if post.kode
        else _text_xml(post.text or "", newline, picture_bytes)
    )
    return (
        f"<Post><ID>{post.guid}</ID><Postnr>{escape(post.postnr)}</Postnr>"
        f"<Postnrdeler>{parts}</Postnrdeler>{props}{body}{_prisinfo(post, kind)}</Post>"
    )


def write_ns3459(
    path: Path,
    posts: Sequence[XPost],
    *,
    kind: Kind = "Pristilbud",
    project: str = "Nordvik skole – ventilasjon",
    program: tuple[str, str] = ("ISY Linker Pluss", "11.4"),
    drop_unpriced: bool = False,
    version: str = "2012",
    encoding: str = "utf-8",
    doctype: str = "",
    newline: str = "\r\n",
    levels: Sequence[tuple[str, str, int]] = LEVELS,
    picture_bytes: int = 0,
) -> Path:
    """Write ``posts`` as an NS 3459 file; ``drop_unpriced``: as ISY Linker writes a tender,
    without the posts that have no ``Prisinfo``."""
    kept = [p for p in posts if p.priced or not drop_unpriced]
    types = "".join(
        f"<PostnrdelType><Type>{t}</Type><Navn>{n}</Navn><Numerisk>0</Numerisk><MinLengde>0"
        f"</MinLengde><MaksLengde>{m}</MaksLengde><SkilletegnBak>.</SkilletegnBak></PostnrdelType>"
        for t, n, m in levels
    )
    chapters = sorted({p.parts[0][1] for p in posts})
    codes = "".join(
        f"<PostnrdelKode><Type>Type1</Type><Kode>{c}</Kode><Navn>Kapittel {c}</Navn>"
        "<AlminneligDel>0</AlminneligDel></PostnrdelKode>"
        for c in chapters
    )
    declaration = '<?xml version="1.0"?>' if encoding == "utf-8" else (
        f'<?xml version="1.0" encoding="{encoding.upper().replace("-SIG", "")}"?>'
    )  # fmt: skip
    nl = newline
    xml = (
        f"{declaration}{nl}{doctype}"
        f'<NS3459 Versjon="{version}" xmlns="http://www.standard.no/ns3459" '
        'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:schemaLocation='
        '"http://www.standard.no/ns3459 http://www.standard.no/ns3459/ns3459-2012.xsd">'
        f"{nl}\t<{kind}>{nl}\t\t<Generelt><Dato>2025-02-03</Dato><Avsender><Person><Navn>Kari "
        "Rådgiver</Navn></Person><Firma><Navn>Eksempel Rådgivning AS</Navn></Firma></Avsender>"
        f"<ProgramNavn>{program[0]}</ProgramNavn><ProgramVersjon>{program[1]}</ProgramVersjon>"
        f"</Generelt>{nl}\t\t<ProsjektNS><ID>{guid(0xFFFF)}</ID><Navn>{escape(project)}</Navn>"
        "<Valuta>NOK</Valuta><Postnrplan><Struktur>Hierarkisk</Struktur><PostnrdelTyper>"
        f"{types}</PostnrdelTyper><PostnrdelKoder>{codes}</PostnrdelKoder></Postnrplan>"
        f"{nl}\t\t\t<Poster>{nl}"
        + "".join(f"\t\t\t\t{_post_xml(p, kind, newline, picture_bytes)}{nl}" for p in kept)
        + f"\t\t\t</Poster>{nl}\t\t</ProsjektNS>{nl}\t</{kind}>{nl}</NS3459>{nl}"
    )
    path.write_bytes(xml.encode(encoding))
    return path


@dataclass
class _Numbers:
    """Deterministic GUIDs, one after another."""

    next: int = 1
    made: list[XPost] = field(default_factory=list)

    def add(self, **fields: object) -> XPost:
        post = XPost(guid=guid(self.next), **fields)  # type: ignore[arg-type]
        self.next += 1
        self.made.append(post)
        return post


def _parts(*codes: str) -> tuple[tuple[str, str], ...]:
    types = ("Type1", "Type2", "Hovedlopenr", "Underlopenr")
    return tuple(zip(types, codes, strict=False))


def linker_posts() -> list[XPost]:
    """A ventilation chapter as ISY Linker describes it, with every structure the real files
    show: a text post, a coded main post whose value lies in its sub-posts (no Kode of their
    own, one an option), a coded header with nothing under it, a post with no code (a lump
    sum), two posts that share one post number, and a post whose number skips a level."""
    n = _Numbers()
    n.add(parts=_parts("36", "360", "0"), text="\n\nOrientering\nKapitlet gjelder luftbehandling.")
    n.add(
        parts=_parts("36", "362", "1"),
        kode="VB1.2A",
        overskrift="KANAL, SIRKULÆR",
        matrise=(("Materiale:", "Stål"),),
        stikkord=(("Lokalisering:", "Plan 1"),),
        krav="Inkl. deler og opphengsmateriell.",
    )
    for sub, (text, quantity, price) in enumerate(
        [("Dimensjon Ø125", Decimal("42.5"), Decimal("310.5")),
         ("Dimensjon Ø160", Decimal(120), Decimal(355))],
        start=1,
    ):  # fmt: skip
        n.add(parts=_parts("36", "362", "1", str(sub)), text=text, unit="m", quantity=quantity,
              price=price, rule="Lengde")  # fmt: skip
    n.add(parts=_parts("36", "362", "1", "3"), text="Opsjon: dimensjon Ø200", unit="m",
          quantity=Decimal(10), price=Decimal(420), option=True, rule="Lengde")  # fmt: skip
    n.add(
        parts=_parts("36", "364", "5"),
        kode="VE2.111272",
        overskrift="LYDDEMPER PÅ VENTILASJONSANLEGG",
        matrise=(("Type:", "Rektangulær"),),
    )
    for sub, (text, quantity, price) in enumerate(
        [("Dim 600x400 mm", Decimal(8), Decimal(4150)), ("Dim 800x500 mm", Decimal(4), Decimal(5980))],
        start=1,
    ):  # fmt: skip
        n.add(parts=_parts("36", "364", "5", str(sub)), text=text, unit="stk", quantity=quantity,
              price=price, rule="Antall")  # fmt: skip
    # Two posts under one number, distinct GUIDs, texts and quantities (a real file has this).
    for text, quantity in (("Ventil type A", Decimal(8)), ("Ventil type B", Decimal(56))):
        n.add(parts=_parts("36", "364", "5", "6"), text=text, unit="stk", quantity=quantity,
              price=Decimal(950), rule="Antall")  # fmt: skip
    n.add(parts=_parts("36", "365", "1"), kode="VF1.1", overskrift="VIFTE, GENERELT")
    n.add(parts=_parts("36", "369", "1"), text="\r\nInnregulering av anlegget\nMed rapport.",
          unit="RS", quantity=Decimal(1), price=Decimal(18000), rule="Rund sum")  # fmt: skip
    # A number that skips the building-part level (chapter, then the running number).
    n.add(parts=(("Type1", "36"), ("Hovedlopenr", "9")), text="Rigg og drift", unit="mnd",
          quantity=Decimal(6), price=Decimal(12500), rule="Tid")  # fmt: skip
    return n.made


def beskrivelse_posts() -> list[XPost]:
    """The same kind of chapter as ISY Beskrivelse writes it: sub-posts repeat their main
    post's Kode (its other choices), and a main post may carry a quantity of its own."""
    n = _Numbers(next=100)
    n.add(parts=_parts("36", "362", "1"), kode="VB1.2A", overskrift="KANAL, SIRKULÆR",
          matrise=(("Materiale:", "Stål"),), unit="m", quantity=Decimal(30), price=Decimal(290))  # fmt: skip
    for sub, (dim, quantity) in enumerate([("Ø125", Decimal(12)), ("Ø160", Decimal(18))], 1):
        n.add(parts=_parts("36", "362", "1", str(sub)), kode="VB1.2A",
              overskrift="KANAL, SIRKULÆR", matrise=(("Dimensjon:", dim),), unit="m",
              quantity=quantity, price=Decimal(300))  # fmt: skip
    return n.made


def priced_as(posts: Sequence[XPost], factor: Decimal) -> list[XPost]:
    """The same posts at another price level (every unit price times ``factor``)."""
    return [
        replace(p, price=(p.price * factor).quantize(Decimal("0.01"))) if p.price is not None else p
        for p in posts
    ]


def posts_of(
    rows: Sequence[tuple[str, str, str, str, Decimal, Decimal]],
    sums: dict[str, str] | None = None,
    unit: str = "m2",
) -> list[XPost]:
    """Coded posts, one per (GUID, post number, NS 3420 code, text, quantity, unit price): the
    text's first line as the code's heading, the rest as its other requirements."""
    made = []
    for guid_, postnr, code, text, quantity, price in rows:
        heading, _, rest = text.partition("\n")
        made.append(
            XPost(
                guid=guid_,
                parts=_parts(*postnr.split(".")),
                kode=code,
                overskrift=heading,
                krav=rest,
                unit=unit,
                quantity=quantity,
                price=price,
                total=(sums or {}).get(postnr),
                rule="Areal",
            )
        )
    return made
