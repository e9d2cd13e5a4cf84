"""One draw of a frame's samples: every element's draws (its own stream, mixed with its group's
factor, multiplied by its drivers), added up, with what each driver added and what each measure
removes in each sample; and the second pass that measures each element against the total."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np

from .uncertainty_marginals import Floats, draws_of, normal_quantile, stream

if TYPE_CHECKING:
    from .uncertainty import Driver, Effect, Element

__all__ = ["Draws", "Mixing", "draw", "element_draws", "joined", "swing_of"]

Mixing = tuple[tuple[str, ...], "Floats"]
_Part = tuple[
    "Floats", list["Floats"], dict[str, "Floats"], dict[str, "Floats"], dict[str, "Floats"]
]
"""Factor names and their correlation matrix: the factors are drawn independent, then mixed."""

_TAILS: Final = np.array([normal_quantile(0.10), normal_quantile(0.90)])
HELD_VALUES: Final = 2_000_000
"""Draws of the first round held for the second pass (16 MB): a small project's are, a large
one's are drawn again."""
_THREADED: Final = 64
"""Elements from which a round is drawn on two threads (below, the threads cost more)."""
_CORES: Final = (
    len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
)


@dataclass(frozen=True)
class Draws:
    total: Floats
    removed: list[Floats]
    """Each effect's removal in each sample, then the joint one's (when there is a set)."""
    factors: Mapping[str, Floats]
    """Each group's factor and each driver's normal score."""
    multipliers: Mapping[str, Floats]
    added: Mapping[str, Floats]
    """What each driver added to the total in each sample (drivers applied in an element's
    order: the second multiplies what the first made of it)."""
    under: Mapping[str, Floats]
    """What each driver multiplies in each sample: the total of its elements, less it."""
    rounds: tuple[int, ...]
    """The samples drawn in each round: a round draws from streams of its own, so more samples
    add to those drawn before and never draw them again."""
    accounts: Mapping[str, Floats]
    """Each account's own total in each sample (its elements, with their drivers)."""
    held: Mapping[str, Floats]
    """The first round's own draws of each element, where they fit in ``HELD_VALUES``: the
    second pass reads them instead of drawing them again."""

    def driver_swing(self, driver: Driver, mean: float) -> tuple[str, float, float]:
        """(id, the expected total with the driver at its P10, at its P90)."""
        drawn, base = self.multipliers[driver.id], self.under[driver.id]
        low, high = draws_of(driver.low, driver.likely, driver.high, driver.distribution, _TAILS)
        return (
            driver.id,
            mean + float(np.mean((low - drawn) * base)),
            mean + float(np.mean((high - drawn) * base)),
        )


def _named(name: str, round_: int) -> str:
    """A stream's name in a round: the first round's are the names themselves."""
    return name if round_ == 0 else f"{name}#{round_}"


def joined(parts: Sequence[Draws]) -> Draws:
    """Rounds of draws as one: their samples one after the other."""
    if len(parts) == 1:
        return parts[0]

    def cat(name: str) -> dict[str, Floats]:
        keys = getattr(parts[0], name)
        return {k: np.concatenate([getattr(p, name)[k] for p in parts]) for k in keys}

    return Draws(
        np.concatenate([p.total for p in parts]),
        [np.concatenate(r) for r in zip(*(p.removed for p in parts), strict=True)],
        cat("factors"),
        cat("multipliers"),
        cat("added"),
        cat("under"),
        tuple(n for p in parts for n in p.rounds),
        cat("accounts"),
        parts[0].held,
    )


def _factors(
    elements: Sequence[Element],
    drivers: Sequence[Driver],
    rho: Mapping[str, float],
    seed: int,
    n: int,
    round_: int,
    between: Mixing | None = None,
) -> dict[str, Floats]:
    found = {
        d.id: stream(seed, _named("driver:" + d.id, round_)).standard_normal(n) for d in drivers
    }
    mixed = between[0] if between is not None else ()
    groups = [e.group for e in elements if e.group and rho.get(e.group, 0.0) > 0.0]
    for group in [*groups, *mixed]:
        if group not in found:
            found[group] = stream(seed, _named("group:" + group, round_)).standard_normal(n)
    if between is not None:
        names, matrix = between
        values, vectors = np.linalg.eigh(matrix)
        root = vectors * np.sqrt(np.maximum(values, 0.0))
        scores = root @ np.stack([found[name] for name in names])
        found.update(zip(names, scores, strict=True))
    return found


def _own(
    element: Element,
    rho: Mapping[str, float],
    seed: int,
    n: int,
    factors: Mapping[str, Floats],
    round_: int,
) -> Floats:
    """An element's own draws, the same each time they are asked for: its normal scores from its
    own stream mixed with its group's factor, then its marginal; whether an event happens drawn
    after them from the same stream, following the group's factor as its size does."""
    own = stream(seed, _named("element:" + element.id, round_))
    score = own.standard_normal(n)
    coefficient = rho.get(element.group, 0.0) if element.group else 0.0
    factor = factors.get(element.group) if element.group and coefficient > 0.0 else None
    if factor is not None:
        score *= math.sqrt(1.0 - coefficient)
        score += math.sqrt(coefficient) * factor
    x = draws_of(element.low, element.likely, element.high, element.distribution, score)
    if element.probability < 1.0:
        if factor is not None:
            chance = math.sqrt(coefficient) * factor + math.sqrt(1.0 - coefficient) * (
                own.standard_normal(n)
            )
            happens = chance > normal_quantile(1.0 - element.probability)
        else:
            happens = own.random(n) < element.probability
        x = np.where(happens, x, 0.0)
    return x


def element_draws(
    element: Element, rho: Mapping[str, float], seed: int, found: Draws
) -> tuple[Floats, Floats | None]:
    """(the element's own draws in the first round, the product of its drivers' draws there;
    None: it has none): drawn again, the same."""
    first = found.rounds[0]
    multiplier: Floats | None = None
    for name in element.drivers:
        drawn = found.multipliers[name][:first]
        multiplier = drawn if multiplier is None else multiplier * drawn
    held = found.held.get(element.id)
    if held is not None:
        return held, multiplier
    factors = {k: v[:first] for k, v in found.factors.items()}
    return _own(element, rho, seed, first, factors, 0), multiplier


def _tails(x: Floats) -> tuple[float, float]:
    """P10 and P90 of draws, as ``np.quantile`` reads them (which imports numpy.ma, 2 MB)."""
    ordered = np.sort(x)
    found = []
    for share in (0.10, 0.90):
        place = share * (len(ordered) - 1)
        below = math.floor(place)
        above = min(below + 1, len(ordered) - 1)
        found.append(float(ordered[below] + (place - below) * (ordered[above] - ordered[below])))
    return found[0], found[1]


def swing_of(
    element: Element, x: Floats, multiplier: Floats | None, mean: float
) -> tuple[str, float, float]:
    """(id, the expected total with the element at its P10, at its P90): an event's from its
    draws (it has an atom at nothing), another's from its marginal."""
    if element.probability < 1.0:
        low, high = _tails(x)
    else:
        low, high = draws_of(
            element.low, element.likely, element.high, element.distribution, _TAILS
        ).tolist()
    scale = multiplier if multiplier is not None else 1.0
    return (
        element.id,
        mean + float(np.mean((low - x) * scale)),
        mean + float(np.mean((high - x) * scale)),
    )


def _remove(
    element: Element,
    value: Floats,
    touching: Sequence[tuple[int, float, float]],
    sizes: Sequence[Floats | None],
    joint: set[int],
    removed: list[Floats],
) -> None:
    """What each measure on ``element`` takes off it in each sample, alone and together."""
    shared: Floats | float = 0.0
    summed: Floats | float = 0.0
    for i, share, fixed in touching:
        size = sizes[i]
        scale: Floats | float = 1.0 if size is None else size
        removed[i] += scale * (share * value + fixed)
        if i in joint:
            shared = shared + scale * share
            summed = summed + scale * fixed
    if joint & {i for i, _share, _fixed in touching}:
        removed[-1] += np.minimum(shared, 1.0) * value + np.minimum(summed, element.likely)


def draw(
    elements: Sequence[Element],
    drivers: Sequence[Driver],
    rho: Mapping[str, float],
    effects: Sequence[Effect],
    together: Sequence[str],
    seed: int,
    n: int,
    round_: int = 0,
    between: Mixing | None = None,
) -> Draws:
    """Every sample's total in a round of ``n``, each driver's part of it and each measure's
    removal from it."""
    factors = _factors(elements, drivers, rho, seed, n, round_, between)
    multipliers = {
        d.id: draws_of(d.low, d.likely, d.high, d.distribution, factors[d.id]) for d in drivers
    }
    sizes = [
        None
        if e.spread is None
        else draws_of(
            *e.spread, "pert", stream(seed, _named("effect:" + e.id, round_)).standard_normal(n)
        )
        for e in effects
    ]
    joint = {i for i, e in enumerate(effects) if e.id in set(together)}
    touching: dict[str, list[tuple[int, float, float]]] = {}
    for i, effect in enumerate(effects):
        for name in {*effect.shares, *effect.fixed}:
            touching.setdefault(name, []).append(
                (i, effect.shares.get(name, 0.0), effect.fixed.get(name, 0.0))
            )

    names = sorted({e.account for e in elements if e.account is not None})

    keep = round_ == 0 and len(elements) * n <= HELD_VALUES
    held: dict[str, Floats] = {}

    def part(chunk: Sequence[Element]) -> _Part:
        total = np.zeros(n)
        removed = [np.zeros(n) for _ in range(len(effects) + (1 if together else 0))]
        added = {d.id: np.zeros(n) for d in drivers}
        under = {d.id: np.zeros(n) for d in drivers}
        accounts = {name: np.zeros(n) for name in names}
        for element in chunk:
            value = _own(element, rho, seed, n, factors, round_)
            if keep:
                held[element.id] = value
            for name in element.drivers:
                multiplied = value * multipliers[name]
                added[name] += multiplied - value
                value = multiplied
            for name in element.drivers:
                under[name] += value
            total += value
            if element.account is not None:
                accounts[element.account] += value
            if element.id in touching:
                _remove(element, value, touching[element.id], sizes, joint, removed)
        return total, removed, added, under, accounts

    # numpy lets go of the interpreter while it draws and adds: the elements' halves on two
    # threads take about half the time on two cores.
    halves = [elements[: len(elements) // 2], elements[len(elements) // 2 :]]
    if len(elements) < _THREADED or _CORES < 2:
        total, removed, added, under, accounts = part(elements)
    else:
        with ThreadPoolExecutor(max_workers=2) as pool:
            (total, removed, added, under, accounts), other = pool.map(part, halves)
        total += other[0]
        for mine, theirs in zip(removed, other[1], strict=True):
            mine += theirs
        for name in added:
            added[name] += other[2][name]
            under[name] += other[3][name]
        for name in accounts:
            accounts[name] += other[4][name]
    for name, drawn in multipliers.items():
        under[name] = np.divide(under[name], drawn, out=np.zeros(n), where=drawn > 0)
    return Draws(total, removed, factors, multipliers, added, under, (n,), accounts, held)
