"""A price request priced from the portfolio: the building owner's second job with NS 3459.

Decides, purely from the request's project (posts with quantities and no prices) and its
snapshot of the reference fit: each post's expected unit price where the portfolio prices its
NS 3420 code in its unit (the comparables' median as written, with their P10 and P90 and how
many they are), the expected sum per building part (the post's NS 3451 part where the file
gives it, else its chapter: the post number's first part) and in all, the share of the posts
that could be priced, and the estimate it becomes: a bundle whose every priced post carries a
triple (P10, median, P90 × quantity) for the frame, said to be derived from the portfolio at
its reference version. Such a bundle is never a comparable (``Project.derived_from``): its
prices are the portfolio's own.

The range in all is the sum of the posts' P10s and of their P90s: the range if every post came
at its comparables' P10 (P90) together. Prices within one project move together (its region,
its market, its bidders), so this is nearer the truth than posts drawn apart, and wider than
any one project's chance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from .imports.posts import Estimate, Origin, Post
from .line_references import LineReference, ProjectReferences
from .models import CostLine, Project
from .vocabulary import normalise_unit

__all__ = ["PricedPost", "PricedRequest", "price_request", "priced_estimate"]

_CENT = Decimal("0.01")


@dataclass(frozen=True)
class PricedPost:
    line: CostLine
    unit: str
    part: str
    reference: LineReference

    @property
    def quantity(self) -> Decimal:
        return Decimal(str(self.line.quantity or 0))

    def at(self, unit_price: float) -> Decimal:
        return (self.quantity * Decimal(str(unit_price))).quantize(_CENT)


@dataclass(frozen=True)
class PricedRequest:
    """A price request's expected cost, post by post, part by part and in all."""

    project: Project
    posts: tuple[PricedPost, ...]
    unpriced: tuple[tuple[str, str], ...]
    """(code, why) of each post with a quantity the portfolio could not price."""
    version: str

    @property
    def share(self) -> float:
        whole = len(self.posts) + len(self.unpriced)
        return len(self.posts) / whole if whole else 0.0

    def total(self, posts: Sequence[PricedPost] | None = None) -> tuple[Decimal, Decimal, Decimal]:
        """(P10s, medians, P90s) summed over ``posts`` (all when None)."""
        chosen = self.posts if posts is None else posts
        return (
            sum((p.at(p.reference.p10_nok) for p in chosen), Decimal(0)),
            sum((p.at(p.reference.median_nok) for p in chosen), Decimal(0)),
            sum((p.at(p.reference.p90_nok) for p in chosen), Decimal(0)),
        )

    def parts(self) -> list[tuple[str, int, tuple[Decimal, Decimal, Decimal]]]:
        """(part, posts priced, its sums) per building part, in part order."""
        by_part: dict[str, list[PricedPost]] = {}
        for post in self.posts:
            by_part.setdefault(post.part, []).append(post)
        return [(part, len(found), self.total(found)) for part, found in sorted(by_part.items())]


def _part(line: CostLine) -> str:
    return line.ns3451 or line.code.split(".", 1)[0]


def price_request(project: Project, references: ProjectReferences) -> PricedRequest | None:
    """The request's posts priced from the snapshot (``ReferenceIndex.assess`` quoted each
    unpriced post it could); None for a bundle that is not a price request."""
    if project.document != "price-request":
        return None
    why = dict(references.unmatched)
    posts: list[PricedPost] = []
    unpriced: list[tuple[str, str]] = []
    for line in project.cost_lines:
        unit = normalise_unit(line.unit)
        if line.quantity is None or line.quantity <= 0 or unit is None:
            continue
        ref = references.get(line.code, unit)
        if ref is None or ref.n < references.min_comparables:
            reason = why.get(line.code) or ("thin" if ref is not None else "unseen")
            unpriced.append((line.code, reason))
            continue
        posts.append(PricedPost(line, unit, _part(line), ref))
    return PricedRequest(project, tuple(posts), tuple(unpriced), references.version)


def priced_estimate(priced: PricedRequest) -> Estimate:
    """The request as an estimate: each priced post at its comparables' median, with the
    triple P10 / median / P90 × quantity; a post the portfolio could not price stays at 0."""
    project = priced.project
    quoted = {p.line.code: p for p in priced.posts}
    posts = []
    for line in project.cost_lines:
        post = quoted.get(line.code)
        origin = Origin(file=line.imported_from or project.id)
        triple: tuple[Decimal | None, Decimal | None, Decimal | None] = (None, None, None)
        amount, price = Decimal(0), None
        if post is not None:
            ref = post.reference
            price = Decimal(str(ref.median_nok))
            amount = post.at(ref.median_nok)
            triple = (post.at(ref.p10_nok), amount, post.at(ref.p90_nok))
        posts.append(
            Post(
                origin=origin,
                code=line.code,
                title=line.title,
                amount=amount,
                quantity=None if line.quantity is None else Decimal(str(line.quantity)),
                unit=line.unit,
                unit_price=price if line.quantity is not None else None,
                ns3451=line.ns3451,
                ns3420=line.ns3420,
                post=line.post,
                low=triple[0],
                likely=triple[1],
                high=triple[2],
            )
        )
    low, median, high = priced.total()
    return Estimate(
        project_id=f"{project.id}-priced",
        name=f"{project.name} (priced from the portfolio)",
        source=f"{project.id} priced from the portfolio",
        digest=priced.version,
        posts=tuple(posts),
        category=project.category,
        header={"derived_from": f"reference {priced.version}"},
        how=(
            f"Priced from the portfolio at reference {priced.version}: {len(priced.posts)} of "
            f"{len(priced.posts) + len(priced.unpriced)} posts with a quantity ({priced.share:.0%}) "
            "at their comparables' median unit price, each with its P10 and P90 as a triple.",
            f"Expected sum {median:,.0f} NOK (P10–P90 {low:,.0f}–{high:,.0f} NOK).".replace(
                ",", " "
            ),
            "Its prices are the portfolio's own: the bundle is never a comparable of another.",
        ),
    )
