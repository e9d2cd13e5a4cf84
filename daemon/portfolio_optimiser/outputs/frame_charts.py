"""The frame's charts: the S-curve, the shares of the spread, and the swing tornado."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final
from xml.sax.saxutils import escape as xml_escape

from portfolio_optimiser.context.frame import Frame

if TYPE_CHECKING:  # the pipeline package imports agent_framework; the outputs never do
    from portfolio_optimiser.pipeline.outcome import RunResult

    from .report import Redactor

__all__ = [
    "CURVE_SVG",
    "SHARES_SVG",
    "SWING_SVG",
    "frame_files",
    "render_curve_svg",
    "render_shares_svg",
    "render_swing_svg",
]

CURVE_SVG: Final = "frame-s-curve.svg"
SHARES_SVG: Final = "frame-contributors.svg"
SWING_SVG: Final = "frame-swing.svg"
_FONT: Final = 'font-family="sans-serif" font-size="12" fill="#222222"'


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


def render_shares_svg(frame: Frame, *, redactor: Redactor, title: str) -> str:
    """What the spread is made of: each element's and driver's share of the total's standard
    deviation (a variance allocation, not a tornado), one bar each, largest on top."""
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


def render_swing_svg(frame: Frame, *, redactor: Redactor, title: str) -> str:
    """The swing tornado: for each element or driver, the expected cost with it held at its P10
    and at its P90 (the others drawn as usual), a bar between the two about the expected cost,
    widest on top."""
    bars = frame.swings
    label_w, bar_w, value_w, row_h, top = 160, 360, 150, 26, 40
    width, height = label_w + bar_w + value_w, top + row_h * max(1, len(bars)) + 30
    out = _svg(width, height, title)
    if not bars:
        out.append(f'<text x="10" y="{top + 18}" {_FONT}>Nothing swings the cost.</text>')
        out.append("</svg>")
        return "\n".join(out) + "\n"
    low = min(min(b.at_p10_nok, b.at_p90_nok) for b in bars)
    high = max(max(b.at_p10_nok, b.at_p90_nok) for b in bars)
    span = (high - low) or 1.0

    def x(value: float) -> float:
        return label_w + (value - low) / span * (bar_w - 10)

    mean = x(frame.mean_nok)
    for i, bar in enumerate(bars):
        at = top + i * row_h
        left, right = sorted((x(bar.at_p10_nok), x(bar.at_p90_nok)))
        code = xml_escape(redactor.text(bar.code, "a cost code")[:22])
        swing = abs(bar.at_p90_nok - bar.at_p10_nok)
        out += [
            f'<text x="{label_w - 8}" y="{at + 17}" text-anchor="end" {_FONT}>{code}</text>',
            f'<rect x="{left:.1f}" y="{at + 4}" width="{max(right - left, 1):.1f}" '
            f'height="{row_h - 8}" fill="#2b6cb0"/>',
            f'<text x="{label_w + bar_w + 4}" y="{at + 17}" {_FONT}>{_millions(swing)}</text>',
        ]
    bottom = top + row_h * len(bars)
    out += [
        f'<line x1="{mean:.1f}" y1="{top}" x2="{mean:.1f}" y2="{bottom}" stroke="#c05621"/>',
        f'<text x="{mean:.1f}" y="{bottom + 16}" text-anchor="middle" {_FONT}>expected '
        f"{_millions(frame.mean_nok)}</text>",
        "</svg>",
    ]
    return "\n".join(out) + "\n"


def frame_files(result: RunResult, red: Redactor) -> dict[str, bytes]:
    """The frame's three charts, by file name; none for a project with no triple estimate."""
    if result.frame is None:
        return {}
    run = f"{result.project_id}, run {result.run_id}"
    charts = {
        CURVE_SVG: render_curve_svg(result.frame, title=f"The S-curve — {run}"),
        SHARES_SVG: render_shares_svg(
            result.frame,
            redactor=red,
            title=f"Shares of the spread (standard deviation), not a tornado — {run}",
        ),
        SWING_SVG: render_swing_svg(
            result.frame,
            redactor=red,
            title=f"Swing tornado: the expected cost at each one's P10 and P90 — {run}",
        ),
    }
    return {name: text.encode("utf-8") for name, text in charts.items()}
