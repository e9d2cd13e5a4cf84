"""The uncertainty frame's simulation against cases whose answer is known in closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from portfolio_optimiser.context import uncertainty_marginals
from portfolio_optimiser.context.uncertainty import (
    STABLE_TO,
    Effect,
    Element,
    simulate,
)

from .fresh import fresh_python

P85_SCORE = float(special.ndtri(0.85))
P90_SCORE = float(special.ndtri(0.90))


def normal(name: str, mean: float, sd: float, group: str | None = None) -> Element:
    half = sd * P90_SCORE
    return Element(name, mean - half, mean, mean + half, distribution="normal", group=group)


def test_independent_normal_elements_give_the_closed_form_p50_and_p85() -> None:
    means = [1_000_000.0 * (1 + i % 7) for i in range(40)]
    sds = [150_000.0 * (1 + i % 5) for i in range(40)]
    elements = [normal(f"e{i}", m, s) for i, (m, s) in enumerate(zip(means, sds, strict=True))]
    found = simulate(elements, seed=7, samples=100_000)
    mean, sd = math.fsum(means), math.sqrt(math.fsum(s * s for s in sds))
    assert found.quantiles["p50"] == pytest.approx(mean, rel=0.01)
    assert found.quantiles["p85"] == pytest.approx(mean + P85_SCORE * sd, rel=0.01)
    # Finer than the 1 % of the total: the spread itself, which a wrong scale would hide in it
    # (at 100 000 samples its standard error is about 0.5 %).
    spread = found.quantiles["p85"] - found.quantiles["p50"]
    assert spread == pytest.approx(P85_SCORE * sd, rel=0.03)


@pytest.mark.parametrize(("low", "likely", "high"), [(80.0, 100.0, 180.0), (0.0, 10.0, 10.0)])
def test_a_pert_element_has_the_formula_mean_and_the_beta_quantiles(
    low: float, likely: float, high: float
) -> None:
    element = Element("one", low, likely, high)
    found = simulate([element], seed=3, samples=40_000)
    width = high - low
    a, b = 1 + 4 * (likely - low) / width, 1 + 4 * (high - likely) / width
    sd = width * math.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))
    assert found.mean == pytest.approx((low + 4 * likely + high) / 6, abs=4 * sd / 200)
    assert element.mean == pytest.approx((low + 4 * likely + high) / 6)
    for name, q in (("p10", 0.10), ("p50", 0.50), ("p85", 0.85)):
        exact = low + width * float(stats.beta.ppf(q, a, b))
        assert found.quantiles[name] == pytest.approx(exact, abs=0.01 * width)


def test_a_triangular_element_has_its_closed_form_quantiles() -> None:
    found = simulate([Element("t", 0.0, 25.0, 100.0, distribution="triangular")], seed=5)
    exact = stats.triang(c=0.25, loc=0.0, scale=100.0)
    assert found.mean == pytest.approx(125.0 / 3, rel=0.01)
    assert found.quantiles["p85"] == pytest.approx(float(exact.ppf(0.85)), rel=0.01)


def test_full_correlation_gives_the_sum_of_the_quantiles() -> None:
    elements = [
        Element("a", 90.0, 100.0, 160.0, group="site"),
        Element("b", 40.0, 50.0, 55.0, group="site"),
        Element("c", 10.0, 30.0, 90.0, distribution="triangular", group="site"),
    ]
    together = simulate(elements, correlation={"site": 1.0}, seed=11)
    alone = [simulate([e], seed=11) for e in elements]
    for name in ("p10", "p50", "p85", "p90"):
        summed = math.fsum(one.quantiles[name] for one in alone)
        assert together.quantiles[name] == pytest.approx(summed, rel=0.005)


def test_ignoring_a_declared_correlation_understates_p85() -> None:
    elements = [Element(f"e{i}", 80.0, 100.0, 150.0, group="ground") for i in range(30)]
    correlated = simulate(elements, correlation={"ground": 0.6}, seed=1)
    ignored = simulate(elements, seed=1)  # the same elements, the group's coefficient left out
    spread, narrow = (
        correlated.quantiles["p85"] - correlated.quantiles["p50"],
        ignored.quantiles["p85"] - ignored.quantiles["p50"],
    )
    # 30 elements at 0.6: the total's deviation is about sqrt(1 + 29 * 0.6) = 4.3 times.
    assert spread > 3 * narrow
    assert correlated.deviation > 3 * ignored.deviation


def test_the_same_seed_gives_the_same_figures_and_another_element_moves_no_other_draw() -> None:
    elements = [Element(f"e{i}", 50.0, 60.0, 90.0 + i) for i in range(10)]
    first = simulate(elements, seed=42)
    assert simulate(elements, seed=42) == first
    assert simulate(elements, seed=43).quantiles != first.quantiles
    # A certain element added shifts every sample by its value: every quantile moves by it.
    more = simulate([*elements, Element("fixed", 7.0, 7.0, 7.0)], seed=42)
    for name, value in first.quantiles.items():
        assert more.quantiles[name] == pytest.approx(value + 7.0, abs=1e-9)


def test_a_measure_is_applied_to_the_same_samples_alone_and_jointly() -> None:
    elements = [
        Element("steel", 800.0, 1000.0, 1600.0, group="market"),
        Element("concrete", 400.0, 500.0, 700.0, group="market"),
        Element("fixed", 300.0, 300.0, 300.0),
    ]
    effects = [
        Effect("cut-fixed", {"fixed": 0.5}),
        Effect("cut-steel", {"steel": 0.1}),
        Effect("sum-off-steel", fixed={"steel": 100.0}),
    ]
    found = simulate(
        elements,
        correlation={"market": 0.5},
        effects=effects,
        together=["cut-fixed", "cut-steel"],
        seed=9,
    )
    # Half of a certain 300 is 150 off every sample: off every quantile, exactly.
    assert found.effects["cut-fixed"].p50 == pytest.approx(-150.0, abs=1e-9)
    assert found.effects["cut-fixed"].p85 == pytest.approx(-150.0, abs=1e-9)
    # A share of an uncertain line takes more off P85 than off P50 (its spread goes with it).
    steel = found.effects["cut-steel"]
    assert steel.p85 < steel.p50 < 0
    # A sum off an uncertain line leaves its spread: off every quantile, exactly.
    assert found.effects["sum-off-steel"].p85 == pytest.approx(-100.0, abs=1e-9)
    assert found.effects["sum-off-steel"].p85_error == pytest.approx(0.0, abs=1e-9)
    # Jointly: the set applied to the same samples, which is what a simulation of the reduced
    # elements gives.
    reduced = simulate(
        [
            Element("steel", 720.0, 900.0, 1440.0, group="market"),
            elements[1],
            Element("fixed", 150.0, 150.0, 150.0),
        ],
        correlation={"market": 0.5},
        seed=9,
    )
    assert found.joint is not None
    for name in ("p50", "p85"):
        assert found.quantiles[name] + getattr(found.joint, name) == pytest.approx(
            reduced.quantiles[name], rel=1e-9
        )


def test_an_event_costs_its_draw_with_its_probability() -> None:
    found = simulate([Element("flood", 100.0, 100.0, 100.0, probability=0.3)], seed=2)
    assert found.mean == pytest.approx(30.0, rel=0.05)
    assert found.quantiles["p50"] == 0.0
    assert found.quantiles["p85"] == 100.0


def test_the_samples_double_until_p85_is_stable() -> None:
    wide = [Element("wide", 1.0, 2.0, 1000.0, distribution="triangular")]
    found = simulate(wide, seed=4, samples=500)
    assert found.samples > 500
    assert found.stable_to <= STABLE_TO


def test_contributions_add_up_to_the_deviation_and_rank_the_largest_first() -> None:
    elements = [
        Element("small", 9.0, 10.0, 12.0),
        Element("large", 50.0, 100.0, 400.0, group="g"),
        Element("medium", 40.0, 50.0, 90.0, group="g"),
    ]
    found = simulate(elements, correlation={"g": 0.4}, seed=8, samples=40_000)
    assert [name for name, _ in found.contributions] == ["large", "medium", "small"]
    assert math.fsum(c for _, c in found.contributions) == pytest.approx(found.deviation, rel=1e-9)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: Element("x", 10.0, 5.0, 20.0), "rising order"),
        (lambda: Element("x", 1.0, 2.0, 9.0, distribution="normal"), "midway"),
        (lambda: Element("x", 1.0, 2.0, 3.0, probability=0.0), "probability"),
    ],
)
def test_an_impossible_element_is_refused_with_its_name(make: object, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        make()  # type: ignore[operator]


def test_a_coefficient_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        simulate([Element("a", 1.0, 2.0, 3.0, group="g")], correlation={"g": 1.5}, seed=1)


@pytest.mark.loadbearing
def test_the_daemon_never_loads_scipy_nor_numpys_random_or_masked_arrays() -> None:
    """scipy held 13 MB in a daemon that had simulated a frame, numpy.random 5.4 MB and
    numpy.ma 2 MB (``np.unique`` imports it): the idle daemon stood over its 120 MB target
    (``bench_daemon``). A fresh interpreter, as the daemon starts, simulating a frame and
    fitting levels."""
    script = (
        "import sys\n"
        "import numpy as np\n"
        "import portfolio_optimiser.daemon.service, portfolio_optimiser.daemon.processor\n"
        "from portfolio_optimiser.context.uncertainty import Element, simulate\n"
        "from portfolio_optimiser.context import fit_numpy\n"
        "simulate([Element('a', 90.0, 100.0, 130.0, group='g', probability=0.5),\n"
        "          Element('b', 5.0, 7.0, 9.0, 'normal')], correlation={'g': 0.5}, seed=1)\n"
        "heavy = ('scipy', 'numpy.random', 'numpy.ma')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy'\n"
        "             or m in heavy or m.startswith(('numpy.random.', 'numpy.ma.'))))\n"
    )
    assert fresh_python(script).strip() == "[]"


@pytest.mark.parametrize("r", [0.0, 0.01, 0.137, 0.25, 0.5, 0.8, 0.999, 1.0])
def test_the_pert_table_is_scipys_regularised_incomplete_beta(r: float) -> None:
    """The table the PERT draws are inverted from, against ``scipy.special.betainc``: within
    1e-9 everywhere, also where a shape is not whole (the density's ends are not smooth)."""
    a, b = 1.0 + 4.0 * r, 1.0 + 4.0 * (1.0 - r)
    grid = np.linspace(0.0, 1.0, uncertainty_marginals.GRID)
    table = uncertainty_marginals.cdf_table(a, b)
    assert table[0] == 0.0 and table[-1] == 1.0 and bool(np.all(np.diff(table) > 0))
    assert float(np.max(np.abs(table - special.betainc(a, b, grid)))) < 1e-9


def test_the_normal_table_is_scipys() -> None:
    shares = uncertainty_marginals.SCORE_SHARES
    assert float(np.max(np.abs(shares - special.ndtr(uncertainty_marginals.SCORES)))) < 1e-15
    assert pytest.approx(P90_SCORE, abs=1e-14) == uncertainty_marginals.P90_SCORE
