"""The reference candidates of every project at once (``ReferenceSweep``) are the ones each
project's own snapshot gives (``reference_candidates`` of ``ReferenceIndex.assess``), and a
project the sweep cannot tell from its compact prices is left to its IR (None)."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.line_references import ProjectReferences
from portfolio_optimiser.context.models import Project
from portfolio_optimiser.context.reference import (
    Comparable,
    ProjectPrices,
    ReferenceIndex,
    ReferenceRule,
    material,
    reference_candidates,
    reference_saving,
)
from portfolio_optimiser.context.reference_classes import ReferenceClasses
from portfolio_optimiser.context.reference_sweep import (
    ReferenceSweep,
    material_savings,
    reference_savings,
    rounded_to_cents,
)
from tests.synthetic_ns3451 import generate_ns3451


def _projects(tmp_path: Path, seed: int, n: int, parts: int) -> list[Project]:
    portfolio = generate_ns3451(seed, n, parts=parts)
    return [load_ir_projections(p.write(tmp_path / p.project_id)) for p in portfolio.projects]


def _expected(project: Project, index: ReferenceIndex) -> tuple[tuple[str, str, str, int], ...]:
    snapshot = index.assess(project)
    return tuple(
        (c.affected_codes[0], c.unit or "", c.grade or "", c.claimed_saving_nok)
        for c in reference_candidates(project, snapshot)
    )


@pytest.mark.parametrize(
    ("seed", "parts", "rule"),
    [
        (3, 1, ReferenceRule()),
        (5, 3, ReferenceRule()),
        (7, 1, ReferenceRule(min_saving_nok=0, min_share=0, possible_threshold=1.0)),
        (11, 3, ReferenceRule(min_comparables=2, min_excess=0.0, possible_threshold=0.5)),
    ],
)
def test_the_sweep_finds_each_projects_own_reference_candidates(
    tmp_path: Path, seed: int, parts: int, rule: ReferenceRule
) -> None:
    projects = _projects(tmp_path, seed, 40, parts)
    prices = {f"{p.id}-folder": ProjectPrices.of(p) for p in projects}
    classes = ReferenceClasses(rule)
    classes.update(prices)
    index = classes.index()
    keys = ReferenceSweep().keys(index.fit, prices)
    found = 0
    for project in projects:
        assert keys[f"{project.id}-folder"] == _expected(project, index), project.id
        found += len(keys[f"{project.id}-folder"] or ())
    assert found > 0  # the planted overpricing is found


def test_the_sweep_holds_for_classes_read_back_out_of_their_order(tmp_path: Path) -> None:
    """A class page reordered by hand reads back with its members out of their project ids'
    order: the sweep's (class, project) pairs are then sorted, not taken as they come."""
    projects = _projects(tmp_path, 5, 40, 3)
    prices = {f"{p.id}-folder": ProjectPrices.of(p) for p in projects}
    classes = ReferenceClasses(ReferenceRule())
    classes.update(prices)
    rng = random.Random(5)

    def reordered(rows: tuple[Comparable, ...]) -> tuple[Comparable, ...]:
        moved = list(rows)
        rng.shuffle(moved)
        return tuple(moved)

    shuffled = ReferenceIndex(
        {key: reordered(rows) for key, rows in classes.index().classes.items()}, ReferenceRule()
    )
    keys = ReferenceSweep().keys(shuffled.fit, prices)
    found = 0
    for project in projects:
        expected = _expected(project, shuffled)
        assert keys[f"{project.id}-folder"] == expected, project.id
        found += len(expected)
    assert found > 0


def test_a_project_the_index_does_not_hold_as_its_own_is_left_to_its_ir(tmp_path: Path) -> None:
    projects = _projects(tmp_path, 3, 12, 1)
    prices = {p.id: ProjectPrices.of(p) for p in projects}
    twice = projects[0]
    prices["second-folder"] = prices[twice.id]  # one project id in two folders
    classes = ReferenceClasses(ReferenceRule())
    classes.update(prices)
    changed = projects[1]
    moved = tuple((a, u, price * 1.5, s) for a, u, price, s in prices[changed.id].classes)
    looked = dict(prices) | {changed.id: dataclasses.replace(prices[changed.id], classes=moved)}
    keys = ReferenceSweep().keys(classes.index().fit, looked)
    assert keys[twice.id] is None and keys["second-folder"] is None
    assert keys[changed.id] is None  # changed since the index was built
    assert all(keys[p.id] is not None for p in projects[2:])


def test_one_more_project_barely_moves_the_other_projects_levels(tmp_path: Path) -> None:
    """A project's level is taken from the same lines whatever the rest of the portfolio: one
    more project of two hundred moves another project's level as its classes' centres move, a
    per cent or two at most (a sample of lines spread by their classes' spreads moved it by up to
    17 %)."""
    projects = _projects(tmp_path, 1, 201, 3)  # 65 lines each: over the lines a slope takes
    prices = {p.id: ProjectPrices.of(p) for p in projects}
    classes = ReferenceClasses(ReferenceRule())
    classes.update({k: v for k, v in prices.items() if k != projects[-1].id})
    before = classes.index()
    classes.update(prices)
    after = classes.index()
    moved = [
        abs(b.level / a.level - 1)
        for project in projects[:-1]
        for a, b in zip(before.assess(project).lines, after.assess(project).lines, strict=True)
    ]
    assert max(moved) < 0.05


def test_the_sweep_agrees_on_thin_classes(tmp_path: Path) -> None:
    """Small portfolios: classes too thin for a root mean square (the spread is a median, taken
    one post at a time) and classes under ``min_comparables``, graded or not; the sweep's
    candidates are each project's own."""
    open_ = {"possible_threshold": 0.5, "min_saving_nok": 0, "min_share": 0}
    cases = [
        (ReferenceRule(min_comparables=2, min_excess=0.0, **open_), [(1, 3), (2, 3), (3, 4)]),
        (ReferenceRule(min_comparables=6, **open_), [(4, 5), (5, 6), (6, 7)]),
        (ReferenceRule(min_comparables=3, **open_), [(7, 9), (8, 14)]),
    ]
    seen: Counter[str] = Counter()
    for rule, sizes in cases:
        for seed, n in sizes:
            projects = [
                load_ir_projections(p.write(tmp_path / f"{seed}-{p.project_id}"))
                for p in generate_ns3451(seed, n, parts=1).projects
            ]
            prices = {p.id: ProjectPrices.of(p) for p in projects}
            classes = ReferenceClasses(rule)
            classes.update(prices)
            index = classes.index()
            fit = index.fit
            keys = ReferenceSweep().keys(fit, prices)
            for project in projects:
                assert keys[project.id] == _expected(project, index), project.id
                seen.update(grade for _code, _unit, grade, _saving in keys[project.id] or ())
            entries = fit.entries()
            seen["thin spread"] += int(entries.exact_spread.sum())
            seen["under min_comparables"] += int((entries.compared < rule.min_comparables).sum())
    assert all(seen[k] > 0 for k in ("likely", "possible", "thin spread")), seen
    assert seen["under min_comparables"] > 0, seen


def _boundaries(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Prices, expected prices and quantities whose excess lands on, or a hair from, a step of
    two significant figures, a power of ten, or nothing at all; and expected prices a hair from
    a half cent."""
    quantity = np.round(rng.uniform(0.5, 5000, n), int(rng.integers(0, 3)))
    expected = np.round(rng.uniform(1, 90_000, n), 2)
    target = rng.integers(10, 100, n) * 10.0 ** rng.integers(0, 9, n)  # a step, exactly
    nudge = rng.choice([0.0, 1e-9, -1e-9, 1e-13, -1e-13, 0.37], n)
    price = expected + target * (1 + nudge) / quantity
    half_cents = np.round(rng.uniform(1, 90_000, n), 2) + rng.choice([0.005, 0.0049999999, 0.0], n)
    return np.r_[price, expected + 0.01], np.r_[expected, half_cents], np.r_[quantity, quantity]


@pytest.mark.parametrize("seed", range(8))
def test_the_savings_over_arrays_are_reference_savings_to_the_krone(seed: int) -> None:
    """The sweep's savings are ``reference_saving``'s, exact decimal arithmetic, on the values
    where a float is most likely to land on the wrong side: a hair from a step of two figures,
    a power of ten, a half cent."""
    price, expected, quantity = _boundaries(np.random.default_rng(seed), 20_000)
    cents = rounded_to_cents(expected)
    assert cents.tolist() == [round(v, 2) for v in expected.tolist()]
    found = reference_savings(price, cents, quantity)
    assert found.tolist() == [
        reference_saving(p, e, q)
        for p, e, q in zip(price.tolist(), cents.tolist(), quantity.tolist(), strict=True)
    ]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.01, 1e9, allow_nan=False),
            st.floats(0.01, 1e9, allow_nan=False),
            st.floats(0.001, 1e6, allow_nan=False),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_any_savings_over_arrays_are_reference_savings(
    rows: list[tuple[float, float, float]],
) -> None:
    price, expected, quantity = (np.array(column) for column in zip(*rows, strict=True))
    assert rounded_to_cents(expected).tolist() == [round(v, 2) for v in expected.tolist()]
    assert reference_savings(price, expected, quantity).tolist() == [
        reference_saving(*row) for row in rows
    ]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-10, 10**15), st.floats(0, 1e13, allow_nan=False)),
        min_size=1,
        max_size=30,
    ),
    st.sampled_from([0.0, 1.0, 50_000.0, 99_999.5]),
    st.sampled_from([0.0, 0.001, 0.003, 1 / 3]),
)
def test_which_savings_over_arrays_are_material(
    rows: list[tuple[int, float]], min_saving: float, min_share: float
) -> None:
    """A saving on the edge of either threshold, over arrays, is material as ``material``
    says; and no saving of nothing is, whatever the thresholds."""
    rows += [(round(min_saving), 0.0), (int(min_share * 10**9), 10.0**9), (0, 0.0)]
    references = ProjectReferences("p", (), 0, min_saving, min_share)
    savings, sizes = (np.array(column) for column in zip(*rows, strict=True))
    found = material_savings(savings.astype(np.int64), sizes.astype(np.float64), references)
    assert found.tolist() == [s > 0 and material(s, z, references) for s, z in rows]


def test_the_sweep_pauses_before_each_project_it_makes_arrays_of(tmp_path: Path) -> None:
    """``pause`` (where a verdict taken in on another thread goes first) comes before each
    project whose posts are made arrays, and only those: ten thousand of them after a start
    held a verdict sixty milliseconds in one go; a project whose prices are as they were is
    kept."""
    projects = _projects(tmp_path, 3, 12, 1)
    prices = {f"{p.id}-folder": ProjectPrices.of(p) for p in projects}
    classes = ReferenceClasses(ReferenceRule())
    classes.update(prices)
    fit = classes.index().fit
    sweep, pauses = ReferenceSweep(), []
    first = sweep.keys(fit, prices, lambda: pauses.append(1))
    assert len(pauses) == len(prices)
    pauses.clear()
    assert sweep.keys(fit, prices, lambda: pauses.append(1)) == first
    assert pauses == []  # every project's arrays kept
