"""A project's uncertainty frame: its cost lines simulated from their triple estimates, P50 and
P85, the kostnadsramme with the kuttliste held, and what each candidate does to P50 and P85.

Built only for a project that gives a triple estimate (``min_nok`` and ``max_nok`` on a line,
with ``likely_nok`` or else ``amount_nok`` as the most likely; or a ``type: uncertainty``
element). A line without one gets the spread configured for its account (``FrameRule``), or is
taken at its amount, as certain; the frame names every such line: it never hides what it
assumed.

A ``type: uncertainty`` element (a general uncertainty, or an event with its probability) is
drawn beside the lines; it is no line, so no candidate touches it.

A candidate is applied as the share of its lines' base estimate its saving is: a measure that
saves a tenth of a line's amount takes a tenth of each of that line's draws, and so a tenth of its
uncertainty. Validated candidates (the validator accepted, the checker did not reject) are also
applied together (their shares added on each line, never past the whole line), since effects do
not add at a quantile. The kuttliste is held, not adopted: the kostnadsramme is P85 less the
value of its validated items, and P50 is left alone.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict

from .models import Candidate, CostLine, Project
from .uncertainty import Delta, Effect, Element, Simulation, simulate

__all__ = [
    "CONTRIBUTORS",
    "DEFAULT_RULE",
    "Backtest",
    "Frame",
    "FrameDelta",
    "FrameRule",
    "backtest_of",
    "candidate_delta",
    "frame_of",
    "has_triples",
]

CONTRIBUTORS: Final = 10
"""The largest contributors a frame keeps (the tornado chart's bars)."""


Spread = tuple[float, float]
"""A line's assumed minimum and maximum, as shares of its amount (0.9, 1.25)."""


@dataclass(frozen=True)
class FrameRule:
    """What a frame's figures are a function of, beside the bundle: ``[uncertainty]``."""

    seed: int = 3459
    samples: int = 10_000
    spread: Spread | None = None
    """The range a line with no triple estimate is assumed to have; None: taken as certain."""
    spreads: tuple[tuple[str, Spread], ...] = ()
    """Ranges by account: the longest code prefix a line's code begins with gives its range."""

    def spread_of(self, code: str) -> Spread | None:
        """The range assumed for a line of ``code`` with no triple estimate; None: certain."""
        matching = [(len(key), spread) for key, spread in self.spreads if code.startswith(key)]
        spread = max(matching)[1] if matching else self.spread
        return None if spread is None or spread == (1.0, 1.0) else spread


DEFAULT_RULE: Final = FrameRule()


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FrameDelta(_Frozen):
    """What a measure adopted now does to the frame (negative: lowers it)."""

    p50_nok: float
    p85_nok: float

    @classmethod
    def of(cls, delta: Delta) -> FrameDelta:
        return cls(p50_nok=delta.p50, p85_nok=delta.p85)


class Contributor(_Frozen):
    code: str
    deviation_nok: float
    """Its share of the total's standard deviation (the shares add up to it)."""


class Frame(_Frozen):
    """The frame's figures, as ``proposals.json`` and the report carry them."""

    seed: int
    samples: int
    stable_to: float
    """Half P85's 95 % interval over the samples, as a share of P85."""
    mean_nok: float
    p10_nok: float
    p50_nok: float
    p85_nok: float
    p90_nok: float
    kuttliste_nok: float
    """The kuttliste's value: the estimated savings of its items the validator accepted (and the
    checker did not reject), added: an item counted twice, or out of its lines' cost, is not."""
    kuttliste_left_out: tuple[str, ...] = ()
    """The kuttliste's items not counted in its value (by id): the report says so."""
    kostnadsramme_nok: float
    """P85 less the kuttliste's value (the kuttliste held to protect it)."""
    correlation: dict[str, float]
    """Each correlation group's coefficient, as the project declares it."""
    groups: dict[str, tuple[str, ...]]
    """Each group's lines, by code."""
    uncertain: tuple[str, ...]
    """The lines simulated from a triple estimate."""
    uncertainties: dict[str, float] = {}
    """The uncertainty elements beside the lines, each with its probability (1: always there)."""
    certain: tuple[str, ...]
    """The lines with no triple estimate and no assumed spread: taken at their amount, as certain."""
    assumed: dict[str, Spread] = {}
    """The lines with no triple estimate, each with the spread assumed for it (its minimum and
    maximum as shares of its amount, from ``[uncertainty]``)."""
    curve: tuple[float, ...]
    """The S-curve: the total at 0 %, 1 %, … 100 % of the samples."""
    contributors: tuple[Contributor, ...]
    deltas: dict[str, FrameDelta]
    """Each candidate's effect, adopted now, alone; a candidate on no line of the frame has none."""
    adopted: tuple[str, ...]
    """The candidates applied together (the validated ones)."""
    joint: FrameDelta | None
    stated_p50_nok: float | None = None
    stated_p85_nok: float | None = None


class Backtest(_Frozen):
    """A finished project's final cost against its frames: the P50 and P85 its header states
    (set when it was approved), else those its simulated frame gives."""

    final_cost_nok: float
    p50_nok: float
    p85_nok: float
    basis: Literal["stated", "simulated"]
    completed: str | None = None

    @property
    def above_p50(self) -> bool:
        return self.final_cost_nok > self.p50_nok

    @property
    def above_p85(self) -> bool:
        return self.final_cost_nok > self.p85_nok


def backtest_of(project: Project, frame: Frame | None) -> Backtest | None:
    """The project's final cost against its frames; None for a project not finished, or with
    neither stated nor simulated frames."""
    outcome = project.outcome
    if outcome is None:
        return None
    final = float(outcome.final_cost_nok)
    if project.p50_nok is not None and project.p85_nok is not None:
        p50, p85, basis = float(project.p50_nok), float(project.p85_nok), "stated"
    elif frame is not None:
        p50, p85, basis = frame.p50_nok, frame.p85_nok, "simulated"
    else:
        return None
    return Backtest(
        final_cost_nok=final,
        p50_nok=p50,
        p85_nok=p85,
        basis=basis,
        completed=outcome.completed,
    )


def has_triples(project: Project) -> bool:
    return bool(project.uncertainties) or any(
        _triple(line) is not None for line in project.cost_lines
    )


def _triple(line: CostLine) -> tuple[float, float, float] | None:
    if line.min_nok is None or line.max_nok is None:
        return None
    likely = line.likely_nok if line.likely_nok is not None else line.amount_nok
    return float(line.min_nok), float(likely), float(line.max_nok)


def _names(project: Project) -> list[str]:
    """Each line's element id: its code, numbered from the second line of a code on."""
    seen: dict[str, int] = defaultdict(int)
    names = []
    for line in project.cost_lines:
        seen[line.code] += 1
        names.append(line.code if seen[line.code] == 1 else f"{line.code} ({seen[line.code]})")
    return names


def _risk_names(project: Project, names: Sequence[str]) -> list[str]:
    """Each uncertainty element's id in the frame: its own, told from a line's code if need be."""
    taken = set(names)
    found = []
    for u in project.uncertainties:
        name, n = u.id, 1
        while name in taken:
            n += 1
            name = f"{u.id} (uncertainty)" if n == 2 else f"{u.id} (uncertainty {n - 1})"
        taken.add(name)
        found.append(name)
    return found


def _range(line: CostLine, rule: FrameRule) -> tuple[float, float, float]:
    """The line's (low, likely, high): its own, else its account's assumed spread, else certain."""
    triple = _triple(line)
    if triple is not None:
        return triple
    amount = float(line.amount_nok)
    spread = rule.spread_of(line.code)
    if spread is None:
        return amount, amount, amount
    low, high = sorted((amount * spread[0], amount * spread[1]))
    if line.distribution == "normal":  # symmetric: the wider side, both ways
        half = max(amount - low, high - amount)
        return amount - half, amount, amount + half
    return low, amount, high


def _elements(project: Project, names: Sequence[str], rule: FrameRule) -> list[Element]:
    elements = [
        Element(
            name,
            float(u.min_nok),
            float(u.likely_nok),
            float(u.max_nok),
            distribution=u.distribution,
            group=u.correlation_group,
            probability=u.probability,
        )
        for u, name in zip(project.uncertainties, _risk_names(project, names), strict=True)
    ]
    for line, name in zip(project.cost_lines, names, strict=True):
        low, likely, high = _range(line, rule)
        elements.append(
            Element(
                name,
                low,
                likely,
                high,
                distribution=line.distribution,
                group=line.correlation_group,
            )
        )
    return elements


def _shares(
    project: Project, names: Sequence[str], candidate: Candidate
) -> dict[str, float] | None:
    """The share of each of its lines the candidate removes: its saving over their amounts."""
    codes = set(candidate.affected_codes)
    touched = [
        (name, line)
        for line, name in zip(project.cost_lines, names, strict=True)
        if line.code in codes
    ]
    base = math.fsum(float(line.amount_nok) for _name, line in touched)
    if not touched or base <= 0:
        return None
    share = min(max(float(candidate.claimed_saving_nok) / base, 0.0), 1.0)
    return {name: share for name, _line in touched}


def _together(effects: Sequence[Effect]) -> Effect:
    summed: dict[str, float] = defaultdict(float)
    for effect in effects:
        for name, share in effect.shares.items():
            summed[name] += share
    return Effect("together", {name: min(share, 1.0) for name, share in summed.items()})


def frame_of(
    project: Project,
    candidates: Sequence[Candidate],
    *,
    accepted: frozenset[str],
    rule: FrameRule,
) -> Frame | None:
    """The project's frame (None for a project with no triple estimate), each candidate applied
    alone and those in ``accepted`` (candidate ids) together."""
    if not has_triples(project):
        return None
    names = _names(project)
    effects = []
    for candidate in candidates:
        shares = _shares(project, names, candidate)
        if shares is not None:
            effects.append(Effect(candidate.id, shares))
    adopted = [effect for effect in effects if effect.id in accepted]
    found = _simulated(project, names, rule, effects, _together(adopted) if adopted else None)
    return _frame(project, names, found, candidates, accepted, rule)


def _simulated(
    project: Project,
    names: Sequence[str],
    rule: FrameRule,
    effects: Sequence[Effect],
    together: Effect | None = None,
) -> Simulation:
    """The project's elements simulated under ``rule``: the one simulation a frame and the
    validator's reproduction of a claim both read."""
    return simulate(
        _elements(project, names, rule),
        correlation=project.correlation,
        effects=effects,
        together=together,
        seed=rule.seed,
        samples=rule.samples,
    )


def candidate_delta(project: Project, candidate: Candidate, rule: FrameRule) -> FrameDelta | None:
    """The candidate's effect alone, as ``frame_of`` computes it for its frame (the other
    candidates move no draw); None when the project has no triple estimate or the candidate no
    line."""
    if not has_triples(project):
        return None
    names = _names(project)
    shares = _shares(project, names, candidate)
    if shares is None:
        return None
    found = _simulated(project, names, rule, [Effect(candidate.id, shares)])
    return FrameDelta.of(found.effects[candidate.id])


def _frame(
    project: Project,
    names: Sequence[str],
    found: Simulation,
    candidates: Sequence[Candidate],
    accepted: frozenset[str],
    rule: FrameRule,
) -> Frame:
    held = {f"measure-option:{m.id}" for m in project.measure_options}
    counted = [c for c in candidates if c.origin in held and c.id in accepted]
    kuttliste = math.fsum(float(c.claimed_saving_nok) for c in counted)
    left_out = sorted(held - {c.origin for c in counted})
    groups: dict[str, list[str]] = defaultdict(list)
    uncertain: list[str] = []
    certain: list[str] = []
    assumed: dict[str, Spread] = {}
    for line, name in zip(project.cost_lines, names, strict=True):
        if _triple(line) is not None:
            uncertain.append(name)
        elif (spread := rule.spread_of(line.code)) is not None:
            assumed[name] = spread
        else:
            certain.append(name)
        if line.correlation_group:
            groups[line.correlation_group].append(name)
    risks = _risk_names(project, names)
    for risk, name in zip(project.uncertainties, risks, strict=True):
        if risk.correlation_group:
            groups[risk.correlation_group].append(name)
    q: Mapping[str, float] = found.quantiles
    return Frame(
        seed=found.seed,
        samples=found.samples,
        stable_to=found.stable_to,
        mean_nok=found.mean,
        p10_nok=q["p10"],
        p50_nok=q["p50"],
        p85_nok=q["p85"],
        p90_nok=q["p90"],
        kuttliste_nok=kuttliste,
        kuttliste_left_out=tuple(origin.removeprefix("measure-option:") for origin in left_out),
        kostnadsramme_nok=q["p85"] - kuttliste,
        correlation=dict(project.correlation),
        groups={group: tuple(codes) for group, codes in sorted(groups.items())},
        uncertain=tuple(uncertain),
        uncertainties={
            name: u.probability for u, name in zip(project.uncertainties, risks, strict=True)
        },
        certain=tuple(certain),
        assumed=assumed,
        curve=found.curve,
        contributors=tuple(
            Contributor(code=code, deviation_nok=share)
            for code, share in found.contributions[:CONTRIBUTORS]
            if share > 0
        ),
        deltas={cid: FrameDelta.of(delta) for cid, delta in found.effects.items()},
        adopted=tuple(cid for cid in found.effects if cid in accepted),
        joint=FrameDelta.of(found.joint) if found.joint is not None else None,
        stated_p50_nok=project.p50_nok,
        stated_p85_nok=project.p85_nok,
    )
