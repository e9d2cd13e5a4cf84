"""The fit over arrays gives the figures of the plain fit, line for line (``price_fit_plain``):
on random portfolios with categories, ties, thin classes, projects of few lines, and a project id
in two folders, and projects of over 60 lines (whose slope is taken from every other line); for its own lines, for revised ones, and for a bundle not yet in the index."""

from __future__ import annotations

import random

import pytest

from portfolio_optimiser.context import fit_arrays, fit_kernels
from portfolio_optimiser.context.price_fit import PriceFit
from portfolio_optimiser.context.reference import Comparable, ReferenceIndex, ReferenceRule
from tests.price_fit_plain import PriceFit as PlainFit

CATEGORIES = [None, "", "skole", "vei", "bru"]

Priced = list[tuple[str, str, str, float, float]]


def _portfolio(rnd: random.Random) -> tuple[ReferenceIndex, list[str], dict[str, str | None]]:
    projects = [f"P{i:03d}" for i in range(rnd.randint(1, 40))]
    category = {p: rnd.choice(CATEGORIES) for p in projects}
    level = {p: rnd.gauss(0, 0.2) for p in projects}
    classes: dict[tuple[str, str], tuple[Comparable, ...]] = {}
    for k in range(rnd.randint(1, 12) if rnd.random() < 0.8 else rnd.randint(61, 75)):
        key = (f"K{k}", rnd.choice(["m2", "m3", "stk"]))
        base = rnd.uniform(100, 5000)
        members = []
        for p in projects:
            if rnd.random() > 0.7:
                continue
            for folder in range(2 if rnd.random() < 0.05 else 1):  # a project id in two folders
                factor = 2.718 ** (level[p] + rnd.gauss(0, 0.15)) * (
                    3 if rnd.random() < 0.05 else 1
                )
                price = round(base, 0) if rnd.random() < 0.05 else round(base * factor, 2)
                members.append(((p, folder), Comparable(p, f"{p}/{folder}.md", price, category[p])))
        if members:
            classes[key] = tuple(c for _k, c in sorted(members, key=lambda m: m[0]))
    if rnd.random() < 0.2:
        classes = _two_spreads(rnd, projects, category)
    rule = ReferenceRule(min_comparables=rnd.choice([1, 2, 4]))
    return ReferenceIndex(dict(sorted(classes.items())), rule), projects, category


def _two_spreads(
    rnd: random.Random, projects: list[str], category: dict[str, str | None]
) -> dict[tuple[str, str], tuple[Comparable, ...]]:
    """Classes of two spreads alone: one price for every project, or two projects at twice
    the other's price — a project's lines then lie at two distinct spreads, too few for a slope."""
    classes = {}
    for k in range(rnd.randint(6, 14)):
        base = rnd.uniform(100, 5000)
        if k < 6:
            priced = [(p, base) for p in projects]
        else:
            pair = rnd.sample(projects, min(2, len(projects)))
            priced = [(p, base * (i + 1)) for i, p in enumerate(sorted(pair))]
        classes[(f"T{k}", "m2")] = tuple(
            Comparable(p, f"{p}.md", x, category[p]) for p, x in priced
        )
    return classes


def _lines(rnd: random.Random, index: ReferenceIndex, project: str, revised: bool) -> Priced:
    """Some of the classes, one or two posts each: the indexed price, or another."""
    priced = []
    keys = list(index.classes)
    for key in keys[: rnd.randint(0, len(keys))]:
        mine = [c.unit_price_nok for c in index.classes[key] if c.project_id == project]
        for post in range(rnd.choice([1, 1, 2])):
            price = mine[-1] if mine and not revised else rnd.uniform(100, 6000)
            priced.append((f"{key[0]}.{post}", key[0], key[1], price, rnd.uniform(1, 100)))
    return priced


@pytest.fixture(params=["compiled", "numpy"])
def loops(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both forms of the fit's inner loops, whatever the portfolio's size (``fit_kernels``), on
    blocks of a few projects each (shared among the threads)."""
    monkeypatch.setattr(fit_kernels, "COMPILED_FROM", 0 if request.param == "compiled" else 10**12)
    monkeypatch.setattr(fit_arrays, "BLOCK", 3)
    return str(request.param)


@pytest.mark.parametrize("seed", range(60))
def test_the_fit_over_arrays_gives_the_plain_fits_figures(seed: int, loops: str) -> None:
    rnd = random.Random(seed)
    index, projects, category = _portfolio(rnd)
    fit, plain = PriceFit(index), PlainFit(index)
    for project in [*projects, "NEW-1", "NEW-2"]:
        cat = category.get(project, rnd.choice(CATEGORIES))
        own = [
            (key[0], key[0], key[1], c.unit_price_nok, 1.0)
            for key, comparables in index.classes.items()
            for c in comparables
            if c.project_id == project
        ]
        for priced in (
            own,
            _lines(rnd, index, project, revised=False),
            _lines(rnd, index, project, revised=True),
        ):
            assert fit.assess(project, cat, priced) == plain.assess(project, cat, priced), project
