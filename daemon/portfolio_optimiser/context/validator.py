"""The deterministic validator: the blocking gate on every number a candidate claims.

Decides: whether a candidate's figures hold against its project's IR. Pure: it reads the candidate,
the project and the candidates already accepted in the same run, and touches nothing else (evidence
links are checked against the bundle's file list, which the IR loader collected with symlinks
resolved). It never raises for a bad candidate; it returns a decision with a receipt that lists every
rule and the recomputed numbers, so the reasoning can be redone by hand.

| rule | rejects when |
|---|---|
| codes_exist | an affected code is not a cost line of the project |
| saving_positive | the claimed saving is zero, negative or not finite (a risk, an unbalanced bid: it claims anything but 0 NOK, or names no sum at stake) |
| saving_within_cost | the saving is above what the affected lines cost together |
| arithmetic | quantity × unit price is given and differs from the saving by more than 0.5 NOK, or an affected line's own quantity × unit price differs from its amount |
| no_double_counting | the same candidate or kuttliste item is already counted, or with the accepted candidates that share its codes it claims more than those lines cost |
| evidence_inside_bundle | no evidence link is given, or one leaves the bundle or names no file in it, or a `reference:<code>@<unit>` link names no line the portfolio's reference fit grades, or the price expected there gives less than the saving claimed (for a risk: the fit does not grade the post as priced far below, or its sum at stake is not what the expected price gives) |
| frame_reproduced | a ΔP50 or ΔP85 is claimed and the uncertainty frame, simulated again from the bundle, gives another figure by more than three standard errors of the difference (√2 times its own Monte Carlo error; never less than 0.5 NOK: an accurate claim from another seed or sample count stands), or has none to give |
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from decimal import Context, Decimal, localcontext

from ._allocation import assignable
from .decisions import (
    RECOMPUTED_SAVING,
    Accepted,
    Decision,
    Receipt,
    Rejected,
    Rule,
    RuleCheck,
    RuleOutcome,
    line_recomputed,
)
from .evidence import evidence_inside_bundle
from .frame import DEFAULT_RULE, FrameRule, candidate_delta
from .models import Candidate, Money, Project
from .reference import ProjectReferences

__all__ = [
    "ARITHMETIC_TOLERANCE_NOK",
    "UNIT_PRICE_ROUNDING",
    "line_tolerance",
    "validate_candidate",
    "validate_candidates",
]

ARITHMETIC_TOLERANCE_NOK = Decimal("0.5")
REPRODUCED_WITHIN = 3.0
"""Standard errors of the difference a claimed ΔP50 or ΔP85 may stand from the frame's own: a
claim copied from an earlier run carries that run's Monte Carlo error as the validator's figure
carries its own (the difference of two such has sqrt(2) times the error). No check is tighter
than the figures it compares."""
"""Rounding to whole kroner is ordinary practice; anything beyond it is an arithmetic error."""
UNIT_PRICE_ROUNDING = Decimal("0.005")
"""A unit price written to the øre is off by at most half an øre a unit."""


def line_tolerance(quantity: Money) -> Decimal:
    """How far quantity × unit price may stand from a line's amount: the amount rounded to the
    krone, the unit price to the øre (what an estimating tool's export does)."""
    return ARITHMETIC_TOLERANCE_NOK + abs(_dec(quantity)) * UNIT_PRICE_ROUNDING


_PRECISION = Context(prec=60)


def _dec(value: Money) -> Decimal:
    return _PRECISION.create_decimal(str(value))


def _nok(value: Decimal) -> str:
    return format(value.normalize(), "f") if value == value.to_integral() else format(value, "f")


def validate_candidates(
    candidates: Iterable[Candidate],
    project: Project,
    *,
    references: ProjectReferences | None = None,
    frame: FrameRule = DEFAULT_RULE,
) -> list[Decision]:
    """Validate a run's candidates in order; each is checked against those accepted before it."""
    accepted: list[Candidate] = []
    decisions: list[Decision] = []
    for candidate in candidates:
        decision = validate_candidate(
            candidate, project, accepted=accepted, references=references, frame=frame
        )
        if isinstance(decision, Accepted):
            accepted.append(candidate)
        decisions.append(decision)
    return decisions


def validate_candidate(
    candidate: Candidate,
    project: Project,
    *,
    accepted: Sequence[Candidate] = (),
    references: ProjectReferences | None = None,
    frame: FrameRule = DEFAULT_RULE,
) -> Decision:
    """Check one candidate; ``accepted`` are the run's candidates already counted,
    ``references`` the project's lines measured against the portfolio (``reference:`` evidence
    resolves there), and ``frame`` what its uncertainty frame is simulated from."""
    with localcontext(_PRECISION):
        return _validate(candidate, project, accepted, references, frame)


def _validate(
    candidate: Candidate,
    project: Project,
    accepted: Sequence[Candidate],
    references: ProjectReferences | None,
    frame: FrameRule,
) -> Decision:
    codes = tuple(dict.fromkeys(candidate.affected_codes))
    if candidate.project_id != project.id:
        # A candidate for another project has no codes here, whatever they happen to be called.
        missing = list(codes)
    else:
        missing = [code for code in codes if project.line(code) is None]
    checks = [
        _codes_exist(candidate, codes, missing, project),
        _claims_nothing(candidate) if candidate.is_risk else _saving_positive(candidate),
    ]
    cost_known = not missing
    saving_ok = checks[1].outcome is RuleOutcome.PASSED
    checks.append(
        _passed(Rule.SAVING_WITHIN_COST, "a risk claims no saving to fit in the lines' cost")
        if candidate.is_risk and saving_ok
        else _saving_within_cost(candidate, codes, project)
        if cost_known and saving_ok
        else _skipped(Rule.SAVING_WITHIN_COST)
    )
    checks.append(
        _arithmetic(candidate, codes, project) if saving_ok else _skipped(Rule.ARITHMETIC)
    )
    checks.append(
        _no_double_counting(candidate, project, accepted)
        if cost_known and saving_ok
        else _skipped(Rule.NO_DOUBLE_COUNTING)
    )
    checks.append(evidence_inside_bundle(candidate, project, references, accepted))
    checks.append(
        _frame_reproduced(candidate, project, frame)
        if cost_known and saving_ok
        else _skipped(Rule.FRAME_REPRODUCED)
    )
    receipt = Receipt(candidate_id=candidate.id, project_id=project.id, checks=tuple(checks))
    failed = next((c for c in checks if c.outcome is RuleOutcome.FAILED), None)
    if failed is None:
        return Accepted(candidate_id=candidate.id, receipt=receipt)
    return Rejected(
        candidate_id=candidate.id, rule=failed.rule, reason=failed.detail, receipt=receipt
    )


def _frame_reproduced(candidate: Candidate, project: Project, frame: FrameRule) -> RuleCheck:
    claimed = {
        "delta_p50_nok": candidate.claimed_delta_p50_nok,
        "delta_p85_nok": candidate.claimed_delta_p85_nok,
    }
    stated = {name: value for name, value in claimed.items() if value is not None}
    rule = Rule.FRAME_REPRODUCED
    if not stated:
        return RuleCheck(
            rule=rule, outcome=RuleOutcome.PASSED, detail="claims no delta_p50_nok or delta_p85_nok"
        )
    delta = candidate_delta(project, candidate, frame)
    said = ", ".join(f"{name} {_nok(_dec(value))}" for name, value in stated.items())
    if delta is None:
        return RuleCheck(
            rule=rule,
            outcome=RuleOutcome.FAILED,
            detail=f"it claims {said}, but no line of the project carries a triple estimate "
            "(min_nok, max_nok) to simulate it from; give the lines their ranges or remove "
            "the claim",
        )
    found = {"delta_p50_nok": _dec(delta.p50_nok), "delta_p85_nok": _dec(delta.p85_nok)}
    errors = {"delta_p50_nok": delta.p50_error_nok, "delta_p85_nok": delta.p85_error_nok}
    allowed = {
        name: max(Decimal(repr(REPRODUCED_WITHIN * math.sqrt(2) * error)), ARITHMETIC_TOLERANCE_NOK)
        for name, error in errors.items()
    }
    figures = {name: _nok(value.quantize(Decimal("0.01"))) for name, value in found.items()}
    off = [name for name, value in stated.items() if abs(_dec(value) - found[name]) > allowed[name]]
    within = ", ".join(f"{name} ±{_nok(allowed[name].quantize(Decimal(1)))}" for name in stated)
    where = (
        f"the uncertainty frame simulated again (seed {frame.seed}; its figures' Monte Carlo "
        f"error allows {within}: {REPRODUCED_WITHIN:g} standard errors of the difference)"
    )
    if off:
        gives = ", ".join(f"{name} {figures[name]}" for name in off)
        return RuleCheck(
            rule=rule,
            outcome=RuleOutcome.FAILED,
            detail=f"it claims {said}; {where} gives {gives} (NOK, negative where the measure "
            "lowers P50 or P85); correct the claim or remove it",
            figures=figures,
        )
    return RuleCheck(
        rule=rule,
        outcome=RuleOutcome.PASSED,
        detail=f"{where} reproduces {said}",
        figures=figures,
    )


def _skipped(rule: Rule) -> RuleCheck:
    return RuleCheck(
        rule=rule, outcome=RuleOutcome.SKIPPED, detail="not checked: an earlier rule failed"
    )


def _passed(rule: Rule, detail: str, **figures: str) -> RuleCheck:
    return RuleCheck(rule=rule, outcome=RuleOutcome.PASSED, detail=detail, figures=figures)


def _failed(rule: Rule, detail: str, **figures: str) -> RuleCheck:
    return RuleCheck(rule=rule, outcome=RuleOutcome.FAILED, detail=detail, figures=figures)


def _codes_exist(
    candidate: Candidate, codes: tuple[str, ...], missing: list[str], project: Project
) -> RuleCheck:
    if candidate.project_id != project.id:
        return _failed(
            Rule.CODES_EXIST,
            f"the candidate is for project {candidate.project_id}, not {project.id}; its codes are not this project's",
        )
    if missing:
        known = ", ".join(sorted(project.codes)) or "none"
        return _failed(
            Rule.CODES_EXIST,
            f"cost code {', '.join(missing)} is not a cost line of project {project.id} (its codes: {known})",
        )
    return _passed(
        Rule.CODES_EXIST, f"all {len(codes)} affected codes are cost lines: {', '.join(codes)}"
    )


def _saving_positive(candidate: Candidate) -> RuleCheck:
    saving = candidate.claimed_saving_nok
    if not math.isfinite(saving) or saving <= 0:
        return _failed(
            Rule.SAVING_POSITIVE,
            f"the claimed saving {candidate.saving_literal} NOK is not above zero",
            claimed_saving_nok=candidate.saving_literal,
        )
    return _passed(
        Rule.SAVING_POSITIVE, f"the claimed saving {candidate.saving_literal} NOK is above zero"
    )


def _claims_nothing(candidate: Candidate) -> RuleCheck:
    """A risk's second rule: it claims 0 NOK, and names a sum at stake (checked against the
    reference with its evidence)."""
    stake = candidate.at_stake_nok
    if candidate.claimed_saving_nok != 0:
        return _failed(
            Rule.SAVING_POSITIVE,
            f"a risk is never a saving, and it claims {candidate.saving_literal} NOK; claim 0",
        )
    if stake is None or not math.isfinite(stake) or stake <= 0:
        return _failed(Rule.SAVING_POSITIVE, "a risk names no sum at stake above zero")
    return _passed(
        Rule.SAVING_POSITIVE,
        f"a risk, not a saving: it claims 0 NOK, with {_nok(_dec(stake))} NOK at stake",
        at_stake_nok=_nok(_dec(stake)),
    )


def _cost_of(codes: Iterable[str], project: Project) -> Decimal:
    return sum(
        (_dec(line.amount_nok) for code in codes if (line := project.line(code))), Decimal(0)
    )


def _saving_within_cost(
    candidate: Candidate, codes: tuple[str, ...], project: Project
) -> RuleCheck:
    cost = _cost_of(codes, project)
    saving = _dec(candidate.claimed_saving_nok)
    figures = {"affected_cost_nok": _nok(cost), "claimed_saving_nok": _nok(saving)}
    if saving > cost:
        return _failed(
            Rule.SAVING_WITHIN_COST,
            f"the claimed saving {_nok(saving)} NOK is above the {_nok(cost)} NOK that "
            f"{', '.join(codes)} cost together",
            **figures,
        )
    return _passed(
        Rule.SAVING_WITHIN_COST, f"{_nok(saving)} NOK of {_nok(cost)} NOK affected cost", **figures
    )


def _arithmetic(candidate: Candidate, codes: tuple[str, ...], project: Project) -> RuleCheck:
    figures: dict[str, str] = {}
    for code in codes:
        line = project.line(code)
        if line is None or line.quantity is None or line.unit_price_nok is None:
            continue
        product = _dec(line.quantity) * _dec(line.unit_price_nok)
        figures[line_recomputed(code)] = _nok(product)
        if abs(product - _dec(line.amount_nok)) > line_tolerance(line.quantity):
            return _failed(
                Rule.ARITHMETIC,
                f"cost line {code} says {line.amount_nok} NOK but {line.quantity} × "
                f"{line.unit_price_nok} = {_nok(product)} NOK; the line must add up before a saving "
                "on it can be checked",
                **figures,
            )
    if candidate.quantity is not None and candidate.unit_price_nok is not None:
        product = _dec(candidate.quantity) * _dec(candidate.unit_price_nok)
        figures[RECOMPUTED_SAVING] = _nok(product)
        figures["claimed_saving_nok"] = candidate.saving_literal
        if abs(product - _dec(candidate.claimed_saving_nok)) > ARITHMETIC_TOLERANCE_NOK:
            return _failed(
                Rule.ARITHMETIC,
                f"{candidate.quantity} × {candidate.unit_price_nok} = {_nok(product)} NOK, not the "
                f"claimed {candidate.saving_literal} NOK",
                **figures,
            )
        return _passed(
            Rule.ARITHMETIC,
            f"{candidate.quantity} × {candidate.unit_price_nok} = {_nok(product)} NOK",
            **figures,
        )
    if figures:
        return _passed(
            Rule.ARITHMETIC,
            "the affected lines' quantity × unit price match their amounts",
            **figures,
        )
    return _passed(Rule.ARITHMETIC, "no quantity × unit price given; nothing to recompute")


def _no_double_counting(
    candidate: Candidate, project: Project, accepted: Sequence[Candidate]
) -> RuleCheck:
    for other in accepted:
        if other.id == candidate.id:
            return _failed(
                Rule.NO_DOUBLE_COUNTING, f"candidate {candidate.id} is already counted in this run"
            )
        if candidate.origin.startswith("measure-option:") and other.origin == candidate.origin:
            return _failed(
                Rule.NO_DOUBLE_COUNTING,
                f"{candidate.origin} is already counted in this run as candidate {other.id}",
            )
    group = _overlapping(candidate, accepted)
    if not group:
        return _passed(Rule.NO_DOUBLE_COUNTING, "no other accepted candidate touches these codes")
    members = [*group, candidate]
    codes = sorted(set().union(*(set(c.affected_codes) for c in members)))
    amounts = {code: _dec(line.amount_nok) for code in codes if (line := project.line(code))}
    claims = {c.id: (_dec(c.claimed_saving_nok), frozenset(c.affected_codes)) for c in members}
    claimed = sum((saving for saving, _ in claims.values()), Decimal(0))
    fits = assignable(claims, amounts)
    figures = {
        "shared_codes_cost_nok": _nok(sum(amounts.values(), Decimal(0))),
        "claimed_together_nok": _nok(claimed),
        "assignable_nok": _nok(fits),
    }
    others = ", ".join(o.id for o in group)
    if fits < claimed:
        return _failed(
            Rule.NO_DOUBLE_COUNTING,
            f"together with {others} it claims {_nok(claimed)} NOK from lines ({', '.join(codes)}) "
            f"that can give at most {_nok(fits)} NOK to these measures; the same kroner would be saved twice",
            **figures,
        )
    return _passed(
        Rule.NO_DOUBLE_COUNTING,
        f"with {others} it claims {_nok(claimed)} NOK, which fits in what lines {', '.join(codes)} cost",
        **figures,
    )


def _overlapping(candidate: Candidate, accepted: Sequence[Candidate]) -> list[Candidate]:
    """Accepted candidates linked to this one through shared codes, directly or in a chain."""
    codes = set(candidate.affected_codes)
    group: list[Candidate] = []
    rest = list(accepted)
    grew = True
    while grew:
        grew = False
        for other in list(rest):
            if codes & set(other.affected_codes):
                group.append(other)
                codes |= set(other.affected_codes)
                rest.remove(other)
                grew = True
    return [c for c in accepted if c in group]
