"""The building owner's two sections of a report: a tender checked post by post, and a price
request priced; and the priced request as a bundle beside the report (``priced/``).

Decides what a building owner reads: how much of a tender the portfolio could compare (by sum)
and why each other post could not; its dear posts (the candidates, with their comparables) and
its cheap ones (risks, with the sum at stake), each by id, so a verdict can be written on either;
a request's expected sum in all and per building part with its P10–P90 and the share priced,
each priced post with its comparables, and the reference version it all came from.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Final

from portfolio_optimiser.context.imports.bundle import bundle_files_of
from portfolio_optimiser.context.models import REFERENCE_PRICE
from portfolio_optimiser.context.priced_request import priced_estimate
from portfolio_optimiser.context.tender import UNCOMPARED

from ._markdown import format_nok, md

if TYPE_CHECKING:  # the pipeline package imports agent_framework; the outputs never do
    from portfolio_optimiser.context.line_references import LineReference
    from portfolio_optimiser.pipeline.outcome import CandidateRun, RunResult

    from .report import Redactor

__all__ = ["PRICED_FOLDER", "priced_files", "priced_section", "tender_section"]

PRICED_FOLDER: Final = "priced"
_SHOWN: Final = 50
"""Rows of a long table shown; the rest are counted (the bundle and proposals.json hold all)."""


def _percent(share: float) -> str:
    """``0.998`` → ``99,8 %``: never a whole 100 % for a share short of it."""
    shown = f"{share:.0%}" if share in (0.0, 1.0) or 0.01 <= share <= 0.99 else f"{share:.1%}"
    return shown.replace("%", " %").replace(".", ",")


def _kr(value: Decimal) -> str:
    """A sum in whole kroner: an expected cost is no truer to the øre."""
    return format_nok(value.quantize(Decimal(1)))


def _among(ref: LineReference, red: Redactor) -> str:
    among = f"{ref.n} {md(ref.category)} projects" if ref.category else f"{ref.n} projects"
    return f"{among}: median {format_nok(ref.median_nok)}, P10–P90 {format_nok(ref.p10_nok)}–" + (
        f"{format_nok(ref.p90_nok)} NOK/{md(red.text(ref.unit, 'a unit'))}"
    )


def _posts_table(
    runs: list[CandidateRun], result: RunResult, red: Redactor, *, risk: bool
) -> list[str]:
    figure = "at stake if the quantity doubles (NOK)" if risk else "saving (NOK)"
    lines = [
        f"| id | post | bid, NOK per unit | measured against | grade | {figure} |",
        "|---|---|---:|---|---|---:|",
    ]
    for run in runs:
        cand = run.candidate
        ref = result.references.get(cand.id)
        line = result.lines.get(cand.affected_codes[0])
        if ref is None or line is None:
            continue
        where = f"candidate {cand.id}"
        title = md(red.text(line.title or "", where))
        code = md(red.text(cand.affected_codes[0], where))
        shown = cand.at_stake_nok if risk else cand.claimed_saving_nok
        lines.append(
            f"| `{cand.id}` | {code} {title} | {format_nok(line.unit_price_nok or 0)} | "
            f"{_among(ref, red)} | {cand.grade or ''} | {format_nok(shown or 0)} |"
        )
    return lines


def tender_section(result: RunResult, red: Redactor) -> list[str]:
    """A tender against the portfolio: what could be compared, its dear and its cheap posts."""
    cover = result.tender
    if cover is None:
        return []
    asked = [r for r in result.candidates if r.awaits_verdict]
    dear = [r for r in asked if r.candidate.measure_type == REFERENCE_PRICE]
    cheap = [r for r in asked if r.candidate.is_risk]
    out = [
        "## The tender against the portfolio",
        "",
        f"{cover.compared} of {cover.posts} priced posts could be compared with what the portfolio "
        f"has paid for the same NS 3420 work in the same unit: {format_nok(round(cover.compared_nok))}"
        f" of {format_nok(round(cover.total_nok))} NOK, **{_percent(cover.share)} of the tender's "
        "sum**. Each post is measured at the tender's own price level (its other posts), so a "
        "bidder dear or cheap on everything flags nothing by that alone.",
        "",
    ]
    if dear:
        out += [
            f"**Priced far above** ({len(dear)}): savings to negotiate, counted in the validated "
            "saving.",
            "",
            *_posts_table(dear, result, red, risk=False),
            "",
        ]
    if cheap:
        stake = sum((Decimal(str(r.candidate.at_stake_nok or 0)) for r in cheap), Decimal(0))
        out += [
            f"**Priced far below** ({len(cheap)}): an unbalanced bid is a risk, not a saving; "
            f"{format_nok(stake)} NOK at stake if each quantity doubled, counted in no total. Ask "
            "the bidder to confirm these prices and check the quantities.",
            "",
            *_posts_table(cheap, result, red, risk=True),
            "",
        ]
    if not dear and not cheap:
        out += ["No compared post lies far enough from the portfolio's prices to tell.", ""]
    if cover.uncompared:
        counts: dict[str, tuple[int, float]] = {}
        for _code, why, amount in cover.uncompared:
            n, total = counts.get(why, (0, 0.0))
            counts[why] = (n + 1, total + amount)
        out += ["Not compared:", ""]
        for why, (n, total) in sorted(counts.items(), key=lambda kv: -kv[1][1]):
            codes = [md(red.text(c, "a post")) for c, w, _a in cover.uncompared if w == why]
            listed = ", ".join(codes[:10]) + (
                f" and {len(codes) - 10} more" if len(codes) > 10 else ""
            )
            out.append(
                f"- {n} post(s), {format_nok(round(total))} NOK: {UNCOMPARED[why]} ({listed})"
            )
        out.append("")
    return out


def priced_section(result: RunResult, red: Redactor) -> list[str]:
    """A price request's expected cost, in all and per building part, and its priced posts."""
    priced = result.priced
    if priced is None:
        return []
    low, median, high = priced.total()
    whole = len(priced.posts) + len(priced.unpriced)
    out = [
        "## What this request should cost",
        "",
        f"Priced from the portfolio (reference {priced.version}): {len(priced.posts)} of {whole} "
        f"posts with a quantity, **{_percent(priced.share)}**, at the median unit price of the "
        f"projects that priced the same NS 3420 code in the same unit. Expected sum of the priced "
        f"posts **{_kr(median)} NOK**, P10–P90 {_kr(low)}–{_kr(high)} NOK "
        "(every post at its comparables' P10, or P90, together: prices in one project move "
        f"together). The bundle `{PRICED_FOLDER}/` beside this report holds it as an estimate, "
        "each priced post with that triple, for the frame; drop it into `inbox/projects/` to run "
        "it as a project (its prices are the portfolio's own: it is never a comparable).",
        "",
        "| building part | posts priced | P10 (NOK) | expected (NOK) | P90 (NOK) |",
        "|---|---:|---:|---:|---:|",
    ]
    for part, n, (p_low, p_mid, p_high) in priced.parts():
        out.append(
            f"| {md(red.text(part, 'a building part'))} | {n} | {_kr(p_low)} | "
            f"{_kr(p_mid)} | {_kr(p_high)} |"
        )
    out += [
        f"| **in all** | {len(priced.posts)} | {_kr(low)} | {_kr(median)} | {_kr(high)} |",
        "",
        "| post | quantity | comparables | expected (NOK) |",
        "|---|---:|---|---:|",
    ]
    for post in priced.posts[:_SHOWN]:
        where = f"post {post.line.code}"
        out.append(
            f"| {md(red.text(post.line.code, where))} {md(red.text(post.line.title, where))} | "
            f"{format_nok(post.quantity)} {md(red.text(post.unit, where))} | "
            f"{_among(post.reference, red)} | {_kr(post.at(post.reference.median_nok))} |"
        )
    if len(priced.posts) > _SHOWN:
        out.append(f"| … {len(priced.posts) - _SHOWN} more in `{PRICED_FOLDER}/` | | | |")
    out.append("")
    if priced.unpriced:
        counts: dict[str, int] = {}
        for _code, why in priced.unpriced:
            counts[why] = counts.get(why, 0) + 1
        said = "; ".join(f"{n}: {UNCOMPARED[why]}" for why, n in sorted(counts.items()))
        out += [f"Not priced ({len(priced.unpriced)} posts): {said}.", ""]
    return out


def priced_files(result: RunResult, red: Redactor) -> dict[str, bytes]:
    """The priced request as a bundle, by run-folder path; none for anything else."""
    if result.priced is None:
        return {}
    files = bundle_files_of(priced_estimate(result.priced))
    return {
        f"{PRICED_FOLDER}/{rel}": red.text(text, f"the priced bundle's {rel}").encode("utf-8")
        for rel, text in files.items()
    }
