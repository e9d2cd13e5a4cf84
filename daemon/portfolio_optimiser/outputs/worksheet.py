"""The report as the cost expert's worksheet: the candidates table, and each candidate with its
line, its working, its consequence and decision point, and what has been decided on it already.

Decides what an expert reads per candidate, so a verdict can be written from the report alone:
the codes with their names, each line's amount as quantity × unit price, the saving's working
(quantity × unit price, learned rate × basis × realisation, excess over the price expected ×
quantity, or a lump sum's share of the lines), what the validator recomputed or, from its receipt,
why it could not, the checker's word, the consequence, the latest decision point, and the
standing verdict (who, when, what) of a candidate decided in an earlier run or version, which is
never asked for again. Figures are Norwegian (``1 400 000``, ``2,7 %``); every string goes
through the run's redactor.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import TYPE_CHECKING, Final

from portfolio_optimiser.context.decisions import Rule, line_recomputed
from portfolio_optimiser.context.ns3451 import ns3451_name
from portfolio_optimiser.context.reference import LINK_PREFIX, reference_saving
from portfolio_optimiser.context.tender import at_stake

from ._markdown import format_nok, md

if TYPE_CHECKING:  # the pipeline package imports agent_framework; the outputs never do
    from portfolio_optimiser.context.models import Candidate, LearnedRate
    from portfolio_optimiser.pipeline.outcome import CandidateRun, Decided, LineFacts, RunResult

    from .report import Redactor

__all__ = [
    "code_label",
    "decided_text",
    "decision_cell",
    "norwegian_figures",
    "not_recomputed",
    "worksheet_section",
]

_FIGURE: Final = re.compile(r"(?<![\w.,])(\d{4,}(?:\.\d+)?|\d+\.\d+)(?![\w.])")
_APPROVING: Final = frozenset({"approved", "approved_with_adjustment"})
_CENT: Final = Decimal("0.01")
_ROUNDED: Final = "rounded down to two significant figures"
# Quoted in the validator's words; the arithmetic too where it recomputed the saving, else its
# figures say what it did recompute (the lines).
_IN_WORDS: Final = frozenset({Rule.SAVING_WITHIN_COST, Rule.NO_DOUBLE_COUNTING})


def norwegian_figures(text: str) -> str:
    """The figures of a sentence the validator (or the fold) wrote, as a Norwegian reads them
    (``29610000`` → ``29 610 000``, ``0.25`` → ``0,25``). Only figures beside ``NOK``, ``×`` or
    ``=`` are amounts; a code (``02.3``) or a year elsewhere keeps its spelling."""

    def one(match: re.Match[str]) -> str:
        around = text[max(0, match.start() - 4) : match.end() + 4]
        if not any(mark in around for mark in ("NOK", "×", "=")):
            return match.group(0)
        return format_nok(Decimal(match.group(1)))

    return _FIGURE.sub(one, text)


def _percent(part: Decimal, whole: Decimal) -> str:
    if whole <= 0:
        return "–"
    share = part / whole * 100
    digits = 1 if share >= 1 else 2
    return f"{share:.{digits}f} %".replace(".", ",")


def code_label(code: str, result: RunResult) -> str:
    """``02.3 Yttervegger``: the line's own title, else its NS 3451 part's name."""
    line = result.lines.get(code)
    name = (line.title if line is not None and line.title != code else "") or ns3451_name(code)
    return f"{code} {name}" if name else code


def _when(decided: Decided, red: Redactor) -> str:
    when = red.text(decided.decided_at[:10], "a verdict's date") if decided.decided_at else ""
    return f" on {md(when)}" if when else ""


def decided_text(
    candidate: Candidate, decided: Decided, red: Redactor, *, claim: bool = True
) -> str:
    """``approved by KE on 2026-12-01, at 900 000 NOK ⚠ above the claim`` (markdown-safe)."""
    verb = (
        "approved"
        if decided.decision in _APPROVING
        else md(red.text(decided.decision, "a decision"))
    )
    who = md(red.text(decided.reviewer, f"the reviewer of {candidate.id}"))
    text = f"{verb} by {who}{_when(decided, red)}"
    if decided.signed_with:
        text += f" (signed, key {md(red.text(decided.signed_with, 'a key fingerprint'))})"
    if decided.adjusted_saving_nok is not None:
        text += f", at {format_nok(decided.adjusted_saving_nok)} NOK"
        above = Decimal(str(decided.adjusted_saving_nok)) > Decimal(
            str(candidate.claimed_saving_nok)
        )
        if claim and above:
            text += " ⚠ above the claim"
    return text


def decision_cell(run: CandidateRun, result: RunResult, red: Redactor) -> str:
    """Where the candidate stands with the experts, in a few words (markdown-safe)."""
    decided = result.decided.get(run.candidate.id)
    if decided is not None:
        return decided_text(run.candidate, decided, red)
    if not run.awaits_verdict:
        return "no verdict asked: its numbers did not hold"
    return "awaiting a verdict"


def _product(
    quantity: float | None, unit: str | None, price: float | None, total: float, red: Redactor
) -> str:
    """``420 m2 × 1 900 NOK/m2 = 798 000 NOK``, or the total alone when no product is given."""
    amount = f"{format_nok(total)} NOK"
    if quantity is None or price is None:
        return amount
    shown = md(red.text(unit or "", "a unit"))
    return f"{format_nok(quantity)} {shown} × {format_nok(price)} NOK/{shown} = {amount}"


def _line_text(code: str, result: RunResult, red: Redactor) -> str:
    line = result.lines.get(code)
    label = md(red.text(code_label(code, result), "a cost line"))
    if line is None:
        return f"{label}: no such line in the bundle"
    product = _product(line.quantity, line.unit, line.unit_price_nok, line.amount_nok, red)
    return f"{label}: {product}"


def _pct(share: Decimal) -> str:
    """``0.85`` → ``85 %``, ``0.855`` → ``85,5 %``: a rate as given, never rounded away."""
    return f"{(share * 100).normalize():f}".replace(".", ",") + " %"


def _learned(rate: LearnedRate, saving: float, red: Redactor) -> str:
    """``253,33 NOK/m2 (learned rate: …) × 3 150 m2 × 85 % expected realisation = 678 300 NOK,
    rounded down …: 670 000 NOK``: the working ``pipeline.local`` carried the measure by."""
    there = md(red.text(rate.project_id, "a learned measure's project"))
    per = Decimal(str(rate.saving_nok)) / Decimal(str(rate.basis_there))
    realised = Decimal(str(rate.realisation)) if rate.realisation is not None else Decimal(1)
    exact = (per * realised * Decimal(str(rate.basis_here))).quantize(_CENT)
    approved = f"{format_nok(rate.saving_nok)} NOK"
    if rate.unit:
        unit = md(red.text(rate.unit, "a unit"))
        learned = (
            f"{format_nok(per.quantize(_CENT))} NOK/{unit} (learned rate: {approved} over "
            f"{format_nok(rate.basis_there)} {unit} in {there})"
        )
        basis = f"{format_nok(rate.basis_here)} {unit}"
    else:
        learned = (
            f"{_pct(per.quantize(Decimal('0.0001')))} of the lines' cost (learned rate: {approved} "
            f"of {format_nok(rate.basis_there)} NOK in {there})"
        )
        basis = f"{format_nok(rate.basis_here)} NOK"
    realisation = (
        f"{_pct(realised)} expected realisation"
        if rate.realisation is not None
        else "100 % realisation (the expert gave none)"
    )
    return (
        f"{learned} × {basis} × {realisation} = {format_nok(exact)} NOK, {_ROUNDED}: "
        f"{format_nok(saving)} NOK"
    )


def _priced(run: CandidateRun, result: RunResult) -> tuple[LineFacts, float, float, float] | None:
    """A reference-price candidate's line, its unit price, the price expected and its quantity."""
    reference = result.references.get(run.candidate.id)
    line = result.lines.get(reference.code) if reference is not None else None
    if reference is None or line is None or line.quantity is None or not line.unit_price_nok:
        return None
    return line, float(line.unit_price_nok), reference.expected_nok, float(line.quantity)


def _working(run: CandidateRun, result: RunResult, red: Redactor) -> str | None:
    """How the saving was reached, as a product a reader can redo; None for a lump sum."""
    cand = run.candidate
    if cand.quantity is not None and cand.unit_price_nok is not None:
        return _product(cand.quantity, cand.unit, cand.unit_price_nok, cand.claimed_saving_nok, red)
    if cand.learned_rate is not None:
        return _learned(cand.learned_rate, cand.claimed_saving_nok, red)
    priced = _priced(run, result)
    if priced is None:
        return None
    line, price, expected, quantity = priced
    unit = md(red.text(line.unit or "", "a unit"))
    if cand.is_risk:
        gap = (Decimal(str(expected)) - Decimal(str(price))) * Decimal(str(quantity))
        return (
            f"({format_nok(Decimal(str(expected)).quantize(_CENT))} NOK/{unit} expected here − "
            f"{format_nok(price)} bid) × {format_nok(quantity)} {unit} = "
            f"{format_nok(gap.quantize(_CENT))} NOK, {_ROUNDED}: "
            f"{format_nok(cand.at_stake_nok or 0)} NOK at stake if the quantity doubles"
        )
    excess = (Decimal(str(price)) - Decimal(str(expected))) * Decimal(str(quantity))
    return (
        f"({format_nok(price)} − {format_nok(Decimal(str(expected)).quantize(_CENT))} NOK/{unit} "
        f"expected here) × {format_nok(quantity)} {unit} = {format_nok(excess.quantize(_CENT))} "
        f"NOK, {_ROUNDED}: {format_nok(cand.claimed_saving_nok)} NOK"
    )


def not_recomputed(run: CandidateRun) -> str | None:
    """Why the validator recomputed no saving for an accepted candidate; None when it did (its
    ``arithmetic`` check recomputed quantity × unit price, or its reference check the excess
    over the price expected) or rejected it. Read from the receipt and the candidate's fields."""
    cand = run.candidate
    if run.validator.outcome != "accepted":
        return None
    if any(check.recomputed_saving for check in run.validator.receipt.checks):
        return None
    if any(link.startswith(LINK_PREFIX) for link in cand.evidence):
        return None  # evidence_inside_bundle recomputed it from the reference (it passed)
    if cand.learned_rate is not None:
        return (
            f"its rate was learned from {cand.learned_rate.project_id}'s figures, which the "
            "validator does not hold; it checks the saving against this project's lines only"
        )
    if cand.origin.startswith("measure-option:"):
        return (
            "the kuttliste gives the saving as a lump sum, with no quantity × unit price or "
            "rate to recompute it from"
        )
    return "the saving is given as a lump sum, with no quantity × unit price to recompute it from"


def _checked(run: CandidateRun, result: RunResult, red: Redactor) -> list[str]:
    """What the validator recomputed and checked, in its rules' order (markdown-safe)."""
    where = f"candidate {run.candidate.id}"
    said = []
    for check in run.validator.receipt.checks:
        if check.recomputed_saving or check.rule in _IN_WORDS:
            said.append(md(norwegian_figures(red.text(check.detail, where))))
        for code in run.candidate.affected_codes if check.rule is Rule.ARITHMETIC else ():
            product, line = check.figures.get(line_recomputed(code)), result.lines.get(code)
            if product is not None and line is not None:  # the line's own product, recomputed
                said.append(
                    f"line {md(red.text(code, where))}: {format_nok(line.quantity or 0)} × "
                    f"{format_nok(line.unit_price_nok or 0)} = {format_nok(Decimal(product))} "
                    "NOK, matching its amount"
                )
        if check.rule is Rule.EVIDENCE_INSIDE_BUNDLE and (priced := _priced(run, result)):
            _line, price, expected, quantity = priced
            if run.candidate.is_risk:
                said.append(
                    f"the fit grades the post as priced far below the {format_nok(expected)} "
                    f"NOK expected here, and {format_nok(at_stake(price, expected, quantity))} "
                    f"NOK is at stake ({_ROUNDED}), as claimed"
                )
                continue
            said.append(
                f"at the price expected here the line saves "
                f"{format_nok(reference_saving(price, expected, quantity))} NOK ({_ROUNDED}), "
                "no less than the claim"
            )
    return said


def _one(run: CandidateRun, result: RunResult, red: Redactor) -> list[str]:
    cand = run.candidate
    where = f"candidate {cand.id}"
    saving = Decimal(str(cand.claimed_saving_nok))
    lines_cost = sum(
        (
            Decimal(str(result.lines[c].amount_nok))
            for c in cand.affected_codes
            if c in result.lines
        ),
        Decimal(0),
    )
    out = [f"### `{cand.id}` {md(red.text(cand.title, where)) or '(untitled)'}", ""]
    out += [f"- Line: {_line_text(code, result, red)}" for code in cand.affected_codes]
    working = _working(run, result, red)
    shares = (
        f"{_percent(saving, lines_cost)} of the line{'s' if len(cand.affected_codes) > 1 else ''}"
    )
    if working is None:  # a lump sum: its share of the lines is all the working there is
        working = f"{format_nok(saving)} NOK, a lump sum (no quantity × unit price given)"
        shares += f" ({format_nok(lines_cost)} NOK)"
    if result.base_estimate_nok:
        shares += (
            f", {_percent(saving, Decimal(str(result.base_estimate_nok)))} of the base estimate "
            f"({format_nok(result.base_estimate_nok)} NOK)"
        )
    out.append(
        f"- Risk, not a saving (counted in no total): {working}"
        if cand.is_risk
        else f"- Saving: {working}; {shares}"
    )
    if run.validator.outcome == "accepted":
        said = "; ".join(_checked(run, result, red))
        why = not_recomputed(run)
        if why is None:
            out.append(f"- Validator: accepted ({said})")
        else:
            why = md(red.text(why, where))
            out.append(f"- Validator: accepted, not recomputable: {why}. What it checked: {said}")
    else:
        reason = norwegian_figures(red.text(run.validator.reason, where))
        out.append(f"- Validator: **rejected** (`{run.validator.rule.value}`): {md(reason)}")
    if run.checker.outcome != "not_run":
        reason = md(red.text(run.checker.reason or "", where))
        out.append(f"- Checker: {run.checker.outcome}" + (f": {reason}" if reason else ""))
    if cand.rationale:
        out.append(f"- Consequence: {md(red.text(cand.rationale, where))}")
    if cand.decide_by:
        # A learned measure's decision point is its source's: the reader must know it is borrowed.
        borrowed = " (that of the measure it was learned from)" if cand.learned_rate else ""
        out.append(f"- Decide by: {md(red.text(cand.decide_by, where))}{borrowed}")
    source = result.learned_from.get(cand.id)
    if source is not None:
        where_from = f" ({md(red.text(source.project_id, where))})" if source.project_id else ""
        out.append(
            f"- Learned from: {md(red.text(source.candidate_id, where))}{where_from}, "
            f"{decided_text(cand, source, red, claim=False)}"
        )
    decided = result.decided.get(cand.id)
    status = decision_cell(run, result, red)
    if decided is not None and decided.rationale:
        status += f" — “{md(red.text(decided.rationale, where))}”"
    out += [f"- Verdict: {status}", ""]
    return out


def worksheet_section(result: RunResult, red: Redactor) -> list[str]:
    """Each candidate on its own, as an expert works through them: rejected ones too, marked."""
    if not result.candidates and not result.declined:
        return []
    out = ["## The candidates, one by one", ""]
    for run in result.candidates:
        out += _one(run, result, red)
    for cand in result.declined:
        decided = result.decided.get(cand.id)
        where = f"candidate {cand.id}"
        out += [
            f"### `{cand.id}` {md(red.text(cand.title, where)) or '(untitled)'} (rejected)",
            "",
            *(f"- Line: {_line_text(code, result, red)}" for code in cand.affected_codes),
            f"- Saving claimed: {format_nok(cand.claimed_saving_nok)} NOK; not checked again",
        ]
        if decided is not None:
            said = f" — “{md(red.text(decided.rationale, where))}”" if decided.rationale else ""
            out.append(f"- Verdict: {decided_text(cand, decided, red)}{said}")
        out.append("")
    return out
