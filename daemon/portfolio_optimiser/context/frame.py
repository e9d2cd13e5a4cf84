"""A project's uncertainty frame: its cost lines, uncertainty elements and drivers simulated
(``frame_build`` says how each is drawn), P50 and P85 with their errors, the reserve and the
expected addition, the kostnadsramme with the kuttliste held, and what each candidate does.

Built only for a project that gives a triple estimate (``min_nok`` and ``max_nok`` on a line,
with ``likely_nok`` or else ``amount_nok`` as the most likely; or a ``type: uncertainty``
element); the frame names every line it took as certain or drew through an assumed spread.

**A stated frame governs.** Where the project states its P85 (the kostnadsramme's basis, as
approved), the kostnadsramme is that P85 less the validated kuttliste, and the styringsramme
its stated P50; the simulation is a cross-check beside it, flagged when its P85 stands more than
``[uncertainty] divergence`` from the stated one. A kostnadsramme below the styringsramme is
incoherent (the kuttliste is worth more than the reserve it is held against): flagged, with the
items that make it so. The kuttliste is held, not adopted: P50 is left alone.

A candidate is applied as its measure declares (``effect``: a sum off its lines, the default, or
a share of them), alone and, for the validated ones, together (effects do not add at a
quantile).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict

from .correlation import FrameRefused
from .frame_build import (
    Built,
    FrameRule,
    Spread,
    built_of,
    effect_of,
    line_names,
    risk_names,
    triple_of,
)
from .models import Candidate, Project
from .uncertainty import Delta, Simulation, simulate

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
    "frame_refusal",
    "has_triples",
]

CONTRIBUTORS: Final = 10
"""The largest contributors and swings a frame keeps (the charts' bars)."""
DEFAULT_RULE: Final = FrameRule()


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FrameDelta(_Frozen):
    """What a measure adopted now does to the frame (negative: lowers it), with the standard
    error of each figure."""

    p50_nok: float
    p85_nok: float
    p50_error_nok: float = 0.0
    p85_error_nok: float = 0.0

    @classmethod
    def of(cls, delta: Delta) -> FrameDelta:
        return cls(
            p50_nok=delta.p50,
            p85_nok=delta.p85,
            p50_error_nok=delta.p50_error,
            p85_error_nok=delta.p85_error,
        )


class Contributor(_Frozen):
    code: str
    deviation_nok: float
    """Its share of the total's standard deviation (the shares add up to it)."""


class FrameSwing(_Frozen):
    """The expected cost with one element or driver at its P10 and at its P90."""

    code: str
    at_p10_nok: float
    at_p90_nok: float


class FrameDriver(_Frozen):
    id: str
    low: float
    likely: float
    high: float
    origin: Literal["bundle", "settings", "maturity"]
    lines: tuple[str, ...]


class Frame(_Frozen):
    """The frame's figures, as ``proposals.json`` and the report carry them."""

    seed: int
    samples: int
    stable_to: float
    """Half P85's 95 % interval over the samples, as a share of P85."""
    errors: dict[str, float]
    """The standard error of each simulated figure: p10, p50, p85, p90, mean, reserve."""
    base_nok: float
    """The base estimate: the lines' amounts, added."""
    mean_nok: float
    p10_nok: float
    p50_nok: float
    p85_nok: float
    p90_nok: float
    reserve_nok: float
    """Usikkerhetsavsetning: the simulated P85 less P50."""
    expected_addition_nok: float
    """Forventet tillegg: the simulated mean less the base estimate."""
    basis: Literal["stated", "simulated"]
    """Where the governing frame comes from: the project's stated P85, else the simulation."""
    styringsramme_nok: float
    kuttliste_nok: float
    """The kuttliste's value: the estimated savings of its items the validator accepted (and the
    checker did not reject), added: an item counted twice, or out of its lines' cost, is not."""
    kuttliste_left_out: tuple[str, ...] = ()
    """The kuttliste's items not counted in its value (by id): the report says so."""
    kostnadsramme_nok: float
    """The governing P85 less the kuttliste's value (the kuttliste held to protect it)."""
    simulated_kostnadsramme_nok: float
    divergence: float | None = None
    """The simulated P85 against the stated one, as a share of it (None: none stated)."""
    divergent: bool = False
    divergence_allowed: float = 0.10
    """``[uncertainty] divergence``: how far the simulated P85 may stand from a stated one."""
    incoherent: tuple[str, ...] = ()
    """The counted kuttliste items, largest first, when the kostnadsramme falls below the
    styringsramme."""
    correlation: dict[str, float]
    """Each correlation group's coefficient, as the project declares it."""
    correlation_between: dict[str, dict[str, float]] = {}
    """The coefficients across groups and drivers the simulation used (after any repair)."""
    correlation_repaired: float | None = None
    """How far the nearest correlation matrix moved the largest stated coefficient; None: the
    stated matrix was used as it is."""
    groups: dict[str, tuple[str, ...]]
    """Each group's lines, by code."""
    uncertain: tuple[str, ...]
    """The lines simulated from a triple estimate."""
    uncertainties: dict[str, float] = {}
    """The uncertainty elements beside the lines, each with its probability (1: always there)."""
    drivers: tuple[FrameDriver, ...] = ()
    certain: tuple[str, ...]
    """The lines with no triple estimate and no assumed spread: taken at their amount, as certain."""
    assumed: dict[str, Spread] = {}
    """The lines with no triple estimate, each with its account's maturity spread."""
    curve: tuple[float, ...]
    """The S-curve: the total at 0 %, 1 %, … 100 % of the samples."""
    accounts: dict[str, dict[str, float]] = {}
    """Each NS 3451 building part's own P10, P50, P85 and P90 (its P-curve)."""
    contributors: tuple[Contributor, ...]
    swings: tuple[FrameSwing, ...] = ()
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
        triple_of(line) is not None for line in project.cost_lines
    )


def frame_refusal(project: Project, rule: FrameRule) -> str | None:
    """Why the project's frame cannot be simulated as it is stated (its correlation across
    groups and drivers is no correlation matrix), or None: checked before a run spends
    anything."""
    if not has_triples(project):
        return None
    try:
        built_of(project, line_names(project), rule)
    except FrameRefused as exc:
        return str(exc)
    return None


def _simulated(
    project: Project,
    names: Sequence[str],
    built: Built,
    rule: FrameRule,
    candidates: Sequence[Candidate],
    accepted: frozenset[str],
) -> Simulation:
    """The project simulated under ``rule`` (``names``: its lines' names; ``built``:
    its elements and drivers under the rule): the one simulation a frame and the validator's
    reproduction of a claim both read."""
    effects = [e for c in candidates if (e := effect_of(project, names, c)) is not None]
    return simulate(
        built.elements,
        drivers=built.drivers,
        correlation=project.correlation,
        effects=effects,
        together=[e.id for e in effects if e.id in accepted],
        between=(built.between.names, built.between.matrix) if built.between else None,
        seed=rule.seed,
        samples=rule.samples,
    )


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
    names = line_names(project)
    built = built_of(project, names, rule)
    found = _simulated(project, names, built, rule, candidates, accepted)
    return _frame(project, names, built, found, candidates, accepted, rule)


def candidate_delta(project: Project, candidate: Candidate, rule: FrameRule) -> FrameDelta | None:
    """The candidate's effect alone (the other candidates move no draw); None when the project
    has no triple estimate or the candidate no line."""
    if not has_triples(project):
        return None
    names = line_names(project)
    found = _simulated(
        project, names, built_of(project, names, rule), rule, [candidate], frozenset()
    )
    delta = found.effects.get(candidate.id)
    return None if delta is None else FrameDelta.of(delta)


def _between(built: Built) -> dict[str, dict[str, float]]:
    if built.between is None:
        return {}
    names, matrix = built.between.names, built.between.matrix
    return {
        a: {b: round(float(matrix[i, j]), 4) for j, b in enumerate(names) if j > i}
        for i, a in enumerate(names[:-1])
    }


def _kuttliste(
    project: Project, candidates: Sequence[Candidate], accepted: frozenset[str]
) -> tuple[list[Candidate], list[str]]:
    held = {f"measure-option:{m.id}" for m in project.measure_options}
    counted = [c for c in candidates if c.origin in held and c.id in accepted]
    left_out = sorted(held - {c.origin for c in counted})
    return counted, [origin.removeprefix("measure-option:") for origin in left_out]


def _frame(
    project: Project,
    names: Sequence[str],
    built: Built,
    found: Simulation,
    candidates: Sequence[Candidate],
    accepted: frozenset[str],
    rule: FrameRule,
) -> Frame:
    counted, left_out = _kuttliste(project, candidates, accepted)
    kuttliste = math.fsum(float(c.claimed_saving_nok) for c in counted)
    groups: dict[str, list[str]] = defaultdict(list)
    for line, name in zip(project.cost_lines, names, strict=True):
        if line.correlation_group:
            groups[line.correlation_group].append(name)
    risks = risk_names(project, names)
    for risk, name in zip(project.uncertainties, risks, strict=True):
        if risk.correlation_group:
            groups[risk.correlation_group].append(name)
    q = found.quantiles
    stated = project.p85_nok is not None
    governing = float(project.p85_nok) if project.p85_nok is not None else q["p85"]
    styring = float(project.p50_nok) if project.p50_nok is not None else q["p50"]
    kostnadsramme = governing - kuttliste
    divergence = (q["p85"] - governing) / governing if stated and governing else None
    base = project.cost_total_nok
    return Frame(
        seed=found.seed,
        samples=found.samples,
        stable_to=found.stable_to,
        errors=dict(found.errors),
        base_nok=base,
        mean_nok=found.mean,
        p10_nok=q["p10"],
        p50_nok=q["p50"],
        p85_nok=q["p85"],
        p90_nok=q["p90"],
        reserve_nok=q["p85"] - q["p50"],
        expected_addition_nok=found.mean - base,
        basis="stated" if stated else "simulated",
        styringsramme_nok=styring,
        kuttliste_nok=kuttliste,
        kuttliste_left_out=tuple(left_out),
        kostnadsramme_nok=kostnadsramme,
        simulated_kostnadsramme_nok=q["p85"] - kuttliste,
        divergence=divergence,
        divergent=divergence is not None and abs(divergence) > rule.divergence,
        divergence_allowed=rule.divergence,
        incoherent=tuple(
            c.origin.removeprefix("measure-option:")
            for c in sorted(counted, key=lambda c: (-float(c.claimed_saving_nok), c.id))
        )
        if kostnadsramme < styring
        else (),
        correlation=dict(project.correlation),
        correlation_between=_between(built),
        correlation_repaired=built.between.repaired if built.between else None,
        groups={group: tuple(codes) for group, codes in sorted(groups.items())},
        uncertain=tuple(built.uncertain),
        uncertainties={
            name: u.probability for u, name in zip(project.uncertainties, risks, strict=True)
        },
        drivers=tuple(
            FrameDriver(
                id=d.id,
                low=d.low,
                likely=d.likely,
                high=d.high,
                origin=built.origins[d.id],
                lines=tuple(built.lines_of.get(d.id, ())),
            )
            for d in built.drivers
        ),
        certain=tuple(built.certain),
        assumed=built.assumed,
        curve=found.curve,
        accounts={name: dict(q) for name, q in found.accounts.items()},
        contributors=tuple(
            Contributor(code=code, deviation_nok=share)
            for code, share in found.contributions[:CONTRIBUTORS]
            if share > 0
        ),
        swings=tuple(
            FrameSwing(code=s.id, at_p10_nok=s.at_p10, at_p90_nok=s.at_p90)
            for s in found.swings[:CONTRIBUTORS]
            if s.width > 0
        ),
        deltas={cid: FrameDelta.of(delta) for cid, delta in found.effects.items()},
        adopted=tuple(cid for cid in found.effects if cid in accepted),
        joint=FrameDelta.of(found.joint) if found.joint is not None else None,
        stated_p50_nok=project.p50_nok,
        stated_p85_nok=project.p85_nok,
    )
