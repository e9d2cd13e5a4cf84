"""The frame's figures that the KS2 tests (``test_frame_ks2``) leave unchecked, held to what
does not come from the product: P10 and a proportional measure's ΔP50/ΔP85 to the scipy model
(``tests/frame_oracle.py``), and every standard error the frame reports (the delete-a-group
jackknife) to the spread of the figure itself over independent replications."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pytest

from portfolio_optimiser.context.candidates import kuttliste_candidates
from portfolio_optimiser.context.frame import FrameRule, frame_of
from portfolio_optimiser.context.models import MeasureOption

from . import frame_oracle as oracle
from .test_frame_ks2 import SPREAD, ks2_project

SEEDS = range(1, 41)


def test_p10_matches_the_scipy_model_as_the_upper_figures_do() -> None:
    found, parts, drivers, rho = ks2_project()
    frame = frame_of(
        found, [], accepted=frozenset(), rule=FrameRule(seed=5, samples=40_000, spread=SPREAD)
    )
    assert frame is not None
    total = oracle.totals(parts, drivers, rho)
    assert frame.p10_nok == pytest.approx(oracle.p(total, 0.1), rel=0.01)


def _proportional(share: float) -> MeasureOption:
    return MeasureOption(
        id="k-1",
        measure_type="substitution",
        affected_codes=("21",),
        estimated_saving_nok=share * 10e6,
        effect="proportional",
    )


@pytest.mark.loadbearing
def test_a_proportional_measures_deltas_match_the_scipy_model_with_the_line_scaled() -> None:
    """A proportional measure takes its share of every sample of its lines, so the line's
    spread shrinks with it: on the scipy model its ΔP85 is that of the line's triple scaled by
    (1 - share), drawn from the same numbers, and more than the saving's P50 share where the
    line spreads upwards. A fixed sum would move both by the saving exactly."""
    share = 0.3
    found, parts, drivers, rho = ks2_project()
    found = found.model_copy(update={"measure_options": (_proportional(share),)})
    [candidate] = kuttliste_candidates(found)
    frame = frame_of(
        found,
        [candidate],
        accepted=frozenset(),
        rule=FrameRule(seed=5, samples=40_000, spread=SPREAD),
    )
    assert frame is not None
    delta = frame.deltas[candidate.id]
    line = parts[0]
    scaled = oracle.Part(
        line.low * (1 - share), line.likely * (1 - share), line.high * (1 - share),
        group=line.group, drivers=line.drivers,
    )  # fmt: skip
    before = oracle.totals(parts, drivers, rho)
    after = oracle.totals([scaled, *parts[1:]], drivers, rho)
    for name, at in (("p50", 0.5), ("p85", 0.85)):
        expected = oracle.p(after, at) - oracle.p(before, at)
        assert getattr(delta, f"{name}_nok") == pytest.approx(expected, rel=0.05), name
    # The test can tell a proportional effect from a fixed one of the same saving.
    assert delta.p85_nok < -share * 10e6 * 1.05


def _replications(
    effect: Literal["fixed", "proportional"],
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each figure and its reported standard error over ``SEEDS`` independent simulations."""
    found, _parts, _drivers, _rho = ks2_project()
    item = MeasureOption(
        id="k-1", measure_type="removal", affected_codes=("21",), estimated_saving_nok=2e6,
        saving_min_nok=0.5e6, saving_max_nok=2.2e6, effect=effect,
    )  # fmt: skip
    found = found.model_copy(update={"measure_options": (item,)})
    [candidate] = kuttliste_candidates(found)
    figures: dict[str, list[float]] = {}
    errors: dict[str, list[float]] = {}
    for seed in SEEDS:
        rule = FrameRule(seed=seed, samples=4_000, spread=SPREAD)
        frame = frame_of(found, [candidate], accepted=frozenset(), rule=rule)
        assert frame is not None
        delta = frame.deltas[candidate.id]
        found_now = {
            "p10": frame.p10_nok,
            "p50": frame.p50_nok,
            "p85": frame.p85_nok,
            "p90": frame.p90_nok,
            "mean": frame.mean_nok,
            "reserve": frame.reserve_nok,
            "delta p50": delta.p50_nok,
            "delta p85": delta.p85_nok,
        }
        said = {**frame.errors, "delta p50": delta.p50_error_nok, "delta p85": delta.p85_error_nok}
        for name, value in found_now.items():
            figures.setdefault(name, []).append(value)
            errors.setdefault(name, []).append(said[name])
    return figures, errors


@pytest.mark.loadbearing
def test_every_reported_error_is_the_spread_of_its_figure_over_independent_seeds() -> None:
    """The jackknife's standard error, averaged over 40 seeds, against the standard deviation
    of the figure itself over those 40 simulations: the two agree within what 40 replications
    can tell (a sample deviation of 40 is good to about 11 %; 0.65-1.5 is three of those
    below and four and a half above). An
    error a tenth or ten times too small, or the batches' deviation without its √(B-1)
    scaling, falls outside."""
    for effect in ("fixed", "proportional"):
        figures, errors = _replications(effect=effect)
        for name, values in figures.items():
            spread = float(np.std(values, ddof=1))
            reported = float(np.mean(errors[name]))
            assert spread > 0, name
            assert 0.65 < reported / spread < 1.5, (effect, name, reported, spread)
