"""The consultation policy: a budget per mode and materiality, greedy explained selection, no votes.

``plan`` is pure: the advisors' states are built here as plain ``AdvisorState`` values (the plan's
input), so every claim is about the policy alone, never about availability or the clock.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from portfolio_optimiser.reasoning import policy
from portfolio_optimiser.reasoning.availability import AdvisorState, AdvisorStatus
from portfolio_optimiser.reasoning.modes import Mode
from portfolio_optimiser.reasoning.policy import (
    BUDGET,
    LOCAL_REVIEW,
    Confidence,
    Materiality,
    PlanOutcome,
    PlanRequest,
    ReviewPlan,
    budget,
    capacity,
    plan,
)

A = AdvisorStatus.AVAILABLE


def adv(
    advisor: str,
    *capabilities: str,
    adapter: str | None = None,
    status: AdvisorStatus = A,
    recovering: bool = False,
    local: bool = False,
) -> AdvisorState:
    return AdvisorState(
        advisor=advisor,
        adapter=adapter if adapter is not None else f"adapter-{advisor}",
        local=local,
        capabilities=capabilities,
        status=status,
        reason="ready" if status is A else f"because {advisor} is {status}",
        recovering=recovering,
    )


def request(
    materiality: Materiality = Materiality.HIGH,
    *capabilities: str,
    confidence: Confidence = Confidence.MEDIUM,
) -> PlanRequest:
    return PlanRequest(materiality, capabilities or ("x",), confidence)


def chosen(review: ReviewPlan) -> list[str]:
    return [s.advisor for s in review.selected]


def excluded(review: ReviewPlan) -> dict[str, str]:
    return {e.advisor: e.reason for e in review.excluded}


# --- the budget ----------------------------------------------------------------------------------


def documented_budget() -> dict[Mode, dict[Materiality, int]]:
    """The markdown table of the module docstring, as a mapping."""
    assert policy.__doc__
    rows = [line.strip() for line in policy.__doc__.splitlines() if line.strip().startswith("|")]

    def cells(row: str) -> list[str]:
        return [cell.strip() for cell in row.strip("|").split("|")]

    header, rule, *body = rows
    assert cells(header)[0] == "mode"
    assert all(set(cell) <= {"-", ":"} for cell in cells(rule))
    columns = [Materiality(word) for word in cells(header)[1:]]
    table: dict[Mode, dict[Materiality, int]] = {}
    for row in body:
        mode, *numbers = cells(row)
        assert len(numbers) == len(columns), row
        table[Mode(mode)] = {m: int(n) for m, n in zip(columns, numbers, strict=True)}
    return table


DOCUMENTED = documented_budget()


@pytest.mark.loadbearing
def test_the_budget_table_is_the_documented_one() -> None:
    assert set(DOCUMENTED) == set(Mode)
    for mode in Mode:
        assert set(DOCUMENTED[mode]) == set(Materiality), mode
        assert set(BUDGET[mode]) == set(Materiality), mode
        for materiality in Materiality:
            assert BUDGET[mode][materiality] == DOCUMENTED[mode][materiality], (mode, materiality)


@pytest.mark.loadbearing
@pytest.mark.parametrize("materiality", list(Materiality))
@pytest.mark.parametrize("mode", list(Mode))
def test_budget_follows_the_table_and_high_confidence_lowers_it_by_one(
    mode: Mode, materiality: Materiality
) -> None:
    documented = DOCUMENTED[mode][materiality]

    assert budget(mode, materiality) == documented
    assert budget(mode, materiality, Confidence.LOW) == documented
    assert budget(mode, materiality, Confidence.MEDIUM) == documented
    assert budget(mode, materiality, Confidence.HIGH) == max(0, documented - 1)


def test_the_budget_never_falls_as_materiality_rises() -> None:
    for mode in Mode:
        row = [BUDGET[mode][m] for m in Materiality]
        assert row == sorted(row), mode


@pytest.mark.loadbearing
@pytest.mark.parametrize("materiality", list(Materiality))
@pytest.mark.parametrize("mode", list(Mode))
def test_the_plan_carries_the_budget_it_used(mode: Mode, materiality: Materiality) -> None:
    for confidence in Confidence:
        review = plan(request(materiality, confidence=confidence), mode, [adv("a", "x")])
        assert review.budget == budget(mode, materiality, confidence)
        assert len(review.selected) == min(1, review.budget)


# --- greedy selection ------------------------------------------------------------------------------


@pytest.mark.loadbearing
def test_the_advisor_covering_most_uncovered_capabilities_goes_first() -> None:
    states = [adv("narrow", "x"), adv("broad", "x", "y")]

    review = plan(request(Materiality.MATERIAL, "x", "y"), Mode.STANDARD, states)

    assert chosen(review) == ["broad"]
    assert review.selected[0].covers == ("x", "y")
    assert "budget" in excluded(review)["narrow"]


@pytest.mark.loadbearing
def test_later_picks_count_only_what_is_still_uncovered() -> None:
    states = [adv("xy", "x", "y"), adv("x-again", "x"), adv("z", "z")]

    review = plan(request(Materiality.HIGH, "x", "y", "z"), Mode.STANDARD, states)

    assert chosen(review) == ["xy", "z"]
    assert review.uncovered == ()
    assert "budget" in excluded(review)["x-again"]


@pytest.mark.loadbearing
def test_a_tie_goes_to_an_adapter_not_yet_chosen_even_if_declared_later() -> None:
    states = [
        adv("first", "x", adapter="shared"),
        adv("twin", "x", adapter="shared"),
        adv("other", "x", adapter="elsewhere"),
    ]

    review = plan(request(Materiality.HIGH, "x"), Mode.STANDARD, states)

    assert chosen(review) == ["first", "other"]
    assert "adapter elsewhere not yet chosen" in review.selected[1].why
    assert "budget" in excluded(review)["twin"]


def test_coverage_outranks_adapter_diversity() -> None:
    states = [
        adv("first", "x", adapter="shared"),
        adv("twin", "y", adapter="shared"),
        adv("other", "x", adapter="elsewhere"),
    ]

    review = plan(request(Materiality.HIGH, "x", "y"), Mode.STANDARD, states)

    assert chosen(review) == ["first", "twin"]
    assert "adapter shared again" in review.selected[1].why


@pytest.mark.loadbearing
def test_the_last_tie_break_is_declaration_order_not_the_name() -> None:
    states = [adv("zeta", "x"), adv("alpha", "x")]

    forwards = plan(request(Materiality.MATERIAL), Mode.STANDARD, states)
    backwards = plan(request(Materiality.MATERIAL), Mode.STANDARD, states[::-1])

    assert chosen(forwards) == ["zeta"]
    assert chosen(backwards) == ["alpha"]


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    ("mode", "materiality", "confidence", "expected"),
    [
        (Mode.STRICT, Materiality.CRITICAL, Confidence.MEDIUM, 3),
        (Mode.STRICT, Materiality.CRITICAL, Confidence.HIGH, 2),
        (Mode.STANDARD, Materiality.CRITICAL, Confidence.MEDIUM, 2),
        (Mode.FAST, Materiality.HIGH, Confidence.LOW, 1),
        (Mode.FAST, Materiality.HIGH, Confidence.HIGH, 0),
        (Mode.OFFLINE, Materiality.MATERIAL, Confidence.MEDIUM, 1),
    ],
)
def test_no_more_advisors_are_selected_than_the_budget(
    mode: Mode, materiality: Materiality, confidence: Confidence, expected: int
) -> None:
    states = [adv(f"a{i}", "x") for i in range(6)]

    review = plan(request(materiality, "x", confidence=confidence), mode, states)

    assert len(review.selected) == expected
    spent = [reason for reason in excluded(review).values() if "budget" in reason]
    assert len(spent) == 6 - expected


@pytest.mark.loadbearing
def test_why_says_what_was_covered_and_what_is_a_second_opinion() -> None:
    states = [adv("a", "x", "y"), adv("b", "x")]

    review = plan(request(Materiality.HIGH, "x", "y"), Mode.STANDARD, states)

    first, second = review.selected
    assert "covers x, y" in first.why
    assert "declared 1." in first.why
    assert "a second opinion on x" in second.why
    assert "declared 2." in second.why
    assert second.covers == ("x",)


@pytest.mark.loadbearing
def test_a_recovering_advisor_is_noted_as_testing_the_circuit() -> None:
    states = [adv("healthy", "x"), adv("mending", "y", recovering=True)]

    review = plan(request(Materiality.HIGH, "x", "y"), Mode.STANDARD, states)

    why = {s.advisor: s.why for s in review.selected}
    assert "recovering" in why["mending"]
    assert "recovering" not in why["healthy"]


def test_requested_capabilities_no_selected_advisor_offers_are_uncovered() -> None:
    review = plan(request(Materiality.HIGH, "x", "y", "z"), Mode.STANDARD, [adv("a", "x", "y")])

    assert review.uncovered == ("z",)
    assert review.selected[0].covers == ("x", "y")


def test_a_repeated_capability_is_requested_once() -> None:
    review = plan(request(Materiality.MATERIAL, "x", "x"), Mode.STANDARD, [adv("a", "x")])

    assert review.selected[0].covers == ("x",)
    assert "covers x;" in review.selected[0].why


# --- exclusion reasons -----------------------------------------------------------------------------


@pytest.mark.loadbearing
@pytest.mark.parametrize("status", [s for s in AdvisorStatus if s is not A])
def test_an_unavailable_advisor_is_excluded_with_its_status(status: AdvisorStatus) -> None:
    states = [adv("down", "x", status=status), adv("up", "x")]

    review = plan(request(Materiality.CRITICAL), Mode.STRICT, states)

    assert chosen(review) == ["up"]
    reason = excluded(review)["down"]
    assert reason.startswith(f"{status.value}:")
    assert states[0].reason in reason


@pytest.mark.loadbearing
def test_an_advisor_offering_none_of_the_capabilities_is_excluded_for_that() -> None:
    states = [adv("a", "propose"), adv("b", "x")]

    review = plan(request(Materiality.CRITICAL, "x", "y"), Mode.STRICT, states)

    assert chosen(review) == ["b"]
    assert excluded(review)["a"] == "offers none of x, y"


def test_the_excluded_come_in_declaration_order() -> None:
    states = [
        adv("over-budget", "x"),
        adv("down", "x", status=AdvisorStatus.DISABLED),
        adv("kept", "x", "y"),
        adv("elsewhere", "w"),
    ]

    review = plan(request(Materiality.MATERIAL, "x", "y"), Mode.STANDARD, states)

    assert chosen(review) == ["kept"]
    assert [e.advisor for e in review.excluded] == ["over-budget", "down", "elsewhere"]


CAPS = ("x", "y", "z", "w")


@st.composite
def catalogues(draw: st.DrawFn) -> list[AdvisorState]:
    ids = draw(st.lists(st.text("abcdefgh", min_size=1, max_size=3), unique=True, max_size=8))
    return [
        AdvisorState(
            advisor=advisor,
            adapter=draw(st.sampled_from(["one", "two", "three"])),
            local=draw(st.booleans()),
            capabilities=tuple(draw(st.lists(st.sampled_from(CAPS), min_size=1, unique=True))),
            status=(status := draw(st.sampled_from(list(AdvisorStatus)))),
            reason=f"{advisor} is {status}",
            recovering=status is A and draw(st.booleans()),
        )
        for advisor in ids
    ]


REQUESTS = st.builds(
    PlanRequest,
    materiality=st.sampled_from(list(Materiality)),
    capabilities=st.lists(st.sampled_from(CAPS), max_size=5).map(tuple),
    confidence=st.sampled_from(list(Confidence)),
)


@pytest.mark.loadbearing
@settings(deadline=None)
@given(
    states=catalogues(),
    req=REQUESTS,
    mode=st.sampled_from(list(Mode)),
    standing=st.one_of(st.none(), st.just("cn-0001")),
)
def test_every_advisor_is_selected_or_excluded_exactly_once_with_a_reason(
    states: list[AdvisorState], req: PlanRequest, mode: Mode, standing: str | None
) -> None:
    review = plan(req, mode, states, standing_conclusion=standing)

    named = [s.advisor for s in review.selected] + [e.advisor for e in review.excluded]
    assert Counter(named) == Counter(s.advisor for s in states)
    assert all(s.why for s in review.selected)
    assert all(e.reason for e in review.excluded)

    limit = budget(mode, req.materiality, req.confidence)
    assert review.budget == limit
    assert len(review.selected) <= limit
    requested = set(req.capabilities)
    by_id = {s.advisor: s for s in states}
    reasons = excluded(review)
    for selected in review.selected:
        state = by_id[selected.advisor]
        assert state.available
        assert selected.adapter == state.adapter
        assert set(selected.covers) == requested & set(state.capabilities)
    covered = {c for s in review.selected for c in s.covers}
    assert set(review.uncovered) == requested - covered

    if standing is not None:
        assert review.outcome is PlanOutcome.REUSE_PRIOR
        assert review.selected == ()
        assert review.reuse == standing
        return
    for advisor, reason in reasons.items():
        state = by_id[advisor]
        if not state.available:
            assert reason.startswith(f"{state.status.value}:")
        elif not requested & set(state.capabilities):
            assert reason.startswith("offers none of")
        else:
            assert "budget" in reason
            assert len(review.selected) == limit
    assert (review.outcome is PlanOutcome.CONSULT) == bool(review.selected)
    if review.outcome is PlanOutcome.DECIDE_LOCALLY:
        assert review.local_review == LOCAL_REVIEW
    if mode is Mode.CI:
        assert review.selected == ()


# --- outcomes ----------------------------------------------------------------------------------------


def test_the_plan_consults_when_someone_is_selected() -> None:
    review = plan(request(Materiality.HIGH), Mode.STANDARD, [adv("a", "x")])

    assert review.outcome is PlanOutcome.CONSULT
    assert review.local_review == ()
    assert review.reuse is None
    assert "earns 2" in review.reason


def test_the_local_review_has_five_steps() -> None:
    assert len(LOCAL_REVIEW) == 5
    assert all(step for step in LOCAL_REVIEW)


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    ("mode", "materiality", "confidence"),
    [
        (Mode.STANDARD, Materiality.TRIVIAL, Confidence.MEDIUM),
        (Mode.STANDARD, Materiality.LOW, Confidence.LOW),
        (Mode.STANDARD, Materiality.MATERIAL, Confidence.HIGH),
        (Mode.FAST, Materiality.MATERIAL, Confidence.MEDIUM),
        (Mode.FAST, Materiality.CRITICAL, Confidence.HIGH),
    ],
)
def test_a_zero_budget_decides_locally_because_no_review_is_needed(
    mode: Mode, materiality: Materiality, confidence: Confidence
) -> None:
    states = [adv("a", "x"), adv("b", "x")]

    review = plan(request(materiality, confidence=confidence), mode, states)

    assert review.outcome is PlanOutcome.DECIDE_LOCALLY
    assert review.budget == 0
    assert review.local_review == LOCAL_REVIEW
    assert "needs no independent review" in review.reason
    assert "no available advisor" not in review.reason
    assert all("budget of 0" in reason for reason in excluded(review).values())


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    "states",
    [
        [],
        [adv("a", "x", status=AdvisorStatus.TEMPORARILY_FAILED)],
        [adv("a", "x", status=AdvisorStatus.NOT_CONFIGURED), adv("b", "propose")],
    ],
    ids=["no-advisors", "all-failing", "failing-or-unfit"],
)
def test_without_an_available_advisor_the_plan_decides_locally(
    states: list[AdvisorState],
) -> None:
    review = plan(request(Materiality.CRITICAL, "x"), Mode.STRICT, states)

    assert review.outcome is PlanOutcome.DECIDE_LOCALLY
    assert review.budget == 3
    assert review.local_review == LOCAL_REVIEW
    assert "no available advisor" in review.reason
    assert "needs no independent review" not in review.reason
    assert review.uncovered == ("x",)


@pytest.mark.loadbearing
def test_a_standing_conclusion_is_reused_and_everyone_excluded() -> None:
    states = [adv("a", "x"), adv("b", "x", status=AdvisorStatus.DISABLED)]

    review = plan(request(Materiality.CRITICAL), Mode.STRICT, states, standing_conclusion="cn-42")

    assert review.outcome is PlanOutcome.REUSE_PRIOR
    assert review.reuse == "cn-42"
    assert "cn-42" in review.reason
    assert review.selected == ()
    assert review.local_review == ()
    assert set(excluded(review)) == {"a", "b"}
    assert all("standing conclusion" in r for r in excluded(review).values())


@pytest.mark.loadbearing
@pytest.mark.parametrize("confidence", list(Confidence))
@pytest.mark.parametrize("materiality", list(Materiality))
def test_mode_ci_selects_nobody_even_when_advisors_say_available(
    materiality: Materiality, confidence: Confidence
) -> None:
    states = [adv("a", "x"), adv("b", "x", local=True), adv("c", "x", recovering=True)]

    review = plan(request(materiality, confidence=confidence), Mode.CI, states)

    assert review.selected == ()
    assert review.budget == 0
    assert review.outcome is PlanOutcome.DECIDE_LOCALLY
    assert review.local_review == LOCAL_REVIEW


# --- capacity ----------------------------------------------------------------------------------------


@pytest.mark.loadbearing
def test_capacity_counts_only_available_advisors_per_capability() -> None:
    states = [
        adv("a", "x", "y"),
        adv("b", "x"),
        adv("c", "x", "y", "z", status=AdvisorStatus.TEMPORARILY_FAILED),
        adv("d", "z", status=AdvisorStatus.DISABLED),
        adv("e", "x", recovering=True),
    ]

    assert capacity(states, ["x", "y", "z", "w"]) == {"x": 3, "y": 1, "z": 0, "w": 0}
    assert capacity([], ["x"]) == {"x": 0}


# --- no votes ----------------------------------------------------------------------------------------

VOTING = re.compile(r"vot(e|es|ed|ing)|quorum|majorit(y|ies)", re.IGNORECASE)


@pytest.mark.loadbearing
def test_the_policy_never_counts_votes() -> None:
    source = inspect.getsource(policy)
    module = ast.parse(source)
    docstring = module.body[0]
    assert isinstance(docstring, ast.Expr)
    assert isinstance(docstring.value, ast.Constant)
    assert isinstance(docstring.value.value, str)
    assert "never counts votes" in docstring.value.value
    assert docstring.end_lineno is not None

    lines = source.splitlines()
    outside = lines[: docstring.lineno - 1] + lines[docstring.end_lineno :]
    offending = [line for line in outside if VOTING.search(line)]

    assert offending == []
    assert len(outside) > 100
