"""The uncertainty frame in the report: P50 and P85 with the kostnadsramme, each candidate's effect
on them, and two charts — the S-curve and the largest contributors (a tornado).

A cost expert reads a measure by what it does to P50 and P85 and by when it must be decided, as a
kuttliste is read: the candidates are listed here by their decision point (the date it begins
with; one without a date last), then by how far they lower P85. Every figure is rounded to whole kroner; the
report says what the frame assumed (lines taken as certain, the correlation used, the samples and
the seed), never leaving a reader to guess.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date
from decimal import ROUND_HALF_EVEN, Decimal
from typing import TYPE_CHECKING, Final
from xml.sax.saxutils import escape as xml_escape

from portfolio_optimiser.context.frame import Frame
from portfolio_optimiser.context.uncertainty import STABLE_TO

from ._markdown import format_nok
from ._markdown import md as _md

if TYPE_CHECKING:  # the pipeline package imports agent_framework; the outputs never do
    from portfolio_optimiser.pipeline.outcome import CandidateRun, RunResult

    from .report import Redactor

__all__ = [
    "CURVE_SVG",
    "TORNADO_SVG",
    "decision_date",
    "frame_files",
    "frame_section",
    "outcome_section",
    "render_curve_svg",
    "render_tornado_svg",
]

CURVE_SVG: Final = "frame-s-curve.svg"
TORNADO_SVG: Final = "frame-contributors.svg"
_FONT: Final = 'font-family="sans-serif" font-size="12" fill="#222222"'
_DATE: Final = re.compile(r"\d{4}-\d{2}-\d{2}")


def _kr(value: float) -> str:
    return format_nok(Decimal(repr(value)).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def _signed(value: float) -> str:
    shown = _kr(value)
    return shown if shown.startswith("-") or shown == "0" else "+" + shown


def _figures(frame: Frame) -> list[str]:
    stated = {"P50": frame.stated_p50_nok, "P85": frame.stated_p85_nok}
    rows = [
        ("P10", frame.p10_nok, None),
        ("P50 (styringsramme)", frame.p50_nok, stated["P50"]),
        ("P85", frame.p85_nok, stated["P85"]),
        ("P90", frame.p90_nok, None),
        ("the kuttliste's value", frame.kuttliste_nok, None),
        ("kostnadsramme (P85 less the kuttliste)", frame.kostnadsramme_nok, None),
    ]
    lines = ["| figure | simulated (NOK) | the project states (NOK) |", "|---|---:|---:|"]
    lines += [
        f"| {name} | {_kr(value)} | {_kr(given) if given is not None else ''} |"
        for name, value, given in rows
    ]
    return lines


def _assumed(frame: Frame, red: Redactor) -> list[str]:
    def codes(found: Sequence[str]) -> str:
        return ", ".join(_md(red.text(code, "a cost code")) for code in found)

    said = [
        f"- Simulated from the triple estimates of {len(frame.uncertain)} line(s): "
        f"{codes(frame.uncertain)}."
    ]
    if frame.kuttliste_left_out:
        said.append(
            "- The kuttliste's value counts its validated items only; not counted: "
            + ", ".join(
                _md(red.text(item, "a kuttliste item")) for item in frame.kuttliste_left_out
            )
            + " (the candidates table says why)."
        )
    if frame.uncertainties:
        risks = [
            _md(red.text(name, "an uncertainty element"))
            + ("" if p >= 1 else f" (an event, {p:.0%} likely)")
            for name, p in frame.uncertainties.items()
        ]
        said.append(f"- Uncertainty elements beside the lines: {', '.join(risks)}.")
    if frame.assumed:
        by_spread: dict[tuple[float, float], list[str]] = {}
        for code, spread in frame.assumed.items():
            by_spread.setdefault((spread[0], spread[1]), []).append(code)
        for (low, high), found in sorted(by_spread.items()):
            said.append(
                f"- **Assumed, not given** (no min_nok and max_nok): {codes(found)} drawn from "
                f"{low:.0%} to {high:.0%} of their amounts ([uncertainty] spread or spreads). "
                "Give them their own triple estimates to replace the assumption."
            )
    if frame.certain:
        said.append(
            f"- **Taken as certain, at their amount** (no min_nok and max_nok given): "
            f"{codes(frame.certain)}. Give them a triple estimate to have their uncertainty "
            "counted."
        )
    if frame.correlation:
        for group, coefficient in sorted(frame.correlation.items()):
            members = frame.groups.get(group, ())
            said.append(
                f"- Correlation group {_md(red.text(group, 'a correlation group'))}: "
                f"{coefficient:g} between its lines ({codes(members) or 'no line'})."
            )
        said.append("- Lines of different groups, or of none, are taken as independent.")
    else:
        said.append(
            "- No correlation declared: every line is taken as independent of every other, which "
            "understates P85 when lines move together (declare `correlation` on the project and "
            "`correlation_group` on its lines)."
        )
    said.append(
        f"- {frame.samples:,} samples".replace(",", " ")
        + f", seed {frame.seed}: P85 is within {frame.stable_to:.2%} of its value over them "
        "(95 %). The same bundle and seed give the same figures."
    )
    if frame.stable_to > STABLE_TO:
        said.append(
            "- **P85 is not stable to 0.5 %**: it moves with the draws by more than that, and "
            "more samples did not narrow it (it sits on a jump, as where an event's probability "
            "falls). Read it with the S-curve about it."
        )
    return said


def decision_date(decide_by: str | None) -> date | None:
    """The date a decision point begins with (``2027-03-01, before the facade contract``)."""
    found = _DATE.match(decide_by or "")
    if found is None:
        return None
    try:
        return date.fromisoformat(found.group(0))
    except ValueError:
        return None


def _deltas(result: RunResult, frame: Frame, red: Redactor) -> list[str]:
    def rank(run: CandidateRun) -> tuple[date, float, str]:
        when = decision_date(run.candidate.decide_by) or date.max
        return when, frame.deltas[run.candidate.id].p85_nok, run.candidate.id

    ranked = sorted(
        (run for run in result.candidates if run.candidate.id in frame.deltas), key=rank
    )
    if not ranked:
        return ["No candidate touches a line of the frame."]
    lines = [
        "| candidate | ΔP50 (NOK) | ΔP85 (NOK) | decide by |",
        "|---|---:|---:|---|",
    ]
    for run in ranked:
        delta = frame.deltas[run.candidate.id]
        when = _md(red.text(run.candidate.decide_by or "", "a decision point"))
        lines.append(
            f"| `{run.candidate.id}` {_md(red.text(run.candidate.title, 'a candidate title'))} "
            f"| {_signed(delta.p50_nok)} | {_signed(delta.p85_nok)} | {when} |"
        )
    if frame.joint is not None:
        lines.append(
            f"| all {len(frame.adopted)} validated, together "
            f"| {_signed(frame.joint.p50_nok)} | {_signed(frame.joint.p85_nok)} | |"
        )
    return lines + _beyond_saving(ranked, frame)


def _beyond_saving(ranked: Sequence[CandidateRun], frame: Frame) -> list[str]:
    """Why a ΔP50 or ΔP85 can exceed the saving (said once, with the first such candidate), as
    ``context.frame`` models a measure: the saving's share of each of its lines' draws."""

    def cut(run: CandidateRun) -> tuple[str, float]:
        delta = frame.deltas[run.candidate.id]
        return max((("ΔP50", delta.p50_nok), ("ΔP85", delta.p85_nok)), key=lambda d: abs(d[1]))

    over = [
        run
        for run in ranked
        if abs(round(cut(run)[1])) > Decimal(str(run.candidate.claimed_saving_nok))
    ]
    if not over:
        return []
    name, value = cut(over[0])
    return [
        "",
        f"A cut larger than the saving itself ({len(over)} of the {len(ranked)} here; "
        f"`{over[0].candidate.id}`: {name} {_signed(value)} NOK against a saving of "
        f"{format_nok(over[0].candidate.claimed_saving_nok)} NOK) is the model, not an error: a "
        "measure takes the same share of every simulated draw of its lines as its saving is of "
        "their base amounts, and so that share of their uncertainty too. At P85 the samples are "
        "those in which costs ran high, its lines' among them, so the share is taken of more "
        "than their base amounts; at P50 too, where the lines' ranges reach further above their "
        "amounts than below them.",
    ]


def outcome_section(result: RunResult, red: Redactor) -> list[str]:
    """A finished project's final cost against the frames it was steered by."""
    found = result.backtest
    if found is None:
        return []
    basis = (
        "the P50 and P85 the project states"
        if found.basis == "stated"
        else "the simulated frame's P50 and P85 (the project does not state both)"
    )

    def against(name: str, frame: float) -> str:
        word = "above" if found.final_cost_nok > frame else "within"
        share = (found.final_cost_nok - frame) / frame if frame else 0.0
        return f"{word} its {name} ({_kr(frame)} NOK, {share:+.1%})"

    when = (
        f", completed {_md(red.text(found.completed, 'a completion date'))}"
        if found.completed
        else ""
    )
    return [
        "## The outcome",
        "",
        f"The project finished at **{_kr(found.final_cost_nok)} NOK**{when}: "
        f"{against('P85', found.p85_nok)} and {against('P50', found.p50_nok)}, judged against "
        f"{basis}.",
        "",
    ]


def frame_section(result: RunResult, red: Redactor) -> list[str]:
    """The report's section on the frame; none for a project with no triple estimate."""
    frame = result.frame
    if frame is None:
        return []
    return [
        "## The uncertainty frame: P50 and P85",
        "",
        *_figures(frame),
        "",
        *_assumed(frame, red),
        "",
        "What each candidate, adopted now, does to P50 and P85 (on the same samples; a measure "
        "held on the kuttliste instead leaves P50 alone and is counted in the kostnadsramme), "
        "the next decision point first, then the largest cut to P85:",
        "",
        *_deltas(result, frame, red),
        "",
        f"![The S-curve: the cost at each probability]({CURVE_SVG})",
        "",
        f"![The largest contributors to the spread]({TORNADO_SVG})",
        "",
    ]


def _svg(width: int, height: int, title: str) -> list[str]:
    safe = xml_escape(title, {'"': "&quot;"})
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img">',
        f"<title>{safe}</title>",
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="10" y="22" font-family="sans-serif" font-size="15" fill="#222222">{safe}</text>',
    ]


def _millions(value: float) -> str:
    return f"{value / 1e6:,.1f}".replace(",", " ").replace(".", ",") + " M"


def render_curve_svg(frame: Frame, *, title: str) -> str:
    """The S-curve: the cost (x) against the probability it is not exceeded (y), with P50 and
    P85 marked and the kostnadsramme drawn beside them."""
    width, height, left, right, top, bottom = 640, 360, 70, 20, 40, 50
    low, high = frame.curve[0], frame.curve[-1]
    span = (high - low) or 1.0

    def x(value: float) -> float:
        return left + (value - low) / span * (width - left - right)

    def y(share: float) -> float:
        return height - bottom - share * (height - top - bottom)

    last = len(frame.curve) - 1
    path = " ".join(
        f"{'M' if i == 0 else 'L'}{x(value):.1f},{y(i / last):.1f}"
        for i, value in enumerate(frame.curve)
    )
    out = _svg(width, height, title)
    out.append(f'<path d="{path}" fill="none" stroke="#2b6cb0" stroke-width="2"/>')
    marks = [("P50", frame.p50_nok, 0.5), ("P85", frame.p85_nok, 0.85)]
    for name, value, share in marks:
        out += [
            f'<line x1="{x(value):.1f}" y1="{y(0):.1f}" x2="{x(value):.1f}" y2="{y(share):.1f}" '
            'stroke="#888888" stroke-dasharray="4 3"/>',
            f'<text x="{x(value) + 4:.1f}" y="{y(share) - 4:.1f}" {_FONT}>{name} '
            f"{_millions(value)}</text>",
        ]
    if low <= frame.kostnadsramme_nok <= high:
        at = x(frame.kostnadsramme_nok)
        out += [
            f'<line x1="{at:.1f}" y1="{y(0):.1f}" x2="{at:.1f}" y2="{y(1):.1f}" '
            'stroke="#c05621" stroke-width="1.5"/>',
            f'<text x="{at + 4:.1f}" y="{y(1) + 12:.1f}" {_FONT}>kostnadsramme</text>',
        ]
    out += [
        f'<text x="{left}" y="{height - 18}" {_FONT}>{_millions(low)}</text>',
        f'<text x="{width - right}" y="{height - 18}" text-anchor="end" {_FONT}>'
        f"{_millions(high)} NOK</text>",
        f'<text x="{left - 6}" y="{y(1) + 4:.1f}" text-anchor="end" {_FONT}>100 %</text>',
        f'<text x="{left - 6}" y="{y(0) + 4:.1f}" text-anchor="end" {_FONT}>0 %</text>',
        "</svg>",
    ]
    return "\n".join(out) + "\n"


def render_tornado_svg(frame: Frame, *, redactor: Redactor, title: str) -> str:
    """The largest contributors to the total's spread: each line's share of its standard
    deviation, one bar each, largest on top."""
    bars = frame.contributors
    label_w, bar_w, value_w, row_h, top = 120, 360, 130, 26, 40
    width, height = label_w + bar_w + value_w, top + row_h * max(1, len(bars)) + 12
    out = _svg(width, height, title)
    widest = max((bar.deviation_nok for bar in bars), default=0.0) or 1.0
    if not bars:
        out.append(f'<text x="10" y="{top + 18}" {_FONT}>No line adds to the spread.</text>')
    for i, bar in enumerate(bars):
        at = top + i * row_h
        length = max(1, round(bar.deviation_nok / widest * (bar_w - 10)))
        code = xml_escape(redactor.text(bar.code, "a cost code")[:16])
        out += [
            f'<text x="{label_w - 8}" y="{at + 17}" text-anchor="end" {_FONT}>{code}</text>',
            f'<rect x="{label_w}" y="{at + 4}" width="{length}" height="{row_h - 8}" '
            'fill="#2b6cb0"/>',
            f'<text x="{label_w + length + 6}" y="{at + 17}" {_FONT}>'
            f"{_millions(bar.deviation_nok)}</text>",
        ]
    out.append("</svg>")
    return "\n".join(out) + "\n"


def frame_files(result: RunResult, red: Redactor) -> dict[str, bytes]:
    """The frame's two charts, by file name; none for a project with no triple estimate."""
    if result.frame is None:
        return {}
    run = f"{result.project_id}, run {result.run_id}"
    curve = render_curve_svg(result.frame, title=f"The S-curve — {run}")
    tornado = render_tornado_svg(
        result.frame, redactor=red, title=f"The largest contributors to the spread — {run}"
    )
    return {CURVE_SVG: curve.encode("utf-8"), TORNADO_SVG: tornado.encode("utf-8")}
