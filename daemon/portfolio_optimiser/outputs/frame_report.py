"""The uncertainty frame in the report, in the words a KS2 analyst reads it by: the governing
frame (the project's stated one where it gives it) with the simulation beside it as a
cross-check, the reserve (usikkerhetsavsetning) and the expected addition (forventet tillegg)
apart, every simulated figure rounded to what its Monte Carlo error supports, flags where the
simulation diverges from the stated frame or the kostnadsramme falls below the styringsramme,
each candidate's effect, and three charts (``frame_charts``).

A cost expert reads a measure by what it does to P50 and P85 and by when it must be decided, as a
kuttliste is read: the candidates are listed here by their decision point (the date it begins
with; one without a date last), then by how far they lower P85. The
report says what the frame assumed (lines taken as certain, the correlation used, the samples and
the seed), never leaving a reader to guess.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from datetime import date
from decimal import ROUND_HALF_EVEN, Decimal
from typing import TYPE_CHECKING, Final

from portfolio_optimiser.context.frame import Frame
from portfolio_optimiser.context.ns3451 import ns3451_name
from portfolio_optimiser.context.uncertainty import STABLE_TO

from ._markdown import format_nok
from ._markdown import md as _md
from .frame_charts import CURVE_SVG, SHARES_SVG, SWING_SVG

if TYPE_CHECKING:  # the pipeline package imports agent_framework; the outputs never do
    from portfolio_optimiser.pipeline.outcome import CandidateRun, RunResult

    from .report import Redactor

__all__ = ["decision_date", "frame_section", "kroner", "rounded"]

_DATE: Final = re.compile(r"\d{4}-\d{2}-\d{2}")


def kroner(value: float) -> str:
    """A figure to the krone, as the reports write one."""
    return format_nok(Decimal(repr(value)).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def _signed(value: float) -> str:
    shown = kroner(value)
    return shown if shown.startswith("-") or shown == "0" else "+" + shown


def rounded(value: float, error: float) -> str:
    """A simulated figure to the step its standard error supports (an error of 35 000 shows it
    to the ten thousand), with the error beside it; an exact one to the krone."""
    if error <= 0.5:
        return kroner(value)
    step = 10 ** math.floor(math.log10(error))
    shown = kroner(round(value / step) * step)
    return f"{shown} ± {kroner(round(error / step) * step)}"


def _figures(frame: Frame) -> list[str]:
    e = frame.errors
    stated = frame.basis == "stated"
    reserve = frame.kostnadsramme_nok + frame.kuttliste_nok - frame.styringsramme_nok
    rows = [
        ("base estimate (basiskalkyle)", kroner(frame.base_nok), kroner(frame.base_nok)),
        (
            "expected addition (forventet tillegg: the mean less the base)",
            "",
            rounded(frame.expected_addition_nok, e["mean"]),
        ),
        ("P10", "", rounded(frame.p10_nok, e["p10"])),
        ("P50 (styringsramme)", kroner(frame.styringsramme_nok), rounded(frame.p50_nok, e["p50"])),
        (
            "P85",
            kroner(frame.kostnadsramme_nok + frame.kuttliste_nok),
            rounded(frame.p85_nok, e["p85"]),
        ),
        ("P90", "", rounded(frame.p90_nok, e["p90"])),
        (
            "reserve (usikkerhetsavsetning: P85 less P50)",
            kroner(reserve),
            rounded(frame.reserve_nok, e["reserve"]),
        ),
        ("the kuttliste's value", kroner(frame.kuttliste_nok), kroner(frame.kuttliste_nok)),
        (
            "kostnadsramme (P85 less the kuttliste)",
            f"**{kroner(frame.kostnadsramme_nok)}**",
            rounded(frame.simulated_kostnadsramme_nok, e["p85"]),
        ),
    ]
    governing = "stated (governs)" if stated else "simulated (governs)"
    lines = [
        f"| figure | {governing} (NOK) | simulated ± standard error (NOK) |",
        "|---|---:|---:|",
    ]
    lines += [f"| {name} | {given} | {simulated} |" for name, given, simulated in rows]
    return [*lines, "", *_verdicts(frame)]


def _verdicts(frame: Frame) -> list[str]:
    """What the frame says of itself: which figures govern, and what does not hold together."""
    if frame.basis == "stated":
        said = [
            "The project states its approved frame: that frame governs (kostnadsramme = the stated "
            "P85 less the validated kuttliste); the simulation beside it is a cross-check."
        ]
    else:
        said = [
            "The project states no P85: the simulated frame governs (state `p50_nok` and "
            "`p85_nok` on the project once a frame is approved, and it will govern instead)."
        ]
    if frame.divergent and frame.divergence is not None:
        said.append(
            f"**The simulation diverges from the stated frame**: its P85 stands "
            f"{frame.divergence:+.1%} from the stated one, beyond the "
            f"{frame.divergence_allowed:.0%} that [uncertainty] divergence allows. Check the triple estimates, the drivers and the events against the "
            "approved analysis, or the stated frame against the estimate."
        )
    if frame.incoherent:
        said.append(
            f"**Incoherent: the kostnadsramme ({kroner(frame.kostnadsramme_nok)}) is below the "
            f"styringsramme ({kroner(frame.styringsramme_nok)})**: the kuttliste's validated items "
            f"({', '.join(frame.incoherent)}) are worth {kroner(frame.kuttliste_nok)} NOK, more than "
            "the reserve P85 less P50 they are held against. Take items off the kuttliste, "
            "largest first, or revisit the frame."
        )
    return said


def _moved(value: float, error: float) -> str:
    shown = rounded(value, error)
    return shown if shown.startswith("-") or shown.startswith("0") else "+" + shown


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
    said += _drivers(frame, codes)
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
        said += _between(frame, red)
        said.append(
            "- Lines of different groups, or of none, are taken as independent"
            + (" unless their groups are correlated above." if frame.correlation_between else ".")
            + " A coefficient correlates the lines' normal scores, not their costs."
        )
    else:
        said.append(
            "- No correlation declared: every line is taken as independent of every other, which "
            "understates P85 when lines move together (declare `correlation` on the project and "
            "`correlation_group` on its lines)."
        )
    said.append(
        f"- {frame.samples:,} samples".replace(",", " ")
        + f", seed {frame.seed}: P85 is within {frame.stable_to:.2%} of its value (95 %); "
        "the samples grow until P85 (0.5 %), the reserve (2 %) and each candidate's ΔP85 (5 % "
        "or 20 000 NOK) are within their targets. Each simulated figure is shown to the step "
        "its standard error supports, ± that error: another seed moves it by about that much."
    )
    if frame.stable_to > STABLE_TO:
        said.append(
            "- **P85 is not stable to 0.5 %**: it moves with the draws by more than that, and "
            "more samples did not narrow it (it sits on a jump, as where an event's probability "
            "falls). Read it with the S-curve about it."
        )
    return said


def _accounts(frame: Frame) -> list[str]:
    """Each building part's own P-curve, at its four points."""
    if len(frame.accounts) < 2:
        return []
    lines = [
        "Each building part (NS 3451; 8 and 9 as NS 3453 counts them) on its own, as the "
        "simulation draws it: its P-curve at four points (the parts' P85s do not add up to the "
        "project's: they do not all run high in the same samples):",
        "",
        "| building part | P10 | P50 | P85 | P90 (NOK, to four figures) |",
        "|---|---:|---:|---:|---:|",
    ]
    for part, q in frame.accounts.items():
        name = ns3451_name(part)
        shown = " | ".join(_figures4(q[k]) for k in ("p10", "p50", "p85", "p90"))
        lines.append(f"| {part} {name} | {shown} |" if name else f"| {part} | {shown} |")
    return [*lines, ""]


def _figures4(value: float) -> str:
    """To four significant figures: an account's quantiles carry the simulation's noise."""
    if value == 0:
        return "0"
    step = 10 ** max(math.floor(math.log10(abs(value))) - 3, 0)
    return kroner(round(value / step) * step)


def _between(frame: Frame, red: Redactor) -> list[str]:
    if not frame.correlation_between:
        return []
    pairs = [
        f"{_md(red.text(a, 'a factor'))} with {_md(red.text(b, 'a factor'))} {rho:g}"
        for a, row in frame.correlation_between.items()
        for b, rho in row.items()
        if rho
    ]
    said = [f"- Across groups and drivers (correlation_between): {', '.join(pairs) or 'none'}."]
    if frame.correlation_repaired is not None:
        said.append(
            "- **The stated coefficients are no correlation matrix** (not positive "
            "semi-definite): simulated with the nearest correlation matrix ([uncertainty] repair "
            f'= "nearest"; Higham 2002), which moved a coefficient by up to '
            f"{frame.correlation_repaired:.3f}; the coefficients above are those used."
        )
    return said


def _drivers(frame: Frame, codes: Callable[[Sequence[str]], str]) -> list[str]:
    said = []
    for driver in frame.drivers:
        lines = f"{len(driver.lines)} line(s): {codes(driver.lines)}"
        if driver.origin == "maturity":
            said.append(
                f"- **Assumed, not given** (no min_nok and max_nok): {lines}, drawn at their "
                f"amounts times one estimate-maturity factor for the account ({driver.id}, "
                f"{driver.low:.0%} to {driver.high:.0%}, most likely 100 %; [uncertainty] spread "
                "or spreads), never one factor a line, so the reserve does not shrink as the "
                "estimate is broken down. Give them their own triple estimates to replace it."
            )
            continue
        where = "the bundle" if driver.origin == "bundle" else "[uncertainty.drivers]"
        said.append(
            f"- Uncertainty driver (usikkerhetsdriver) {driver.id} (from {where}): a multiplier "
            f"{driver.low:g} / {driver.likely:g} / {driver.high:g}, drawn once a sample for its "
            f"{lines}."
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
            f"| {_moved(delta.p50_nok, delta.p50_error_nok)} "
            f"| {_moved(delta.p85_nok, delta.p85_error_nok)} | {when} |"
        )
    if frame.joint is not None:
        lines.append(
            f"| all {len(frame.adopted)} validated, together "
            f"| {_moved(frame.joint.p50_nok, frame.joint.p50_error_nok)} "
            f"| {_moved(frame.joint.p85_nok, frame.joint.p85_error_nok)} | |"
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
        "measure declared `effect: proportional` takes the same share of every simulated draw of "
        "its lines as its saving is of their base amounts, and so that share of their "
        "uncertainty too. At P85 the samples are those in which costs ran high, its lines' among "
        "them, so the share is taken of more than their base amounts. A measure of `effect: "
        "fixed` (the default) takes its sum off and leaves the spread; one with its own range "
        "(saving_min_nok, saving_max_nok) moves P85 by what it may fall short.",
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
        *_accounts(frame),
        "What each candidate, adopted now, does to P50 and P85 (on the same samples; a measure "
        "held on the kuttliste instead leaves P50 alone and is counted in the kostnadsramme), "
        "the next decision point first, then the largest cut to P85:",
        "",
        *_deltas(result, frame, red),
        "",
        f"![The S-curve: the cost at each probability]({CURVE_SVG})",
        "",
        "The swing tornado: the expected cost with each element or driver held at its P10 and "
        "at its P90, the others drawn as usual (what it can swing the cost by):",
        "",
        f"![Swing tornado]({SWING_SVG})",
        "",
        "The shares of the spread: each element's and driver's covariance with the total over "
        "the total's standard deviation (they add up to it; a variance allocation, not a "
        "tornado):",
        "",
        f"![Shares of the spread]({SHARES_SVG})",
        "",
    ]
