"""Learning transfers as rates: an approval elsewhere is proposed at this project's size."""

from __future__ import annotations

from pathlib import Path

import pytest

from portfolio_optimiser.context.models import CostLine, LearnedRate, Project
from portfolio_optimiser.context.verdict import Decision
from portfolio_optimiser.learning import LearnedVerdict
from portfolio_optimiser.learning.verdict_store import CandidateKey
from portfolio_optimiser.pipeline.local import learned_candidates


def project(
    pid: str, code: str, amount: float, quantity: float | None = None, unit: str | None = None
) -> Project:
    line = CostLine(
        code=code,
        amount_nok=amount,
        quantity=quantity,
        unit=unit,
        unit_price_nok=amount / quantity if quantity else None,
        source=f"cost/{code}.md",
    )
    return Project(id=pid, name=pid, cost_lines=(line,), files=frozenset({f"cost/{code}.md"}))


def approval(source: str, code: str, saving: int, rate: float | None = 0.8) -> LearnedVerdict:
    return LearnedVerdict(
        candidate_id="c-0123456789abcdef",
        decision=Decision.APPROVED,
        rationale="Checked.",
        reviewer="KE",
        key=CandidateKey(
            project_id=source,
            affected_codes=(code,),
            measure_type="standardisation",
            saving_literal=str(saving),
        ),
        source=Path("v.json"),
        realization_rate=rate,
    )


@pytest.mark.loadbearing
def test_a_per_unit_saving_is_carried_per_unit_times_the_realisation() -> None:
    small = project("small", "02.3", 6_000_000, 1000, "m2")  # 100 000 saved: 100 NOK per m2
    large = project("large", "02.3", 20_000_000, 2500, "m²")
    [learned] = learned_candidates(large, [approval("small", "02.3", 100_000)], {"small": small})
    assert learned.claimed_saving_nok == 200_000  # 100 × 0.8 × 2500
    assert learned.origin == "verdict:c-0123456789abcdef"
    # The working the report shows: 100 000 NOK over 1 000 m2 there, × 2 500 m2 here × 0.8.
    assert learned.learned_rate == LearnedRate(
        project_id="small",
        saving_nok=100_000,
        basis_there=1000,
        basis_here=2500,
        unit="m2",
        realisation=0.8,
    )
    assert "quantity in m2" in learned.rationale and learned.rationale.endswith(".")


@pytest.mark.loadbearing
def test_a_lump_sum_saving_is_carried_as_a_share_of_what_it_affected() -> None:
    small = project("small", "01", 1_000_000)
    large = project("large", "01", 3_300_000)
    [learned] = learned_candidates(
        large, [approval("small", "01", 50_000, rate=None)], {"small": small}
    )
    assert learned.claimed_saving_nok == 160_000  # 5 % of 3 300 000 = 165 000, two figures down
    assert learned.learned_rate == LearnedRate(
        project_id="small", saving_nok=50_000, basis_there=1_000_000, basis_here=3_300_000
    )  # no unit: a share of the cost; no realisation given


def test_different_units_fall_back_to_the_share() -> None:
    small = project("small", "02.3", 6_000_000, 1000, "m2")
    other = project("other", "02.3", 12_000_000, 40, "stk")
    [learned] = learned_candidates(
        other, [approval("small", "02.3", 60_000, rate=1.0)], {"small": small}
    )
    assert learned.claimed_saving_nok == 120_000  # 1 % of 12 000 000


def test_an_approval_whose_project_is_unknown_is_not_carried_in_kroner() -> None:
    large = project("large", "02.3", 20_000_000, 2500, "m2")
    assert learned_candidates(large, [approval("gone", "02.3", 100_000)], {}) == []


def test_an_approval_is_not_carried_back_into_its_own_project() -> None:
    # Found in review: it came back at rate × rate and pushed the approved candidate out.
    small = project("small", "02.3", 6_000_000, 1000, "m2")
    assert learned_candidates(small, [approval("small", "02.3", 100_000)], {"small": small}) == []
