"""A project's frame as the simulation takes it: its lines and uncertainty elements as elements,
the drivers acting on them, and each candidate as an effect.

A line with a triple estimate of its own is drawn from it. A line without one is taken at its
amount times its account's estimate-maturity driver (``[uncertainty] spread``, or ``spreads`` by
account): one draw a sample for all the lines of an account, never one a line, so the frame does
not depend on how finely the estimate is broken down. Without a spread it is taken as certain.
The general drivers (``type: uncertainty-driver`` in the bundle, else ``[uncertainty.drivers]``;
the bundle's wins where both name one) multiply every line they name, stated or not.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from .correlation import FactorCorrelation, factor_correlation
from .frame_inputs import UncertaintyDriver
from .models import Candidate, CostLine, MeasureOption, Project
from .uncertainty import Driver, Effect, Element

__all__ = [
    "MATURITY",
    "Built",
    "FrameRule",
    "Spread",
    "built_of",
    "effect_of",
    "line_names",
    "risk_names",
    "triple_of",
]

Spread = tuple[float, float]
"""A line's assumed minimum and maximum, as shares of its amount (0.9, 1.25)."""
MATURITY: Final = "estimate maturity"
"""The driver that carries the spread of the lines without a triple of their own."""


@dataclass(frozen=True)
class FrameRule:
    """What a frame's figures are a function of, beside the bundle: ``[uncertainty]``."""

    seed: int = 3459
    samples: int = 10_000
    spread: Spread | None = None
    """The range of the estimate-maturity driver on the lines with no triple estimate; None:
    they are taken as certain."""
    spreads: tuple[tuple[str, Spread], ...] = ()
    """Ranges by account, each its own driver: the longest code prefix a line's code begins
    with gives its account."""
    drivers: tuple[UncertaintyDriver, ...] = ()
    """The organisation's general drivers, for a bundle that does not name its own."""
    divergence: float = 0.10
    """How far the simulated P85 may stand from a stated one before the report flags it."""
    repair: bool = False
    """A stated correlation matrix that is not positive semi-definite is simulated with the
    nearest correlation matrix (and the report says so); False: the bundle is refused."""

    def account_of(self, code: str) -> tuple[str, Spread] | None:
        """The maturity driver's id and range for a line of ``code`` with no triple estimate;
        None: certain."""
        matching = [(len(key), key, spread) for key, spread in self.spreads if code.startswith(key)]
        if matching:
            _length, key, spread = max(matching)
            name = f"{MATURITY} {key}"
        elif self.spread is not None:
            name, spread = MATURITY, self.spread
        else:
            return None
        return None if spread == (1.0, 1.0) else (name, spread)


Origin = Literal["bundle", "settings", "maturity"]


@dataclass(frozen=True)
class Built:
    elements: list[Element]
    drivers: list[Driver]
    origins: dict[str, Origin]
    """Each driver's origin: the bundle, ``[uncertainty.drivers]`` or the maturity spread."""
    lines_of: dict[str, list[str]]
    """Each driver's lines, by element id."""
    assumed: dict[str, Spread]
    """The lines with no triple estimate, drawn through their account's maturity driver."""
    certain: list[str]
    uncertain: list[str]
    between: FactorCorrelation | None = None


def triple_of(line: CostLine) -> tuple[float, float, float] | None:
    if line.min_nok is None or line.max_nok is None:
        return None
    likely = line.likely_nok if line.likely_nok is not None else line.amount_nok
    return float(line.min_nok), float(likely), float(line.max_nok)


def account_of(line: CostLine) -> str | None:
    """The NS 3451 building part a line is part of (its first digit: 2 Bygning, 3 VVS, …): the
    file's building part for an imported post, else its code's (``02.3``, as NS 3453 estimates
    write it, is part 2); None for a code that is none."""
    code = line.ns3451 or ("" if line.post else line.code)
    if len(code) > 1 and code[0] == "0" and code[1].isdigit():
        code = code[1:]
    return code[0] if code[:1].isdigit() and code[0] != "0" else None


def line_names(project: Project) -> list[str]:
    """Each line's element id: its code, numbered from the second line of a code on."""
    seen: dict[str, int] = defaultdict(int)
    names = []
    for line in project.cost_lines:
        seen[line.code] += 1
        names.append(line.code if seen[line.code] == 1 else f"{line.code} ({seen[line.code]})")
    return names


def risk_names(project: Project, names: Sequence[str]) -> list[str]:
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


def _general(project: Project, rule: FrameRule) -> list[UncertaintyDriver]:
    own = {driver.id for driver in project.drivers}
    return [*project.drivers, *(d for d in rule.drivers if d.id not in own)]


def built_of(project: Project, names: Sequence[str], rule: FrameRule) -> Built:
    general = _general(project, rule)
    origins: dict[str, Origin] = {
        d.id: "bundle" if d in project.drivers else "settings" for d in general
    }
    lines_of: dict[str, list[str]] = defaultdict(list)
    maturity: dict[str, Spread] = {}
    assumed: dict[str, Spread] = {}
    certain: list[str] = []
    uncertain: list[str] = []
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
        for u, name in zip(project.uncertainties, risk_names(project, names), strict=True)
    ]
    for line, name in zip(project.cost_lines, names, strict=True):
        triple = triple_of(line)
        own = [
            d.id for d in general if d.applies(line.code, stated=triple is not None, post=line.post)
        ]
        if triple is None:
            amount = float(line.amount_nok)
            triple = (amount, amount, amount)
            account = rule.account_of(line.code)
            if account is None:
                certain.append(name)
            else:
                maturity[account[0]] = account[1]
                assumed[name] = account[1]
                own.insert(0, account[0])
        else:
            uncertain.append(name)
        for driver in own:
            lines_of[driver].append(name)
        elements.append(
            Element(
                name,
                *triple,
                distribution=line.distribution,
                group=line.correlation_group,
                drivers=tuple(own),
                account=account_of(line),
            )
        )
    drivers = [Driver(name, low, 1.0, high) for name, (low, high) in sorted(maturity.items())]
    origins.update(dict.fromkeys(maturity, "maturity"))
    drivers += [
        Driver(d.id, d.low, d.likely, d.high, distribution=d.distribution)
        for d in general
        if d.id in lines_of
    ]
    between = factor_correlation(
        project.correlation_between,
        factors=[*project.correlation, *(d.id for d in drivers)],
        repair=rule.repair,
    )
    return Built(elements, drivers, origins, dict(lines_of), assumed, certain, uncertain, between)


def _option(project: Project, candidate: Candidate) -> MeasureOption | None:
    name = candidate.origin.removeprefix("measure-option:")
    if name == candidate.origin:
        return None
    return next((m for m in project.measure_options if m.id == name), None)


def effect_of(project: Project, names: Sequence[str], candidate: Candidate) -> Effect | None:
    """The candidate as the frame applies it: a sum off its lines (``effect: fixed``, the
    default) or a share of them (``proportional``), with its saving's own range where its
    measure gives one; None when it touches no line with an amount."""
    codes = set(candidate.affected_codes)
    touched = [
        (name, line)
        for line, name in zip(project.cost_lines, names, strict=True)
        if line.code in codes
    ]
    base = math.fsum(float(line.amount_nok) for _name, line in touched)
    if not touched or base <= 0:
        return None
    saving = min(max(float(candidate.claimed_saving_nok), 0.0), base)
    option = _option(project, candidate)
    spread = None
    if (
        option is not None
        and option.saving_min_nok is not None
        and option.saving_max_nok is not None
    ):
        likely = float(option.estimated_saving_nok)
        if likely > 0:
            spread = (
                float(option.saving_min_nok) / likely,
                1.0,
                float(option.saving_max_nok) / likely,
            )
    if option is not None and option.effect == "proportional":
        share = saving / base
        return Effect(candidate.id, {name: share for name, _line in touched}, spread=spread)
    fixed = {name: saving * float(line.amount_nok) / base for name, line in touched}
    return Effect(candidate.id, fixed=fixed, spread=spread)
