"""The deterministic validator: every rule of its table passes a good candidate and rejects a bad one.

Projects and candidates are built in memory with the strict IR models; the three example bundles
are read from ``shared/examples/portfolio`` to show the validator accepts a real kuttliste.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from portfolio_optimiser.context.candidates import kuttliste_candidates
from portfolio_optimiser.context.decisions import Accepted, Rejected, Rule, RuleOutcome
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.models import Candidate, CostLine, Money, Project
from portfolio_optimiser.context.validator import validate_candidate, validate_candidates

PROJECT_ID = "lillevik"
WALLS = "02.3"
ROOF = "02.4"
WALLS_FILE = "cost/02.3.md"
ROOF_FILE = "cost/02.4.md"
OPTION_FILE = "kuttliste/k-01.md"
FILES = frozenset({WALLS_FILE, ROOF_FILE, OPTION_FILE})

EXAMPLES = Path(__file__).resolve().parents[1] / "shared" / "examples" / "portfolio"
EXAMPLE_BUNDLES = sorted(p for p in EXAMPLES.iterdir() if p.is_dir())

FAST = settings(max_examples=200, deadline=None)

loadbearing = pytest.mark.loadbearing


def cost_line(
    code: str = WALLS,
    amount: Money = 1_000_000,
    *,
    quantity: Money | None = None,
    unit_price: Money | None = None,
) -> CostLine:
    return CostLine(
        code=code,
        amount_nok=amount,
        quantity=quantity,
        unit_price_nok=unit_price,
        source=f"cost/{code}.md",
    )


def project(*lines: CostLine, files: frozenset[str] = FILES) -> Project:
    if not lines:
        lines = (
            cost_line(WALLS, 1_000_000, quantity=500, unit_price=2000),
            cost_line(ROOF, 400_000),
        )
    return Project(id=PROJECT_ID, name="Lillevik school", cost_lines=lines, files=files)


def candidate(
    codes: tuple[str, ...] = (WALLS,),
    saving: Money = 100_000,
    *,
    measure_type: str = "standardisation",
    evidence: tuple[str, ...] = (OPTION_FILE, WALLS_FILE),
    quantity: Money | None = None,
    unit_price: Money | None = None,
    origin: str = "proposer",
) -> Candidate:
    return Candidate(
        project_id=PROJECT_ID,
        affected_codes=codes,
        measure_type=measure_type,
        claimed_saving_nok=saving,
        evidence=evidence,
        quantity=quantity,
        unit_price_nok=unit_price,
        origin=origin,
    )


def assert_passes(decision: Accepted | Rejected, rule: Rule) -> None:
    assert decision.receipt.check(rule).outcome is RuleOutcome.PASSED, decision.receipt
    assert isinstance(decision, Accepted), decision


def assert_rejected_by(decision: Accepted | Rejected, rule: Rule) -> Rejected:
    assert isinstance(decision, Rejected), decision
    assert decision.rule is rule, decision.reason
    assert decision.receipt.check(rule).outcome is RuleOutcome.FAILED
    assert decision.reason == decision.receipt.check(rule).detail
    return decision


# --- the receipt -----------------------------------------------------------------------------


def test_a_good_candidate_passes_every_rule_and_is_accepted() -> None:
    cand = candidate()
    decision = validate_candidate(cand, project())
    assert isinstance(decision, Accepted)
    assert decision.candidate_id == cand.id
    assert decision.receipt.candidate_id == cand.id
    assert decision.receipt.project_id == PROJECT_ID
    assert all(c.outcome is RuleOutcome.PASSED for c in decision.receipt.checks)


@pytest.mark.parametrize(
    "cand",
    [
        candidate(),
        candidate(codes=("09.9",)),
        candidate(saving=0),
        candidate(evidence=()),
    ],
    ids=["accepted", "missing-code", "zero-saving", "no-evidence"],
)
def test_the_receipt_lists_every_rule_in_order(cand: Candidate) -> None:
    decision = validate_candidate(cand, project())
    assert [c.rule for c in decision.receipt.checks] == list(Rule)


@loadbearing
def test_rules_after_a_missing_code_are_skipped() -> None:
    decision = validate_candidate(candidate(codes=("09.9",)), project())
    outcomes = {c.rule: c.outcome for c in decision.receipt.checks}
    assert outcomes == {
        Rule.CODES_EXIST: RuleOutcome.FAILED,
        Rule.SAVING_POSITIVE: RuleOutcome.PASSED,
        Rule.SAVING_WITHIN_COST: RuleOutcome.SKIPPED,
        Rule.ARITHMETIC: RuleOutcome.PASSED,
        Rule.NO_DOUBLE_COUNTING: RuleOutcome.SKIPPED,
        Rule.EVIDENCE_INSIDE_BUNDLE: RuleOutcome.PASSED,
        Rule.FRAME_REPRODUCED: RuleOutcome.SKIPPED,
    }
    assert "not checked" in decision.receipt.check(Rule.SAVING_WITHIN_COST).detail


@loadbearing
def test_rules_after_a_non_positive_saving_are_skipped() -> None:
    decision = validate_candidate(candidate(saving=-5), project())
    outcomes = {c.rule: c.outcome for c in decision.receipt.checks}
    assert outcomes == {
        Rule.CODES_EXIST: RuleOutcome.PASSED,
        Rule.SAVING_POSITIVE: RuleOutcome.FAILED,
        Rule.SAVING_WITHIN_COST: RuleOutcome.SKIPPED,
        Rule.ARITHMETIC: RuleOutcome.SKIPPED,
        Rule.NO_DOUBLE_COUNTING: RuleOutcome.SKIPPED,
        Rule.EVIDENCE_INSIDE_BUNDLE: RuleOutcome.PASSED,
        Rule.FRAME_REPRODUCED: RuleOutcome.SKIPPED,
    }


def test_the_first_failed_rule_names_the_rejection_and_later_failures_stay_on_the_receipt() -> None:
    decision = validate_candidate(candidate(codes=("09.9",), evidence=("../x.md",)), project())
    rejected = assert_rejected_by(decision, Rule.CODES_EXIST)
    assert rejected.receipt.check(Rule.EVIDENCE_INSIDE_BUNDLE).outcome is RuleOutcome.FAILED


def test_the_receipt_carries_the_recomputed_numbers_as_strings() -> None:
    cand = candidate(codes=(WALLS, ROOF), saving=798_000, quantity=420, unit_price=1900)
    decision = validate_candidate(cand, project())
    assert isinstance(decision, Accepted)
    within = decision.receipt.check(Rule.SAVING_WITHIN_COST).figures
    assert within == {"affected_cost_nok": "1400000", "claimed_saving_nok": "798000"}
    arithmetic = decision.receipt.check(Rule.ARITHMETIC).figures
    assert arithmetic["recomputed_saving_nok"] == "798000"
    assert arithmetic["claimed_saving_nok"] == "798000"
    assert arithmetic["line_02.3_recomputed_nok"] == "1000000"
    for check in decision.receipt.checks:
        assert all(isinstance(v, str) for v in check.figures.values())


def test_float_figures_are_written_as_plain_decimals() -> None:
    cand = candidate(saving=1234.5, quantity=2.5, unit_price=493.8)
    decision = validate_candidate(cand, project())
    assert isinstance(decision, Accepted)
    assert decision.receipt.check(Rule.SAVING_WITHIN_COST).figures == {
        "affected_cost_nok": "1000000",
        "claimed_saving_nok": "1234.5",
    }
    assert decision.receipt.check(Rule.ARITHMETIC).figures["recomputed_saving_nok"] == "1234.50"


# --- codes_exist -----------------------------------------------------------------------------


@loadbearing
def test_a_candidate_on_existing_codes_passes_codes_exist() -> None:
    decision = validate_candidate(candidate(codes=(WALLS, ROOF)), project())
    assert_passes(decision, Rule.CODES_EXIST)


@loadbearing
def test_a_code_not_in_the_project_is_rejected_naming_the_code() -> None:
    decision = validate_candidate(candidate(codes=("09.9",)), project())
    rejected = assert_rejected_by(decision, Rule.CODES_EXIST)
    assert "09.9" in rejected.reason
    assert PROJECT_ID in rejected.reason


@loadbearing
def test_one_missing_code_among_existing_ones_is_rejected_naming_it() -> None:
    decision = validate_candidate(candidate(codes=(WALLS, "02.9")), project())
    rejected = assert_rejected_by(decision, Rule.CODES_EXIST)
    assert "cost code 02.9 is not a cost line" in rejected.reason


# --- saving_positive -------------------------------------------------------------------------


@loadbearing
def test_a_positive_saving_passes_saving_positive() -> None:
    assert_passes(validate_candidate(candidate(saving=1), project()), Rule.SAVING_POSITIVE)
    assert_passes(validate_candidate(candidate(saving=0.01), project()), Rule.SAVING_POSITIVE)


@loadbearing
@pytest.mark.parametrize("saving", [0, 0.0, -1, -250_000, -0.01])
def test_a_zero_or_negative_saving_is_rejected(saving: Money) -> None:
    decision = validate_candidate(candidate(saving=saving), project())
    rejected = assert_rejected_by(decision, Rule.SAVING_POSITIVE)
    assert f"the claimed saving {saving} NOK is not above zero" in rejected.reason
    assert rejected.receipt.check(Rule.SAVING_POSITIVE).figures == {
        "claimed_saving_nok": str(saving)
    }


@loadbearing
@pytest.mark.parametrize("saving", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_saving_is_rejected_even_if_the_model_was_bypassed(saving: float) -> None:
    cand = Candidate.model_construct(
        project_id=PROJECT_ID,
        affected_codes=(WALLS,),
        measure_type="standardisation",
        claimed_saving_nok=saving,
        saving_literal=str(saving),
        evidence=(WALLS_FILE,),
        quantity=None,
        unit_price_nok=None,
        origin="proposer",
    )
    rejected = assert_rejected_by(validate_candidate(cand, project()), Rule.SAVING_POSITIVE)
    assert str(saving) in rejected.reason


# --- saving_within_cost ----------------------------------------------------------------------


@loadbearing
def test_a_saving_exactly_equal_to_the_affected_cost_is_accepted() -> None:
    decision = validate_candidate(candidate(saving=1_000_000), project())
    assert_passes(decision, Rule.SAVING_WITHIN_COST)


@loadbearing
def test_a_saving_one_krone_above_the_affected_cost_is_rejected() -> None:
    decision = validate_candidate(candidate(saving=1_000_001), project())
    rejected = assert_rejected_by(decision, Rule.SAVING_WITHIN_COST)
    assert "1000001" in rejected.reason
    assert "the 1000000 NOK that 02.3 cost" in rejected.reason
    assert rejected.receipt.check(Rule.SAVING_WITHIN_COST).figures == {
        "affected_cost_nok": "1000000",
        "claimed_saving_nok": "1000001",
    }


@loadbearing
def test_the_affected_cost_is_the_sum_of_all_affected_lines() -> None:
    both = (WALLS, ROOF)
    assert_passes(
        validate_candidate(candidate(codes=both, saving=1_400_000), project()),
        Rule.SAVING_WITHIN_COST,
    )
    rejected = assert_rejected_by(
        validate_candidate(candidate(codes=both, saving=1_400_001), project()),
        Rule.SAVING_WITHIN_COST,
    )
    assert "1400000" in rejected.reason


@loadbearing
def test_a_code_named_twice_is_counted_once_in_the_affected_cost() -> None:
    twice = (WALLS, WALLS)
    assert_passes(
        validate_candidate(candidate(codes=twice, saving=1_000_000), project()),
        Rule.SAVING_WITHIN_COST,
    )
    rejected = assert_rejected_by(
        validate_candidate(candidate(codes=twice, saving=1_500_000), project()),
        Rule.SAVING_WITHIN_COST,
    )
    assert rejected.receipt.check(Rule.SAVING_WITHIN_COST).figures["affected_cost_nok"] == (
        "1000000"
    )


# --- arithmetic ------------------------------------------------------------------------------


@loadbearing
def test_a_saving_equal_to_quantity_times_unit_price_passes_arithmetic() -> None:
    decision = validate_candidate(
        candidate(saving=798_000, quantity=420, unit_price=1900), project()
    )
    assert_passes(decision, Rule.ARITHMETIC)
    assert "420 × 1900 = 798000 NOK" in decision.receipt.check(Rule.ARITHMETIC).detail


@loadbearing
@pytest.mark.parametrize("saving", [10_000.4, 10_000.5, 9_999.5, 9_999.6])
def test_a_saving_within_half_a_krone_of_quantity_times_unit_price_is_accepted(
    saving: float,
) -> None:
    decision = validate_candidate(candidate(saving=saving, quantity=10, unit_price=1000), project())
    assert_passes(decision, Rule.ARITHMETIC)


@loadbearing
@pytest.mark.parametrize("saving", [10_000.6, 9_999.4, 10_001, 12_000])
def test_a_saving_more_than_half_a_krone_off_quantity_times_unit_price_is_rejected(
    saving: Money,
) -> None:
    decision = validate_candidate(candidate(saving=saving, quantity=10, unit_price=1000), project())
    rejected = assert_rejected_by(decision, Rule.ARITHMETIC)
    assert "10 × 1000 = 10000 NOK" in rejected.reason
    assert f"not the claimed {saving} NOK" in rejected.reason
    figures = rejected.receipt.check(Rule.ARITHMETIC).figures
    assert figures["recomputed_saving_nok"] == "10000"
    assert figures["claimed_saving_nok"] == str(saving)


@loadbearing
def test_an_affected_line_whose_quantity_times_unit_price_misses_its_amount_is_rejected() -> None:
    broken = cost_line("02.5", 100_000, quantity=10, unit_price=9_000)
    proj = project(cost_line(WALLS, 1_000_000), broken, files=FILES | {"cost/02.5.md"})
    decision = validate_candidate(candidate(codes=("02.5",), saving=5_000), proj)
    rejected = assert_rejected_by(decision, Rule.ARITHMETIC)
    assert "cost line 02.5 says 100000 NOK but 10 × 9000 = 90000 NOK" in rejected.reason
    assert rejected.receipt.check(Rule.ARITHMETIC).figures == {"line_02.5_recomputed_nok": "90000"}


@loadbearing
def test_an_affected_line_within_half_a_krone_of_its_amount_passes_arithmetic() -> None:
    line = cost_line("02.5", 100_000.4, quantity=10, unit_price=10_000)
    proj = project(line, files=FILES | {"cost/02.5.md"})
    decision = validate_candidate(candidate(codes=("02.5",), saving=5_000), proj)
    assert_passes(decision, Rule.ARITHMETIC)


def test_a_broken_line_the_candidate_does_not_touch_does_not_reject_it() -> None:
    broken = cost_line(ROOF, 100_000, quantity=10, unit_price=9_000)
    proj = project(cost_line(WALLS, 1_000_000, quantity=500, unit_price=2000), broken)
    assert_passes(validate_candidate(candidate(codes=(WALLS,)), proj), Rule.ARITHMETIC)


def test_a_quantity_without_a_unit_price_has_nothing_to_recompute() -> None:
    decision = validate_candidate(candidate(codes=(ROOF,), quantity=3), project())
    assert_passes(decision, Rule.ARITHMETIC)
    assert decision.receipt.check(Rule.ARITHMETIC).figures == {}


# --- no_double_counting ----------------------------------------------------------------------


@loadbearing
def test_a_single_candidate_passes_no_double_counting() -> None:
    assert_passes(validate_candidate(candidate(), project()), Rule.NO_DOUBLE_COUNTING)


@loadbearing
def test_the_same_candidate_twice_in_a_run_is_rejected_the_second_time() -> None:
    cand = candidate(saving=10_000)
    first, second = validate_candidates([cand, cand], project())
    assert_passes(first, Rule.NO_DOUBLE_COUNTING)
    rejected = assert_rejected_by(second, Rule.NO_DOUBLE_COUNTING)
    assert f"candidate {cand.id} is already counted" in rejected.reason


@loadbearing
def test_the_same_measure_option_twice_in_a_run_is_rejected_the_second_time() -> None:
    origin = "measure-option:k-01"
    first_cand = candidate(saving=10_000, origin=origin)
    second_cand = candidate(saving=20_000, origin=origin, measure_type="simplification")
    assert first_cand.id != second_cand.id
    first, second = validate_candidates([first_cand, second_cand], project())
    assert_passes(first, Rule.NO_DOUBLE_COUNTING)
    rejected = assert_rejected_by(second, Rule.NO_DOUBLE_COUNTING)
    assert origin in rejected.reason
    assert first_cand.id in rejected.reason


def test_two_proposer_candidates_are_not_taken_for_the_same_measure_option() -> None:
    a = candidate(codes=(WALLS,), saving=10_000, origin="proposer")
    b = candidate(codes=(ROOF,), saving=10_000, origin="proposer")
    assert all(isinstance(d, Accepted) for d in validate_candidates([a, b], project()))


@loadbearing
def test_candidates_sharing_a_line_that_together_claim_more_than_it_costs_are_rejected() -> None:
    first_cand = candidate(saving=600_000, measure_type="standardisation")
    second_cand = candidate(saving=500_000, measure_type="simplification")
    first, second = validate_candidates([first_cand, second_cand], project())
    assert isinstance(first, Accepted)
    rejected = assert_rejected_by(second, Rule.NO_DOUBLE_COUNTING)
    assert first_cand.id in rejected.reason
    assert "1100000" in rejected.reason
    assert rejected.receipt.check(Rule.NO_DOUBLE_COUNTING).figures == {
        "shared_codes_cost_nok": "1000000",
        "claimed_together_nok": "1100000",
        "assignable_nok": "1000000",
    }


@loadbearing
def test_candidates_sharing_a_line_that_together_claim_at_most_its_cost_are_both_accepted() -> None:
    first_cand = candidate(saving=600_000, measure_type="standardisation")
    second_cand = candidate(saving=400_000, measure_type="simplification")
    first, second = validate_candidates([first_cand, second_cand], project())
    assert isinstance(first, Accepted)
    assert_passes(second, Rule.NO_DOUBLE_COUNTING)
    assert second.receipt.check(Rule.NO_DOUBLE_COUNTING).figures == {
        "shared_codes_cost_nok": "1000000",
        "claimed_together_nok": "1000000",
        "assignable_nok": "1000000",
    }


@loadbearing
def test_the_accepted_argument_counts_against_a_single_candidate() -> None:
    earlier = candidate(saving=600_000, measure_type="standardisation")
    later = candidate(saving=500_000, measure_type="simplification")
    assert isinstance(validate_candidate(later, project()), Accepted)
    rejected = assert_rejected_by(
        validate_candidate(later, project(), accepted=[earlier]), Rule.NO_DOUBLE_COUNTING
    )
    assert earlier.id in rejected.reason


def test_a_rejected_candidate_does_not_use_up_the_line() -> None:
    bad = candidate(saving=900_000, evidence=())
    good = candidate(saving=1_000_000, measure_type="simplification")
    first, second = validate_candidates([bad, good], project())
    assert isinstance(first, Rejected)
    assert isinstance(second, Accepted)


@loadbearing
def test_a_chain_of_overlapping_candidates_cannot_claim_more_than_the_lines_cost() -> None:
    proj = project(cost_line("A", 100), cost_line("B", 100), files=frozenset({"cost/A.md"}))
    chain = [
        candidate(codes=codes, saving=100, evidence=("cost/A.md",))
        for codes in (("A",), ("A", "B"), ("B",))
    ]
    decisions = validate_candidates(chain, proj)
    accepted = sum(
        c.claimed_saving_nok
        for c, d in zip(chain, decisions, strict=True)
        if d.outcome == "accepted"
    )
    assert accepted <= 200
    assert [d.outcome for d in decisions] == ["accepted", "accepted", "rejected"]


@loadbearing
def test_savings_that_fit_only_by_spreading_over_shared_lines_are_accepted() -> None:
    # {A,B} can take its 100 from B once {A} has used all of A: no krone is saved twice.
    proj = project(cost_line("A", 100), cost_line("B", 100), files=frozenset({"cost/A.md"}))
    pair = [
        candidate(codes=("A",), saving=100, evidence=("cost/A.md",)),
        candidate(codes=("A", "B"), saving=100, evidence=("cost/A.md",)),
    ]
    assert [d.outcome for d in validate_candidates(pair, proj)] == ["accepted", "accepted"]


# --- evidence_inside_bundle ------------------------------------------------------------------


@loadbearing
@pytest.mark.parametrize(
    "link",
    [
        WALLS_FILE,
        "/cost/02.3.md",
        "cost/02.3.md#section",
        "/cost/02.3.md#section",
        "./cost/02.3.md",
        "cost/%30%32.3.md",
    ],
)
def test_an_evidence_link_to_a_file_of_the_bundle_is_accepted(link: str) -> None:
    decision = validate_candidate(candidate(evidence=(link,)), project())
    assert_passes(decision, Rule.EVIDENCE_INSIDE_BUNDLE)


@loadbearing
def test_a_candidate_without_evidence_is_rejected() -> None:
    rejected = assert_rejected_by(
        validate_candidate(candidate(evidence=()), project()), Rule.EVIDENCE_INSIDE_BUNDLE
    )
    assert "no evidence link is given" in rejected.reason


@loadbearing
@pytest.mark.parametrize(
    ("link", "why"),
    [
        ("../../etc/passwd", "leaves the bundle"),
        ("cost/../../x.md", "leaves the bundle"),
        ("%2e%2e/%2e%2e/etc/passwd", "leaves the bundle"),
        ("file:///etc/passwd", "leaves the bundle"),
        ("FILE:/etc/passwd", "leaves the bundle"),
        ("C:\\x.md", "leaves the bundle"),
        ("C:/x.md", "leaves the bundle"),
        ("#section", "leaves the bundle"),
        ("cost/02.3.md\x00", "leaves the bundle"),
        ("cost/09.9.md", "names no file in the bundle"),
        ("cost", "names no file in the bundle"),
        ("https://example.com/cost/02.3.md", "names no file in the bundle"),
    ],
)
def test_an_evidence_link_outside_the_bundle_is_rejected_naming_the_link(
    link: str, why: str
) -> None:
    decision = validate_candidate(candidate(evidence=(WALLS_FILE, link)), project())
    rejected = assert_rejected_by(decision, Rule.EVIDENCE_INSIDE_BUNDLE)
    assert f"evidence link {link!r} {why}" in rejected.reason


# --- the example bundles ---------------------------------------------------------------------


def test_there_are_three_example_bundles() -> None:
    assert [p.name for p in EXAMPLE_BUNDLES] == [
        "e39-road-section",
        "hospital-it-system",
        "lillevik-school",
    ]


@loadbearing
@pytest.mark.parametrize("bundle", EXAMPLE_BUNDLES, ids=lambda p: p.name)
def test_every_kuttliste_candidate_of_an_example_bundle_is_accepted(bundle: Path) -> None:
    proj = load_ir_projections(bundle)
    candidates = kuttliste_candidates(proj)
    assert len(candidates) >= 5
    decisions = validate_candidates(candidates, proj)
    for cand, decision in zip(candidates, decisions, strict=True):
        assert isinstance(decision, Accepted), (cand.origin, decision)
        assert decision.candidate_id == cand.id
        assert all(c.outcome is RuleOutcome.PASSED for c in decision.receipt.checks)


# --- properties ------------------------------------------------------------------------------


@loadbearing
@FAST
@given(
    amounts=st.lists(st.integers(min_value=0, max_value=10**10), min_size=1, max_size=5),
    saving=st.integers(min_value=-(10**10), max_value=6 * 10**10),
    data=st.data(),
)
def test_saving_within_cost_passes_iff_the_saving_is_positive_and_at_most_the_affected_cost(
    amounts: list[int], saving: int, data: st.DataObject
) -> None:
    lines = tuple(cost_line(f"0{i}.1", amount) for i, amount in enumerate(amounts))
    chosen = data.draw(
        st.lists(st.sampled_from(lines), min_size=1, max_size=len(lines), unique=True)
    )
    proj = project(*lines)
    cand = candidate(codes=tuple(line.code for line in chosen), saving=saving)
    decision = validate_candidate(cand, proj)
    cost = sum(line.amount_nok for line in chosen)
    ok = 0 < saving <= cost
    assert (decision.receipt.check(Rule.SAVING_WITHIN_COST).outcome is RuleOutcome.PASSED) is ok
    assert isinstance(decision, Accepted) is ok
    if saving > cost:  # amounts are not negative, so the saving is positive here
        assert isinstance(decision, Rejected)
        assert decision.rule is Rule.SAVING_WITHIN_COST
        assert str(cost) in decision.reason


@loadbearing
@FAST
@given(
    quantity=st.integers(min_value=1, max_value=10**5),
    unit_price=st.integers(min_value=1, max_value=10**6),
    offset=st.integers(min_value=1, max_value=10**6),
    above=st.booleans(),
)
def test_a_saving_is_accepted_by_arithmetic_iff_it_is_quantity_times_unit_price(
    quantity: int, unit_price: int, offset: int, above: bool
) -> None:
    product = quantity * unit_price
    proj = project(cost_line(WALLS, product + offset + 10**6))
    exact = validate_candidate(
        candidate(saving=product, quantity=quantity, unit_price=unit_price), proj
    )
    assert_passes(exact, Rule.ARITHMETIC)
    assert exact.receipt.check(Rule.ARITHMETIC).figures["recomputed_saving_nok"] == str(product)

    off = product + offset if above or offset >= product else product - offset
    wrong = validate_candidate(
        candidate(saving=off, quantity=quantity, unit_price=unit_price), proj
    )
    rejected = assert_rejected_by(wrong, Rule.ARITHMETIC)
    assert f"= {product} NOK" in rejected.reason


@loadbearing
@FAST
@given(
    amount=st.integers(min_value=1, max_value=10**7),
    claims=st.lists(
        st.tuples(
            st.integers(min_value=-1000, max_value=10**7),
            st.sampled_from(["standardisation", "simplification", "deferral"]),
            st.sampled_from(["proposer", "measure-option:k-01", "measure-option:k-02"]),
        ),
        max_size=8,
    ),
)
def test_accepted_savings_on_one_line_never_add_up_to_more_than_the_line(
    amount: int, claims: list[tuple[int, str, str]]
) -> None:
    proj = project(cost_line(WALLS, amount))
    cands = [
        candidate(saving=saving, measure_type=kind, origin=origin)
        for saving, kind, origin in claims
    ]
    decisions = validate_candidates(cands, proj)
    accepted = [c for c, d in zip(cands, decisions, strict=True) if isinstance(d, Accepted)]
    assert sum(c.claimed_saving_nok for c in accepted) <= amount
    assert len({c.id for c in accepted}) == len(accepted)
    options = [c.origin for c in accepted if c.origin.startswith("measure-option:")]
    assert len(set(options)) == len(options)


CODES = st.sampled_from([WALLS, ROOF, "09.9", "A"])
SAVINGS = st.one_of(
    st.integers(min_value=-(10**9), max_value=10**9),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12),
)
LINKS = st.sampled_from(
    [WALLS_FILE, ROOF_FILE, "/cost/02.3.md", "../x.md", "file:///etc/passwd", "C:\\x.md", "x.md"]
)
CANDIDATES = st.builds(
    candidate,
    codes=st.lists(CODES, min_size=1, max_size=3).map(tuple),
    saving=SAVINGS,
    measure_type=st.sampled_from(["standardisation", "simplification"]),
    evidence=st.lists(LINKS, max_size=3).map(tuple),
    quantity=st.one_of(st.none(), st.integers(min_value=-10, max_value=1000)),
    unit_price=st.one_of(st.none(), st.integers(min_value=-10, max_value=10**6)),
    origin=st.sampled_from(["proposer", "measure-option:k-01"]),
)


@FAST
@given(cands=st.lists(CANDIDATES, max_size=6))
def test_decisions_are_deterministic(cands: list[Candidate]) -> None:
    proj = project()
    first = validate_candidates(cands, proj)
    again = validate_candidates([Candidate.model_validate(c.model_dump()) for c in cands], proj)
    assert first == again
    assert [d.model_dump_json() for d in first] == [d.model_dump_json() for d in again]


@FAST
@given(cands=st.lists(CANDIDATES, max_size=6))
def test_the_validator_never_raises_and_always_returns_a_full_receipt(
    cands: list[Candidate],
) -> None:
    decisions = validate_candidates(cands, project())
    assert len(decisions) == len(cands)
    for cand, decision in zip(cands, decisions, strict=True):
        assert decision.candidate_id == cand.id
        assert [c.rule for c in decision.receipt.checks] == list(Rule)
        failed = [c for c in decision.receipt.checks if c.outcome is RuleOutcome.FAILED]
        if failed:
            assert isinstance(decision, Rejected)
            assert decision.rule is failed[0].rule
        else:
            assert isinstance(decision, Accepted)


def test_decimal_arithmetic_is_exact_for_float_quantities() -> None:
    # 0.1 × 3 is 0.30000000000000004 in binary floating point; the validator recomputes in Decimal
    decision = validate_candidate(candidate(saving=0.3, quantity=0.1, unit_price=3), project())
    assert_passes(decision, Rule.ARITHMETIC)
    assert decision.receipt.check(Rule.ARITHMETIC).figures["recomputed_saving_nok"] == str(
        Decimal("0.3")
    )


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=300), min_size=1, max_size=3),
    st.lists(
        st.tuples(st.sets(st.integers(min_value=0, max_value=2), min_size=1), st.integers(1, 400)),
        max_size=5,
    ),
)
def test_accepted_savings_always_fit_every_group_of_lines(
    amounts: list[int], claims: list[tuple[set[int], int]]
) -> None:
    # Hall's condition, by brute force: no subset of accepted candidates claims more than the
    # lines they name cost together.
    import itertools

    lines = [cost_line(f"L{i}", amount) for i, amount in enumerate(amounts)]
    proj = project(*lines, files=frozenset({"cost/A.md"}))
    pool = [
        candidate(
            codes=tuple(sorted(f"L{i}" for i in codes if i < len(amounts)) or ["L0"]),
            saving=saving,
            measure_type=f"m{n}",
            evidence=("cost/A.md",),
        )
        for n, (codes, saving) in enumerate(claims)
    ]
    decisions = validate_candidates(pool, proj)
    accepted = [c for c, d in zip(pool, decisions, strict=True) if d.outcome == "accepted"]
    cost = {line.code: line.amount_nok for line in lines}
    for size in range(1, len(accepted) + 1):
        for group in itertools.combinations(accepted, size):
            codes = set().union(*(set(c.affected_codes) for c in group))
            assert sum(c.claimed_saving_nok for c in group) <= sum(cost[code] for code in codes)
