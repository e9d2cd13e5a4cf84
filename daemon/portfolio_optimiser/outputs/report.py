"""The people-facing part of a run's outputs: ``report.md`` and ``savings-by-code.svg``.

Decides: what a reader is told about one run — the summary sentence, the table of candidates, the
chart of validated savings and what to do next — and how untrusted text is made safe to show. Every
string goes through :class:`Redactor` (secrets and terminal control sequences out) and then through
markdown or XML escaping (so a title cannot break the table or smuggle in raw HTML). A string that
redaction refuses is replaced, and the report says so in a sentence instead of showing it.

"Validated saving" means accepted by the validator *and* not blocked by the checker: a candidate the
checker rejected is not money anyone should count on, so it is reported but never summed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from decimal import ROUND_HALF_EVEN, Decimal
from typing import TYPE_CHECKING, Any, Final
from xml.sax.saxutils import escape as xml_escape

from portfolio_optimiser.reasoning.redaction import RedactionRefused, scrub_value

from ._markdown import format_nok
from ._markdown import md as _md
from .candidate_table import candidates_table
from .explained import (
    changes_section,
    learned_section,
    precedents_section,
    references_section,
    sources_section,
)
from .frame_report import frame_section
from .outcome_report import outcome_section
from .tender_report import priced_section, tender_section
from .worksheet import decision_cell, worksheet_section

if TYPE_CHECKING:  # the pipeline package imports agent_framework; the outputs never do
    from portfolio_optimiser.pipeline.outcome import RunResult

__all__ = [
    "SVG_NAME",
    "WITHHELD",
    "Redactor",
    "format_nok",
    "render_report",
    "render_savings_svg",
    "savings_by_code",
]

SVG_NAME: Final = "savings-by-code.svg"
WITHHELD: Final = "[withheld: redaction refused this text]"
BAR_WIDTH: Final = 30
_NOT_XML: Final = re.compile("[\ufffe\uffff]")

_STOP_REASONS: Final[Mapping[str, str]] = {
    "proposer_done": "the proposer said it had nothing more to propose",
    "max_attempts": "the proposer used all its attempts",
    "max_candidates": "the run reached its limit of candidates",
    "local_rules": "the local rules proposed everything they could",
    "no_candidates": "no candidate was found",
    "timeout": "the run reached its time limit",
    "proposer_failed": "the proposer did not answer, so the local rules' candidates stand",
}


class Redactor:
    """Scrubs every string of an output; remembers what was stripped and what was withheld."""

    def __init__(self) -> None:
        self.kinds: set[str] = set()
        self._withheld: dict[str, None] = {}

    @property
    def withheld(self) -> tuple[str, ...]:
        """Where text was withheld, in the order first met (deterministic for the same input)."""
        return tuple(self._withheld)

    def text(self, value: str, where: str) -> str:
        try:
            clean: str = scrub_value(value, self.kinds)
        except RedactionRefused:
            # The private key cannot be cut out safely; the place is named, never the text.
            self._withheld[where] = None
            return WITHHELD
        # A lone surrogate cannot be written as UTF-8; it is replaced rather than failing the run.
        return clean.encode("utf-8", "replace").decode("utf-8")

    def value(self, value: Any, where: str) -> Any:
        """A JSON-like value with every string (keys included) scrubbed, one string at a time."""
        if isinstance(value, str):
            return self.text(value, where)
        if isinstance(value, Mapping):
            return {
                (self.text(k, where) if isinstance(k, str) else k): self.value(v, where)
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.value(v, where) for v in value]
        return value


def _money(value: int | float) -> Decimal:
    # Through str() so 0.1 + 0.2 sums as a person would, not as binary floating point does.
    return Decimal(str(value))


def savings_by_code(result: RunResult) -> list[tuple[str, Decimal]]:
    """Validated savings per cost code, sorted by code.

    A candidate touching several codes is charged to the *set* (``02.3 + 02.4``), not split: the
    proposer does not say how its saving divides, and splitting evenly would invent figures. So
    the bars add up to the total validated saving and nothing is counted twice.
    """
    totals: dict[str, Decimal] = {}
    for run in result.candidates:
        if run.validated and not run.candidate.is_risk:
            label = " + ".join(sorted(set(run.candidate.affected_codes)))
            totals[label] = totals.get(label, Decimal(0)) + _money(run.candidate.claimed_saving_nok)
    return sorted(totals.items())


def _summary(result: RunResult, red: Redactor) -> str:
    runs = result.candidates
    accepted = [r for r in runs if r.validator.outcome == "accepted"]
    blocked = [r for r in accepted if r.checker.outcome == "rejected"]
    total = sum((_money(r.candidate.claimed_saving_nok) for r in runs if r.validated), Decimal(0))
    project = _md(red.text(result.project_id, "the project id"))
    plural = "candidate" if len(runs) == 1 else "candidates"
    parts = [
        f"This run of {project} proposed {len(runs)} {plural}. The validator accepted "
        f"{len(accepted)} and rejected {len(runs) - len(accepted)}; the checker blocked "
        f"{len(blocked)} of the accepted ones.",
        f"Validated saving (accepted by the validator and not blocked by the checker): "
        f"**{format_nok(total)} NOK**.",
    ]
    if result.ran_locally:
        parts.append(
            "The run was local: no model took part, so the candidates come from the project's "
            "own list of measures and deterministic rules, and no checker debated them."
        )
    else:
        models = ", ".join(_md(red.text(m, "the model names")) for m in result.models)
        parts.append(f"Models that took part: {models or 'none recorded'}.")
    if result.local_because:
        parts.append(f"No model's proposal was used: {_md(red.text(result.local_because, 'why'))}.")
    stop = _STOP_REASONS.get(result.stop_reason, _md(red.text(result.stop_reason, "stop reason")))
    parts.append(f"The run ended because {stop}.")
    if result.none_because:
        why = "; ".join(_md(red.text(reason, "why no candidate")) for reason in result.none_because)
        parts.append(f"It found none because {why}.")
    if result.budget_stop:
        cap = _md(red.text(result.budget_stop, "the budget stop"))
        parts.append(f"A budget cap ended the run early ({cap}); some candidates may be missing.")
    return " ".join(parts)


def _heard(result: RunResult, red: Redactor) -> list[str]:
    """What each checker said, in its own (redacted, bounded) words, beside its outcome."""
    lines: list[str] = []
    for run in result.candidates:
        where = f"the checker on {run.candidate.id}"
        for heard in run.checker.heard:
            who = _md(red.text(heard.advisor + (f" ({heard.model})" if heard.model else ""), where))
            if heard.position is None:
                why = _md(red.text(heard.diagnostic or "no detail", where))
                lines.append(
                    f"- `{run.candidate.id}` — {who} did not answer ({heard.status}): {why}"
                )
                continue
            lines.append(f"- `{run.candidate.id}` — {who}: **{heard.position}**")
            lines += [f"  - {_md(red.text(reason, where))}" for reason in heard.reasons]
    return ["## What the checker said", "", *lines, ""] if lines else []


def _bar_chart(bars: Sequence[tuple[str, Decimal]]) -> list[str]:
    if not bars:
        return ["No validated savings to chart."]
    top = max(value for _, value in bars)
    width = max(len(label) for label, _ in bars)
    lines = ["```text"]
    for label, value in bars:
        blocks = _bar_length(value, top, BAR_WIDTH)
        lines.append(f"{label.ljust(width)}  {'█' * blocks:<{BAR_WIDTH}}  {format_nok(value)} NOK")
    lines.append("```")
    return lines


def _bar_length(value: Decimal, top: Decimal, full: int) -> int:
    if top <= 0 or value <= 0:
        return 0
    # Never zero for a real saving: a tiny bar still shows that the code saved something.
    return max(1, int((value / top * full).to_integral_value(rounding=ROUND_HALF_EVEN)))


def _next_steps(result: RunResult, templates: Sequence[str], red: Redactor) -> list[str]:
    lines = ["## What to do next", ""]
    rejected = [r for r in result.candidates if r.validator.outcome == "rejected"]
    if rejected:
        ids = ", ".join(f"`{r.candidate.id}`" for r in rejected)
        lines += [
            f"The validator rejected {ids}: their numbers did not hold, so they get no verdict "
            "template and there is nothing for an expert to sign off. The table says which rule "
            "failed.",
            "",
        ]
    decided = [r for r in result.candidates if r.candidate.id in result.decided]
    if decided:
        lines += [
            "Already decided, so not asked for again:",
            "",
            *(f"- `{r.candidate.id}`: {decision_cell(r, result, red)}" for r in decided),
            "",
        ]
    if not templates:
        lines.append(
            "Nothing awaits a verdict: every candidate the validator accepted is decided already."
            if decided
            else "No candidate was accepted by the validator, so there is nothing to review."
        )
        return lines
    blocked = [r.candidate.id for r in result.candidates if r.checker.outcome == "rejected"]
    lines += [
        "Each candidate the validator accepted and no expert has decided has a verdict template "
        "in `verdicts/`:",
        "",
        *[f"- `verdicts/{name}`" for name in templates],
        "",
        "1. Open a template in any text editor. Do not change `id`; the `candidate` block is "
        "read-only context.",
        "2. Fill in `decision` (`approved`, `approved_with_adjustment` or `rejected`), `rationale` "
        "(why, in your own words) and `reviewer` (your initials or name). Optionally give "
        "`realization_rate` (0 to 1) and `decided_at` (e.g. `2026-11-30T12:00:00Z`); "
        "`approved_with_adjustment` also needs `adjusted_saving_nok`.",
        "3. Save the file into the workspace's `inbox/verdicts/`, keeping its name. Its `$schema` "
        "points at the verdict schema from there, so your editor checks it once it is in place; "
        "`portfolio-optimiser check-verdict FILE` checks it without dropping it.",
        "4. An approved verdict is promoted into the wiki, and the next run learns from it. Where "
        "approvals must be signed, sign the saved file with your SSH key: each template's "
        "`how_to_sign` gives the command.",
    ]
    if blocked:
        ids = ", ".join(f"`{b}`" for b in blocked)
        lines += ["", f"The checker blocked {ids}; read its reason before approving."]
    return lines


def _redaction_notes(red: Redactor) -> list[str]:
    if not red.kinds and not red.withheld:
        return []
    lines = ["## Redaction", ""]
    if red.kinds:
        kinds = ", ".join(sorted(red.kinds))
        lines.append(f"Some text was cleaned before it was written (removed: {kinds}).")
    for where in red.withheld:
        lines.append(
            f"- Text of {where} was withheld: it carried a private key that redaction cannot make "
            "safe. Remove the key from the bundle and run the project again."
        )
    return [*lines, ""]


def render_report(
    result: RunResult, *, redactor: Redactor, stamp: str, templates: Sequence[str]
) -> str:
    """``report.md`` for one run. ``templates`` are the verdict template file names written."""
    red = redactor
    project = _md(red.text(result.project_id, "the project id"))
    run_id = _md(red.text(result.run_id, "the run id"))
    bars = [(red.text(label, "a cost code"), value) for label, value in savings_by_code(result)]
    body = [
        f"# Savings report: {project}, run {run_id}",
        "",
        _summary(result, red),
        "",
        "## Candidates",
        "",
        *candidates_table(result, red),
        "",
        *tender_section(result, red),
        *priced_section(result, red),
        *outcome_section(result, red),
        *frame_section(result, red),
        *worksheet_section(result, red),
        *_heard(result, red),
        *precedents_section(result, red),
        *changes_section(result, red),
        *references_section(result, red),
        *sources_section(result, red),
        *learned_section(result, red),
        "## Validated savings by cost code",
        "",
        *_bar_chart(bars),
        "",
        f"![Validated savings by cost code]({SVG_NAME})",
        "",
    ]
    if any(" + " in label for label, _ in bars):
        body += ["A saving that spans several codes is shown once, against the set of codes.", ""]
    if result.notes:
        body += [
            "## Notes from the run",
            "",
            *(f"- {_md(red.text(note, 'a run note'))}" for note in result.notes),
            "",
        ]
    # Fixed text and minted ids only (the ids match ^c-[0-9a-f]{16}$), so nothing to scrub.
    steps = _next_steps(result, templates, red)
    footer = [
        "",
        "---",
        "",
        f"Written {_md(red.text(stamp, 'the stamp'))}. The machine-readable record is in "
        "`proposals.json` and `provenance.json`.",
    ]
    # Rendered last: every string above has been through the redactor by now, so the notes are whole.
    notes = _redaction_notes(red)
    return "\n".join([*body, *notes, *steps, *footer]) + "\n"


def render_savings_svg(
    bars: Sequence[tuple[str, Decimal]], *, redactor: Redactor, title: str
) -> str:
    """A self-contained SVG of horizontal bars, one per code; no scripts, fonts or links."""
    red = redactor
    label_w, bar_w, value_w, row_h, top_pad = 190, 340, 150, 28, 40
    width = label_w + bar_w + value_w
    height = top_pad + row_h * max(1, len(bars)) + 12
    safe_title = _xml(red.text(title, "the chart title"))
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img">',
        f"<title>{safe_title}</title>",
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="10" y="24" font-family="sans-serif" font-size="15" fill="#222222">'
        f"{safe_title}</text>",
    ]
    if not bars:
        out.append(
            f'<text x="10" y="{top_pad + 18}" font-family="sans-serif" font-size="13" '
            'fill="#555555">No validated savings to chart.</text>'
        )
    top = max((value for _, value in bars), default=Decimal(0))
    for i, (label, value) in enumerate(bars):
        y = top_pad + i * row_h
        length = _bar_length(value, top, bar_w - 10)
        shown = red.text(label, "a cost code")
        shown = shown if len(shown) <= 26 else shown[:25] + "…"
        out += [
            f'<text x="{label_w - 8}" y="{y + 18}" text-anchor="end" font-family="sans-serif" '
            f'font-size="13" fill="#222222">{_xml(shown)}</text>',
            f'<rect x="{label_w}" y="{y + 4}" width="{length}" height="{row_h - 8}" '
            'fill="#2b6cb0"/>',
            f'<text x="{label_w + length + 6}" y="{y + 18}" font-family="sans-serif" '
            f'font-size="13" fill="#222222">{format_nok(value)} NOK</text>',
        ]
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _xml(text: str) -> str:
    return xml_escape(_NOT_XML.sub("", text), {'"': "&quot;"})
