"""The reasoning mode: the variable, then CI, then the config, then ``standard``; each says its source.

``resolve_mode`` takes the environment as a plain mapping, so no test here touches ``os.environ``.
"""

from __future__ import annotations

import pytest

from portfolio_optimiser.reasoning.modes import (
    MODE_VARIABLE,
    Mode,
    ModeError,
    ModeResolution,
    resolve_mode,
)


def test_the_variable_is_the_documented_one() -> None:
    assert MODE_VARIABLE == "PORTFOLIO_OPTIMISER_REASONING_MODE"


@pytest.mark.loadbearing
def test_the_mode_variable_wins_over_ci_and_the_config() -> None:
    resolved = resolve_mode({MODE_VARIABLE: "strict", "CI": "true"}, "fast")

    assert resolved == ModeResolution(Mode.STRICT, "env")


@pytest.mark.parametrize("mode", list(Mode))
def test_every_mode_can_be_chosen_by_the_variable(mode: Mode) -> None:
    assert resolve_mode({MODE_VARIABLE: mode.value}, None) == ModeResolution(mode, "env")


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    ("value", "expected"),
    [("STRICT", Mode.STRICT), ("Offline", Mode.OFFLINE), ("  fast ", Mode.FAST), ("cI", Mode.CI)],
)
def test_the_variable_value_is_case_insensitive_and_trimmed(value: str, expected: Mode) -> None:
    assert resolve_mode({MODE_VARIABLE: value}, None) == ModeResolution(expected, "env")


@pytest.mark.loadbearing
@pytest.mark.parametrize("value", ["turbo", "standard-ish", "0"])
def test_an_unknown_variable_value_raises_a_mode_error_naming_the_variable_and_choices(
    value: str,
) -> None:
    with pytest.raises(ModeError) as raised:
        resolve_mode({MODE_VARIABLE: value, "CI": "true"}, "fast")

    message = str(raised.value)
    assert MODE_VARIABLE in message
    assert repr(value) in message
    for mode in Mode:
        assert mode.value in message


def test_a_mode_error_is_a_value_error() -> None:
    assert issubclass(ModeError, ValueError)


def test_a_blank_variable_is_as_if_unset() -> None:
    assert resolve_mode({MODE_VARIABLE: "   "}, "strict") == ModeResolution(Mode.STRICT, "config")
    assert resolve_mode({MODE_VARIABLE: ""}, None) == ModeResolution(Mode.STANDARD, "default")


@pytest.mark.loadbearing
@pytest.mark.parametrize("ci", ["true", "1", "TRUE", "yes", "anything"])
def test_a_set_ci_variable_means_mode_ci_over_the_config(ci: str) -> None:
    assert resolve_mode({"CI": ci}, "strict") == ModeResolution(Mode.CI, "ci")
    assert resolve_mode({"CI": ci}, None) == ModeResolution(Mode.CI, "ci")


@pytest.mark.loadbearing
@pytest.mark.parametrize("ci", ["false", "0", "", "  ", "False", "no"])
def test_an_unset_looking_ci_variable_is_not_ci(ci: str) -> None:
    assert resolve_mode({"CI": ci}, "strict") == ModeResolution(Mode.STRICT, "config")
    assert resolve_mode({"CI": ci}, None) == ModeResolution(Mode.STANDARD, "default")


@pytest.mark.parametrize("configured", [*list(Mode), *(m.value for m in Mode)])
def test_the_config_comes_next(configured: str) -> None:
    assert resolve_mode({}, configured) == ModeResolution(Mode(configured), "config")


@pytest.mark.parametrize("configured", [None, ""])
def test_the_default_is_standard(configured: str | None) -> None:
    assert resolve_mode({}, configured) == ModeResolution(Mode.STANDARD, "default")


def test_unrelated_variables_do_not_matter() -> None:
    environ = {"PATH": "/usr/bin", "PORTFOLIO_OPTIMISER_OTHER": "ci", "CIRCLECI": "true"}

    assert resolve_mode(environ, None) == ModeResolution(Mode.STANDARD, "default")


def test_every_source_is_one_of_the_four_documented_ones() -> None:
    sources = {
        resolve_mode({MODE_VARIABLE: "fast"}, None).source,
        resolve_mode({"CI": "1"}, None).source,
        resolve_mode({}, "offline").source,
        resolve_mode({}, None).source,
    }

    assert sources == {"env", "ci", "config", "default"}
