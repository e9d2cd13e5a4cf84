"""A building owner's portfolio of NS 3459 tenders and estimates with a hidden truth: our own
generator, shaped as ISY Linker and ISY Beskrivelse write their files (``ns3459_files``).

Each file describes one project's technical chapters with NS 3420 codes: a coded main post
whose value lies in its priced sub-posts (Linker: the sub-posts carry no code of their own), a
text post, a post with no code (a lump sum), now and then two posts sharing a number. Unit prices
are a code's price times the project's level (region, market: lognormal, σ 0.06) times the
code's own noise (lognormal, σ 0.08–0.18 by code). Some posts are planted dear (× 1.7–2.4: a
saving to negotiate) and some cheap (× 0.35–0.55: an unbalanced bid); the truth says which. A
price request is the same structure without prices.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Literal

from .ns3459_files import XPost, guid, write_ns3459

__all__ = ["Code", "Planted", "TenderPortfolio", "codes", "large_request", "make_portfolio"]

Kind = Literal["dear", "cheap"]


@dataclass(frozen=True)
class Code:
    id: str
    heading: str
    unit: str
    price: float
    sigma: float
    sizes: tuple[int, int]


def codes(rng: random.Random, n: int = 36) -> list[Code]:
    """NS 3420-shaped codes (a letter pair, a number, a variant) with a price, unit and noise."""
    units = [("m", 250, 900, (20, 400)), ("stk", 900, 9000, (2, 60)), ("m2", 300, 1800, (40, 900))]
    made = []
    for i in range(n):
        unit, low, high, sizes = units[i % len(units)]
        made.append(
            Code(
                id=f"{['VB', 'VE', 'VF', 'VK', 'VL', 'RS', 'RT', 'YA'][i % 8]}{1 + i // 8}.{100 + i}",
                heading=f"POST {i + 1}, {unit.upper()}",
                unit=unit,
                price=round(rng.uniform(low, high), -1),
                sigma=rng.uniform(0.08, 0.18),
                sizes=sizes,
            )
        )
    return made


@dataclass(frozen=True)
class Planted:
    project: str
    postnr: str
    kind: Kind
    code: str


@dataclass
class TenderPortfolio:
    files: list[Path] = field(default_factory=list)
    planted: list[Planted] = field(default_factory=list)
    request: Path | None = None
    request_truth: dict[str, float] = field(default_factory=dict)
    """The price request's posts at the prices its project would be given (postnr → NOK)."""
    codes: list[Code] = field(default_factory=list)
    true_prices: dict[tuple[str, str], float] = field(default_factory=dict)
    """Each priced post's price before its planting: (project, postnr) → its code's price at
    the project's level with the post's own noise."""


def _project(
    rng: random.Random,
    name: str,
    all_codes: list[Code],
    *,
    level: float,
    plant: float,
    truth: list[Planted],
    priced: bool = True,
    worth: dict[tuple[str, str], float] | None = None,
    dear: tuple[float, float] = (1.7, 2.4),
    cheap: tuple[float, float] = (0.35, 0.55),
) -> list[XPost]:
    """One project's posts: each chosen code a main post with one to three sub-posts."""
    posts: list[XPost] = []
    n = rng.randrange(1, 10**6) * 1000

    def add(**fields: object) -> None:
        posts.append(XPost(guid=guid(n + len(posts) + 1), **fields))  # type: ignore[arg-type]

    add(parts=(("Type1", "36"), ("Type2", "360"), ("Hovedlopenr", "0")),
        text="\n\nOrientering\nBeskrivelsen gjelder tekniske anlegg.")  # fmt: skip
    chosen = rng.sample(all_codes, k=rng.randint(18, 26))
    for main, code in enumerate(chosen, start=1):
        part = str(360 + main % 9)
        add(parts=(("Type1", "36"), ("Type2", part), ("Hovedlopenr", str(main))),
            kode=code.id, overskrift=code.heading, matrise=(("Type:", "Standard"),))  # fmt: skip
        for sub in range(1, rng.randint(1, 3) + 1):
            price = code.price * level * math.exp(rng.gauss(0, code.sigma))
            roll = rng.random()
            postnr = f"36.{part}.{main}.{sub}"
            if worth is not None:
                worth[(name, postnr)] = price
            if roll < plant:
                price *= rng.uniform(*dear)
                truth.append(Planted(name, postnr, "dear", code.id))
            elif roll < 2 * plant:
                price *= rng.uniform(*cheap)
                truth.append(Planted(name, postnr, "cheap", code.id))
            quantity = Decimal(rng.randint(*code.sizes))
            add(parts=(("Type1", "36"), ("Type2", part), ("Hovedlopenr", str(main)),
                       ("Underlopenr", str(sub))),
                text=f"Variant {sub}", unit=code.unit, quantity=quantity,
                price=Decimal(str(round(price, 2))) if priced else None)  # fmt: skip
    add(parts=(("Type1", "36"), ("Type2", "369"), ("Hovedlopenr", "99")),
        text="Innregulering og dokumentasjon", unit="RS", quantity=Decimal(1),
        price=Decimal(rng.randint(20, 90) * 1000) if priced else None)  # fmt: skip
    return posts


def make_portfolio(
    folder: Path,
    *,
    tenders: int = 20,
    estimates: int = 6,
    seed: int = 3459,
    plant: float = 0.05,
    dear: tuple[float, float] = (1.7, 2.4),
    cheap: tuple[float, float] = (0.35, 0.55),
) -> TenderPortfolio:
    """``tenders`` Linker tenders and ``estimates`` Beskrivelse estimates in ``folder``, each a
    project of its own, with planted dear and cheap posts; and one price request."""
    rng = random.Random(seed)
    all_codes = codes(rng)
    folder.mkdir(parents=True, exist_ok=True)
    out = TenderPortfolio(codes=all_codes)
    for i in range(tenders + estimates):
        name = f"tender-{i:02d}" if i < tenders else f"estimate-{i - tenders:02d}"
        level = math.exp(rng.gauss(0, 0.06))
        posts = _project(
            rng, name, all_codes, level=level, plant=plant, truth=out.planted,
            worth=out.true_prices, dear=dear, cheap=cheap,
        )  # fmt: skip
        tool = ("ISY Linker Pluss", "11.5") if i < tenders else ("ISY Beskrivelse", "11.4.3")
        out.files.append(write_ns3459(folder / f"{name}.xml", posts, project=name, program=tool))
    request = _project(rng, "request", all_codes, level=1.0, plant=0.0, truth=[], priced=False)
    out.request = write_ns3459(
        folder / "request.xml", request, kind="Prisforesporsel", project="Ny skole – tekniske"
    )
    by_id = {c.id: c for c in all_codes}
    parents = {p.postnr: p.kode for p in request if p.kode}
    for post in request:
        if post.unit and post.quantity is not None and len(post.parts) == 4:
            code = by_id[parents[".".join(c for _t, c in post.parts[:3])] or ""]
            out.request_truth[post.postnr] = float(post.quantity) * code.price
    return out


def large_request(path: Path, all_codes: list[Code], *, posts: int, seed: int = 1) -> Path:
    """A price request of about ``posts`` priced posts: coded main posts, each with two
    sub-posts, over every building part of chapter 36 and beyond (a large new building's
    technical description), and a lump sum without a code now and then."""
    rng = random.Random(seed)
    made: list[XPost] = []
    main = 0
    while len(made) < posts * 3 // 2:
        main += 1
        code = all_codes[main % len(all_codes)]
        chapter, part = str(30 + main % 10), str(300 + main % 90)
        made.append(XPost(guid=guid(len(made) + 1),
            parts=(("Type1", chapter), ("Type2", part), ("Hovedlopenr", str(main))),
            kode=code.id, overskrift=code.heading))  # fmt: skip
        for sub in (1, 2):
            made.append(XPost(guid=guid(len(made) + 1),
                parts=(("Type1", chapter), ("Type2", part), ("Hovedlopenr", str(main)),
                       ("Underlopenr", str(sub))),
                text=f"Variant {sub}", unit=code.unit,
                quantity=Decimal(rng.randint(*code.sizes)), price=None))  # fmt: skip
    return write_ns3459(path, made, kind="Prisforesporsel", project="Stort nybygg")
