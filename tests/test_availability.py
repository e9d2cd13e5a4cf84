"""Availability is a pure function of the catalogue, the recorded outcomes, the machine and the clock.

Every state here comes out of ``derive_availability``: the clock is a fixed UTC instant stepped
with ``timedelta``, the history a list of ``Outcome`` values, the machine a ``Presence``. Nothing
sleeps and nothing reads ``os.environ``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from portfolio_optimiser.reasoning.availability import (
    AUTH_COOLDOWN_S,
    FAILURE_COOLDOWN_S,
    FAILURES_TO_OPEN,
    RATE_LIMIT_COOLDOWN_S,
    AdvisorState,
    AdvisorStatus,
    AvailabilityInputs,
    ConsultationStatus,
    Outcome,
    derive_availability,
    disabled_from_env,
)
from portfolio_optimiser.reasoning.catalogue import Advisor, Catalogue, Presence
from portfolio_optimiser.reasoning.modes import Mode

BASE = datetime(2025, 3, 1, 9, 0, 0, tzinfo=UTC)
S = ConsultationStatus
TRANSIENT = (S.TIMEOUT, S.UNAVAILABLE, S.ERROR)
NEVER_COUNTS = (S.MALFORMED, S.EMPTY, S.CANCELLED)


def at(seconds: float) -> datetime:
    return BASE + timedelta(seconds=seconds)


def make_advisor(
    advisor_id: str = "a",
    *,
    adapter: str = "scripted",
    local: bool = False,
    capabilities: tuple[str, ...] = ("cost_review",),
    credential_env: tuple[str, ...] = (),
    executable: str | None = None,
) -> Advisor:
    return Advisor(
        id=advisor_id,
        name=f"Advisor {advisor_id}",
        adapter=adapter,
        provider="example",
        model="m-1",
        capabilities=capabilities,
        local=local,
        credential_env=credential_env,
        executable=executable,
    )


def outcome(
    status: ConsultationStatus,
    seconds: float,
    advisor: str = "a",
    retry_after_s: float | None = None,
) -> Outcome:
    return Outcome(advisor=advisor, status=status, at=at(seconds), retry_after_s=retry_after_s)


def derive(
    advisors: Sequence[Advisor],
    history: Sequence[Outcome] = (),
    *,
    now: datetime = BASE,
    mode: Mode = Mode.STANDARD,
    presence: Presence | None = None,
    disabled: frozenset[str] = frozenset(),
    cooldown_override_s: float | None = None,
) -> list[AdvisorState]:
    return derive_availability(
        Catalogue(tuple(advisors)),
        AvailabilityInputs(
            mode=mode,
            now=now,
            history=tuple(history),
            presence=presence if presence is not None else Presence(),
            disabled=disabled,
            cooldown_override_s=cooldown_override_s,
        ),
    )


def state_of(
    history: Sequence[Outcome] = (),
    *,
    now: datetime = BASE,
    advisor: Advisor | None = None,
    **kwargs: object,
) -> AdvisorState:
    (state,) = derive([advisor or make_advisor()], history, now=now, **kwargs)  # type: ignore[arg-type]
    return state


# --- the circuit breaker -------------------------------------------------------------------------


def test_the_cooldowns_are_the_documented_constants() -> None:
    assert FAILURES_TO_OPEN == 2
    assert FAILURE_COOLDOWN_S == 600.0
    assert RATE_LIMIT_COOLDOWN_S == 900.0
    assert AUTH_COOLDOWN_S == 3600.0


def test_an_advisor_without_history_is_available() -> None:
    state = state_of()

    assert state.status is AdvisorStatus.AVAILABLE
    assert state.available
    assert not state.recovering
    assert state.circuit is None
    assert state.reason


@pytest.mark.loadbearing
@pytest.mark.parametrize("status", TRANSIENT)
def test_one_transient_failure_leaves_the_advisor_available(status: ConsultationStatus) -> None:
    state = state_of([outcome(status, 0)], now=at(1))

    assert state.status is AdvisorStatus.AVAILABLE
    assert state.circuit is None
    assert not state.recovering


@pytest.mark.loadbearing
@pytest.mark.parametrize(("first", "second"), list(itertools.product(TRANSIENT, repeat=2)))
def test_two_consecutive_transient_failures_open_the_circuit(
    first: ConsultationStatus, second: ConsultationStatus
) -> None:
    state = state_of([outcome(first, 0), outcome(second, 40)], now=at(41))

    assert state.status is AdvisorStatus.TEMPORARILY_FAILED
    assert not state.available
    assert state.circuit is not None
    assert state.circuit.until == at(40 + FAILURE_COOLDOWN_S)
    assert state.circuit.opened_by is second
    assert state.circuit.failures == 2


@pytest.mark.loadbearing
def test_the_circuit_stays_open_until_the_cooldown_ends_then_recovers() -> None:
    history = [outcome(S.TIMEOUT, 0), outcome(S.TIMEOUT, 40)]
    until = at(40 + FAILURE_COOLDOWN_S)

    one_second_early = state_of(history, now=until - timedelta(seconds=1))
    on_time = state_of(history, now=until)

    assert one_second_early.status is AdvisorStatus.TEMPORARILY_FAILED
    assert not one_second_early.recovering
    assert on_time.status is AdvisorStatus.AVAILABLE
    assert on_time.recovering
    assert on_time.circuit is not None
    assert on_time.circuit.until == until


@pytest.mark.loadbearing
def test_a_completed_answer_after_recovery_closes_the_circuit() -> None:
    reopened_at = 40 + FAILURE_COOLDOWN_S + 5
    history = [outcome(S.TIMEOUT, 0), outcome(S.TIMEOUT, 40), outcome(S.COMPLETED, reopened_at)]

    state = state_of(history, now=at(reopened_at + 1))

    assert state.status is AdvisorStatus.AVAILABLE
    assert not state.recovering
    assert state.circuit is None


@pytest.mark.loadbearing
@pytest.mark.parametrize("status", TRANSIENT)
def test_a_failure_after_recovery_reopens_the_circuit_with_a_new_cooldown(
    status: ConsultationStatus,
) -> None:
    retried_at = 40 + FAILURE_COOLDOWN_S + 5
    history = [outcome(S.TIMEOUT, 0), outcome(S.TIMEOUT, 40), outcome(status, retried_at)]

    state = state_of(history, now=at(retried_at + 1))

    assert state.status is AdvisorStatus.TEMPORARILY_FAILED
    assert not state.recovering
    assert state.circuit is not None
    assert state.circuit.until == at(retried_at + FAILURE_COOLDOWN_S)
    assert state.circuit.opened_by is status
    assert state_of(history, now=at(retried_at + FAILURE_COOLDOWN_S)).recovering


@pytest.mark.loadbearing
@pytest.mark.parametrize("opener", [S.AUTH_FAILED, S.RATE_LIMITED])
def test_a_failure_after_any_recovery_reopens_the_circuit(opener: ConsultationStatus) -> None:
    retried_at = AUTH_COOLDOWN_S + 5
    history = [outcome(opener, 0), outcome(S.TIMEOUT, retried_at)]

    state = state_of(history, now=at(retried_at + 1))

    assert not state.available


@pytest.mark.loadbearing
def test_a_completed_answer_between_two_failures_breaks_the_run() -> None:
    history = [outcome(S.TIMEOUT, 0), outcome(S.COMPLETED, 10), outcome(S.ERROR, 20)]

    state = state_of(history, now=at(21))

    assert state.status is AdvisorStatus.AVAILABLE
    assert state.circuit is None


@pytest.mark.loadbearing
def test_an_auth_failure_holds_the_advisor_for_the_auth_cooldown() -> None:
    history = [outcome(S.AUTH_FAILED, 0)]

    during = state_of(history, now=at(AUTH_COOLDOWN_S - 1))
    after = state_of(history, now=at(AUTH_COOLDOWN_S))

    assert during.status is AdvisorStatus.AUTH_FAILED
    assert during.circuit is not None
    assert during.circuit.until == at(AUTH_COOLDOWN_S)
    assert after.status is AdvisorStatus.AVAILABLE
    assert after.recovering


@pytest.mark.loadbearing
def test_a_rate_limit_with_retry_after_holds_the_advisor_for_that_long() -> None:
    history = [outcome(S.RATE_LIMITED, 0, retry_after_s=30)]

    during = state_of(history, now=at(29))
    after = state_of(history, now=at(30))

    assert during.status is AdvisorStatus.RATE_LIMITED
    assert during.circuit is not None
    assert during.circuit.until == at(30)
    assert after.status is AdvisorStatus.AVAILABLE
    assert after.recovering


@pytest.mark.loadbearing
def test_a_rate_limit_without_retry_after_holds_the_advisor_for_the_default_cooldown() -> None:
    history = [outcome(S.RATE_LIMITED, 0)]

    during = state_of(history, now=at(RATE_LIMIT_COOLDOWN_S - 1))
    after = state_of(history, now=at(RATE_LIMIT_COOLDOWN_S))

    assert during.status is AdvisorStatus.RATE_LIMITED
    assert during.circuit is not None
    assert during.circuit.until == at(RATE_LIMIT_COOLDOWN_S)
    assert after.status is AdvisorStatus.AVAILABLE
    assert after.recovering


@pytest.mark.loadbearing
def test_a_rate_limit_with_a_zero_retry_after_may_be_retried_at_once() -> None:
    state = state_of([outcome(S.RATE_LIMITED, 0, retry_after_s=0)], now=at(0))

    assert state.status is AdvisorStatus.AVAILABLE
    assert state.recovering


# --- outcomes that never count ---------------------------------------------------------------------


@pytest.mark.loadbearing
@pytest.mark.parametrize("status", NEVER_COUNTS)
def test_outcomes_about_one_exchange_never_open_the_circuit(status: ConsultationStatus) -> None:
    history = [outcome(status, seconds) for seconds in range(0, 50, 5)]

    state = state_of(history, now=at(51))

    assert state.status is AdvisorStatus.AVAILABLE
    assert state.circuit is None
    assert not state.recovering


@pytest.mark.loadbearing
@pytest.mark.parametrize("between", NEVER_COUNTS)
def test_outcomes_about_one_exchange_do_not_break_a_run_of_failures(
    between: ConsultationStatus,
) -> None:
    history = [outcome(S.TIMEOUT, 0), outcome(between, 5), outcome(S.TIMEOUT, 10)]

    state = state_of(history, now=at(11))

    assert state.status is AdvisorStatus.TEMPORARILY_FAILED
    assert state.circuit is not None
    assert state.circuit.until == at(10 + FAILURE_COOLDOWN_S)
    assert state.circuit.failures == 2


@pytest.mark.loadbearing
@pytest.mark.parametrize("newest", NEVER_COUNTS)
def test_outcomes_about_one_exchange_neither_close_nor_extend_an_open_circuit(
    newest: ConsultationStatus,
) -> None:
    opened = [outcome(S.TIMEOUT, 0), outcome(S.TIMEOUT, 10)]
    until = at(10 + FAILURE_COOLDOWN_S)

    while_open = state_of([*opened, outcome(newest, 100)], now=at(101))
    while_recovering = state_of(
        [*opened, outcome(newest, 10 + FAILURE_COOLDOWN_S + 5)],
        now=at(10 + FAILURE_COOLDOWN_S + 6),
    )

    assert while_open.status is AdvisorStatus.TEMPORARILY_FAILED
    assert while_open.circuit is not None
    assert while_open.circuit.until == until
    assert while_recovering.status is AdvisorStatus.AVAILABLE
    assert while_recovering.recovering
    assert while_recovering.circuit is not None


# --- the cooldown override -----------------------------------------------------------------------

OPENERS: dict[str, tuple[list[Outcome], AdvisorStatus]] = {
    "transient": (
        [outcome(S.TIMEOUT, -10), outcome(S.UNAVAILABLE, 0)],
        AdvisorStatus.TEMPORARILY_FAILED,
    ),
    "auth": ([outcome(S.AUTH_FAILED, 0)], AdvisorStatus.AUTH_FAILED),
    "rate_limited": ([outcome(S.RATE_LIMITED, 0)], AdvisorStatus.RATE_LIMITED),
    "retry_after": (
        [outcome(S.RATE_LIMITED, 0, retry_after_s=30)],
        AdvisorStatus.RATE_LIMITED,
    ),
}


@pytest.mark.loadbearing
@pytest.mark.parametrize("opener", list(OPENERS))
def test_a_zero_cooldown_override_makes_every_opened_advisor_recover_at_once(opener: str) -> None:
    history, _ = OPENERS[opener]

    state = state_of(history, now=at(0), cooldown_override_s=0)

    assert state.status is AdvisorStatus.AVAILABLE
    assert state.recovering


@pytest.mark.loadbearing
@pytest.mark.parametrize("opener", list(OPENERS))
def test_a_cooldown_override_replaces_every_cooldown(opener: str) -> None:
    history, closed_status = OPENERS[opener]

    during = state_of(history, now=at(4), cooldown_override_s=5)
    after = state_of(history, now=at(5), cooldown_override_s=5)

    assert during.status is closed_status
    assert during.circuit is not None
    assert during.circuit.until == at(5)
    assert after.status is AdvisorStatus.AVAILABLE
    assert after.recovering


# --- switches, modes and the machine ---------------------------------------------------------------


@pytest.mark.loadbearing
def test_a_disabled_id_switches_off_that_advisor_only() -> None:
    a, b = make_advisor("a"), make_advisor("b")

    states = derive([a, b], disabled=frozenset({"a"}))

    assert [s.status for s in states] == [AdvisorStatus.DISABLED, AdvisorStatus.AVAILABLE]
    assert "PORTFOLIO_OPTIMISER_ADVISORS_DISABLE" in states[0].reason


@pytest.mark.loadbearing
def test_disabling_all_switches_off_every_advisor() -> None:
    advisors = [make_advisor("a"), make_advisor("b", local=True)]

    states = derive(advisors, disabled=frozenset({"all"}))

    assert [s.status for s in states] == [AdvisorStatus.DISABLED] * 2


@pytest.mark.loadbearing
def test_mode_ci_disables_every_advisor_even_local_ones() -> None:
    advisors = [make_advisor("a"), make_advisor("b", local=True)]

    states = derive(advisors, mode=Mode.CI)

    assert [s.status for s in states] == [AdvisorStatus.DISABLED] * 2
    assert all("ci" in s.reason for s in states)


@pytest.mark.loadbearing
def test_mode_offline_disables_remote_advisors_and_keeps_local_ones() -> None:
    advisors = [make_advisor("remote"), make_advisor("local", local=True)]

    remote, local = derive(advisors, mode=Mode.OFFLINE)

    assert remote.status is AdvisorStatus.DISABLED
    assert "offline" in remote.reason
    assert local.status is AdvisorStatus.AVAILABLE
    assert local.local


@pytest.mark.loadbearing
def test_a_missing_credential_variable_means_not_configured() -> None:
    advisor = make_advisor(credential_env=("A_KEY", "B_KEY"))

    half = state_of(advisor=advisor, presence=Presence(env_names=frozenset({"A_KEY"})))
    full = state_of(advisor=advisor, presence=Presence(env_names=frozenset({"A_KEY", "B_KEY"})))

    assert half.status is AdvisorStatus.NOT_CONFIGURED
    assert "B_KEY" in half.reason
    assert "A_KEY" not in half.reason
    assert full.status is AdvisorStatus.AVAILABLE


def test_presence_carries_credential_names_never_values() -> None:
    presence = Presence.of_this_machine({"A_KEY": "s3cret-value", "EMPTY_KEY": ""})

    assert presence.env_names == frozenset({"A_KEY"})
    assert "s3cret-value" not in repr(presence)


@pytest.mark.loadbearing
def test_a_missing_executable_means_not_installed() -> None:
    asked: list[str] = []

    def has(answer: bool) -> Callable[[str], bool]:
        def has_executable(name: str) -> bool:
            asked.append(name)
            return answer

        return has_executable

    advisor = make_advisor(executable="ollama", local=True)

    missing = state_of(advisor=advisor, presence=Presence(has_executable=has(False)))
    present = state_of(advisor=advisor, presence=Presence(has_executable=has(True)))

    assert missing.status is AdvisorStatus.NOT_INSTALLED
    assert "ollama" in missing.reason
    assert present.status is AdvisorStatus.AVAILABLE
    assert asked == ["ollama", "ollama"]


def test_an_advisor_without_an_executable_never_asks_for_one() -> None:
    def refuse(name: str) -> bool:
        raise AssertionError(f"asked for {name}")

    assert state_of(presence=Presence(has_executable=refuse)).available


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a, b", {"a", "b"}),
        ("", set()),
        ("all", {"all"}),
        (" , a ,, ", {"a"}),
    ],
)
def test_disabled_from_env_reads_a_comma_separated_list(raw: str, expected: set[str]) -> None:
    assert disabled_from_env({"PORTFOLIO_OPTIMISER_ADVISORS_DISABLE": raw}) == expected


def test_disabled_from_env_without_the_variable_is_empty() -> None:
    assert disabled_from_env({"OTHER": "a"}) == frozenset()


# --- independence from everything else ---------------------------------------------------------------


@pytest.mark.loadbearing
def test_the_history_of_other_advisors_does_not_affect_this_one() -> None:
    a, b = make_advisor("a"), make_advisor("b")
    b_failing = [outcome(S.TIMEOUT, 0, "b"), outcome(S.TIMEOUT, 10, "b")]

    alone = derive([a, b], now=at(11))
    with_b_failing = derive([a, b], b_failing, now=at(11))

    assert with_b_failing[0] == alone[0]
    assert with_b_failing[1].status is AdvisorStatus.TEMPORARILY_FAILED


def test_states_come_one_per_advisor_in_declaration_order() -> None:
    advisors = [make_advisor(i) for i in ("z", "a", "m")]

    assert [s.advisor for s in derive(advisors)] == ["z", "a", "m"]


@pytest.mark.loadbearing
def test_outcomes_at_the_same_instant_do_not_depend_on_input_order() -> None:
    history = [outcome(S.COMPLETED, 10), outcome(S.TIMEOUT, 10), outcome(S.TIMEOUT, 10)]

    assert state_of(history, now=at(11)) == state_of(history[::-1], now=at(11))


@pytest.mark.loadbearing
def test_outcomes_at_the_same_instant_follow_their_position_in_the_store() -> None:
    def ordered(*statuses: ConsultationStatus) -> list[Outcome]:
        return [Outcome("a", s, at(10), order=i) for i, s in enumerate(statuses)]

    closed = ordered(S.TIMEOUT, S.TIMEOUT, S.COMPLETED)
    opened = ordered(S.COMPLETED, S.TIMEOUT, S.TIMEOUT)

    assert state_of(closed[::-1], now=at(11)).status is AdvisorStatus.AVAILABLE
    assert state_of(opened[::-1], now=at(11)).status is AdvisorStatus.TEMPORARILY_FAILED


ALL_STATUSES = st.sampled_from(list(ConsultationStatus))


@st.composite
def histories(draw: st.DrawFn, statuses: st.SearchStrategy[ConsultationStatus]) -> list[Outcome]:
    """Histories of two advisors, some at the same instant, each at its own place in the store."""
    offsets = draw(st.lists(st.integers(0, 5000) | st.sampled_from([0, 600, 900]), max_size=12))
    return [
        Outcome(
            advisor=draw(st.sampled_from(["a", "b"])),
            status=draw(statuses),
            at=at(offset),
            retry_after_s=draw(st.one_of(st.none(), st.floats(0, 2000))),
            order=position,
        )
        for position, offset in enumerate(offsets)
    ]


@pytest.mark.loadbearing
@settings(deadline=None)
@given(history=histories(ALL_STATUSES), data=st.data(), now=st.integers(0, 10000))
def test_the_order_of_the_history_does_not_matter(
    history: list[Outcome], data: st.DataObject, now: int
) -> None:
    advisors = [make_advisor("a"), make_advisor("b")]
    shuffled = data.draw(st.permutations(history))

    assert derive(advisors, shuffled, now=at(now)) == derive(advisors, history, now=at(now))


@pytest.mark.loadbearing
@settings(deadline=None)
@given(
    history=histories(st.sampled_from(NEVER_COUNTS)),
    now=st.integers(0, 10000),
    override=st.one_of(st.none(), st.floats(0, 5000)),
)
def test_outcomes_about_one_exchange_alone_never_make_an_advisor_unavailable(
    history: list[Outcome], now: int, override: float | None
) -> None:
    states = derive(
        [make_advisor("a"), make_advisor("b")],
        history,
        now=at(now),
        cooldown_override_s=override,
    )

    for state in states:
        assert state.status is AdvisorStatus.AVAILABLE
        assert state.circuit is None
        assert not state.recovering


@settings(deadline=None)
@given(
    history=histories(ALL_STATUSES),
    now=st.integers(0, 10000),
    mode=st.sampled_from(list(Mode)),
    override=st.one_of(st.none(), st.floats(0, 5000)),
)
def test_derive_availability_is_deterministic(
    history: list[Outcome], now: int, mode: Mode, override: float | None
) -> None:
    advisors = [make_advisor("a"), make_advisor("b", local=True)]

    first = derive(advisors, history, now=at(now), mode=mode, cooldown_override_s=override)
    second = derive(advisors, list(history), now=at(now), mode=mode, cooldown_override_s=override)

    assert first == second
    assert [s.advisor for s in first] == ["a", "b"]
    for state in first:
        assert state.reason
        assert state.available == (state.status is AdvisorStatus.AVAILABLE)
        assert not state.recovering or state.available
