"""Configuration: the packaged default, the one sentence for every bad file, and the CLI's 78."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from portfolio_optimiser.cli import main
from portfolio_optimiser.config import (
    EX_CONFIG,
    Config,
    ConfigError,
    effective_settings,
    load_config,
    parse_config,
)
from portfolio_optimiser.resources import commons_dir, default_config_path

EXAMPLE_BUNDLE = commons_dir() / "examples" / "portfolio" / "lillevik-school"

STOP = """[stop]
max_attempts = 3
max_rounds = 4
max_candidates = 8
run_timeout_seconds = 900
"""
BUDGET = """[budget]
run_tokens = 60000
portfolio_tokens = 600000
call_tokens = 8000
"""
VALID = STOP + "\n" + BUDGET


def write(tmp_path: Path, text: str | bytes, name: str = "po.toml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def config_error(path: Path, *needles: str) -> str:
    """Loading ``path`` raises one ConfigError sentence naming the file and every needle."""
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert "\n" not in message
    assert "Traceback" not in message
    assert str(path) in message
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    return message


# --- loading ------------------------------------------------------------------------------------


def test_the_packaged_default_loads_with_stop_criteria_and_budget_caps() -> None:
    config = load_config()
    assert isinstance(config, Config)
    assert config.source == str(default_config_path())
    assert config.stop.max_attempts == 3
    assert config.stop.run_timeout_seconds == 900
    assert (
        0 < config.budget.call_tokens <= config.budget.run_tokens <= config.budget.portfolio_tokens
    )
    # The default context (full bodies, index and map, each bounded) fits one call with room to answer.
    assert config.context.budget_chars * 5 // 3 // 4 < config.budget.call_tokens
    assert config.reasoning.mode == "offline"


def test_the_packaged_default_is_what_parse_config_makes_of_its_text() -> None:
    data = tomllib.loads(default_config_path().read_text(encoding="utf-8"))
    parsed = parse_config(data, source=str(default_config_path()))
    assert parsed == load_config()


def test_a_minimal_file_with_stop_and_budget_loads_with_defaults_for_the_rest(
    tmp_path: Path,
) -> None:
    config = load_config(write(tmp_path, VALID))
    assert config.budget.run_tokens == 60000
    assert config.context.budget_chars == 24000
    assert config.reasoning.materiality.material_share == 0.005


def test_a_utf8_bom_is_accepted(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, ("\ufeff" + VALID).encode("utf-8"))).stop.max_rounds == 4


# --- a file over the default -------------------------------------------------------------------


def test_a_file_with_one_section_overlays_the_default(tmp_path: Path) -> None:
    # A workspace names only what it changes: the stop criteria and the other caps stay the
    # default's (a file that replaced the default had to copy all of it to change one value).
    config = load_config(write(tmp_path, '[verdicts]\nrequire_signature = "approvals"\n'))
    default = load_config()
    assert config.verdicts.require_signature == "approvals"
    assert config.stop == default.stop and config.budget == default.budget
    assert config.advisors == default.advisors
    assert config.overrides == ("verdicts.require_signature",)


def test_a_file_naming_one_key_of_a_section_keeps_the_others(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "[budget]\nportfolio_tokens = 2000000\n"))
    assert config.budget.portfolio_tokens == 2_000_000
    assert config.budget.run_tokens == load_config().budget.run_tokens


def test_an_empty_file_is_the_packaged_default(tmp_path: Path) -> None:
    path = write(tmp_path, "# nothing changed yet\n")
    assert load_config(path).model_dump(exclude={"source"}) == load_config().model_dump(
        exclude={"source"}
    )
    assert load_config(path).source == str(path)


def test_advisors_in_the_file_are_the_whole_catalogue(tmp_path: Path) -> None:
    # Merged into the packaged ones, an advisor of the file would be consulted beside advisors
    # the file never named.
    text = (
        '[[advisors]]\nid = "mine"\nname = "Mine"\nadapter = "openai-compatible"\n'
        'provider = "self-hosted"\nmodel = "m"\nlocal = true\ncapabilities = ["cost_review"]\n'
    )
    config = load_config(write(tmp_path, text))
    assert [a["id"] for a in config.advisors] == ["mine"]
    assert load_config(write(tmp_path, "advisors = []\n")).advisors == ()


def test_the_stop_criteria_and_budget_caps_are_still_required_of_the_whole(tmp_path: Path) -> None:
    # The packaged default carries them; a whole config without them is refused, key by key.
    data = tomllib.loads(default_config_path().read_text(encoding="utf-8"))
    del data["budget"]["call_tokens"]
    with pytest.raises(ConfigError, match=r"budget\.call_tokens is missing; it is a budget cap"):
        parse_config(data, source="whole")
    del data["stop"]
    with pytest.raises(ConfigError, match=r"stop is missing; it is a stop criterion"):
        parse_config(data, source="whole")


def test_a_bad_value_in_the_file_names_the_file_not_the_default(tmp_path: Path) -> None:
    message = config_error(write(tmp_path, "[stop]\nmax_rounds = 0\n"), "stop.max_rounds")
    assert str(default_config_path()) not in message


def test_the_effective_config_says_where_each_value_came_from(tmp_path: Path) -> None:
    path = write(tmp_path, '[verdicts]\nrequire_signature = "all"\n[stop]\nmax_rounds = 2\n')
    where = {key: origin for key, _value, origin in effective_settings(load_config(path))}
    assert where["verdicts.require_signature"] == where["stop.max_rounds"] == str(path)
    assert where["stop.max_attempts"] == where["budget.run_tokens"] == "packaged default"


# --- values -------------------------------------------------------------------------------------


def test_a_wrong_type_names_key_path_and_value(tmp_path: Path) -> None:
    text = VALID.replace("run_tokens = 60000", 'run_tokens = "lots"')
    config_error(write(tmp_path, text), "budget.run_tokens", "'lots'", "integer")


def test_a_wrong_type_message_reads_as_english(tmp_path: Path) -> None:
    text = VALID.replace("run_tokens = 60000", 'run_tokens = "lots"')
    config_error(write(tmp_path, text), "write an integer")


def test_a_value_below_the_minimum_names_key_path_and_bound(tmp_path: Path) -> None:
    text = VALID.replace("max_attempts = 3", "max_attempts = 0")
    config_error(write(tmp_path, text), "stop.max_attempts", "at least 1")


def test_a_value_above_the_maximum_names_key_path_and_bound(tmp_path: Path) -> None:
    text = VALID.replace("max_attempts = 3", "max_attempts = 21")
    config_error(write(tmp_path, text), "stop.max_attempts", "at most 20")


def test_a_zero_timeout_names_key_path_and_exclusive_bound(tmp_path: Path) -> None:
    text = VALID.replace("run_timeout_seconds = 900", "run_timeout_seconds = 0")
    config_error(write(tmp_path, text), "stop.run_timeout_seconds", "above 0")


@pytest.mark.parametrize("written", ["inf", "nan"])
def test_a_timeout_that_is_not_finite_is_refused(tmp_path: Path, written: str) -> None:
    text = VALID.replace("run_timeout_seconds = 900", f"run_timeout_seconds = {written}")
    config_error(write(tmp_path, text), "stop.run_timeout_seconds")


def test_a_boolean_where_an_integer_belongs_is_refused(tmp_path: Path) -> None:
    text = VALID.replace("max_rounds = 4", "max_rounds = true")
    config_error(write(tmp_path, text), "stop.max_rounds")


def test_an_unknown_mode_lists_the_choices(tmp_path: Path) -> None:
    text = '[reasoning]\nmode = "turbo"\n\n' + VALID
    config_error(write(tmp_path, text), "reasoning.mode", "'turbo'", "offline")


def test_an_unknown_key_is_named_with_a_spelling_hint(tmp_path: Path) -> None:
    text = VALID.replace("max_attempts = 3", "max_attempts = 3\nmax_atempts = 3")
    message = config_error(write(tmp_path, text), "stop.max_atempts", "check its spelling")
    assert "max_attempts" in message.split("known here:")[1]


def test_an_unknown_section_is_named_with_a_spelling_hint(tmp_path: Path) -> None:
    text = VALID + "\n[budgett]\nrun_tokens = 1\n"
    config_error(write(tmp_path, text), "budgett", "check its spelling")


def test_materiality_shares_out_of_order_are_refused(tmp_path: Path) -> None:
    text = (
        "[reasoning.materiality]\nmaterial_share = 0.05\nhigh_share = 0.02\n"
        "critical_share = 0.01\n\n" + VALID
    )
    config_error(write(tmp_path, text), "reasoning.materiality", "material_share", "reorder")


# --- the file itself ----------------------------------------------------------------------------


def test_invalid_toml_names_the_line(tmp_path: Path) -> None:
    text = VALID.replace("max_rounds = 4", "max_rounds = = 4")
    config_error(write(tmp_path, text), "not valid TOML", "line 3")


def test_a_file_that_does_not_exist_is_named(tmp_path: Path) -> None:
    message = config_error(tmp_path / "missing.toml", "no such config file")
    assert "--config" in message


def test_a_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    data = ("# Kr\u00e5ke\n" + VALID).encode("latin-1")
    config_error(write(tmp_path, data), "not UTF-8")


def test_a_folder_given_as_the_config_is_named(tmp_path: Path) -> None:
    config_error(tmp_path, "cannot be read")


def test_parse_config_names_its_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^inline: stop is missing"):
        parse_config(
            {"budget": {"run_tokens": 1, "portfolio_tokens": 1, "call_tokens": 1}}, source="inline"
        )


# --- through the command line -------------------------------------------------------------------


def one_line(text: str) -> str:
    lines = text.splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


BAD = '[budget]\nrun_tokens = "lots"\n'


def bad_config(tmp_path: Path) -> Path:
    return write(tmp_path, BAD, name="bad.toml")


def test_a_bad_config_exits_78_with_one_line_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = bad_config(tmp_path)
    assert main(["--config", str(bad), "check-bundle", str(EXAMPLE_BUNDLE)]) == EX_CONFIG == 78
    out, err = capsys.readouterr()
    line = one_line(err)
    assert line.startswith("portfolio-optimiser: ")
    assert str(bad) in line
    assert "budget" in line
    assert out == ""


def test_config_is_accepted_after_the_command_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = bad_config(tmp_path)
    assert main(["check-bundle", str(EXAMPLE_BUNDLE), "--config", str(bad)]) == 78
    assert str(bad) in one_line(capsys.readouterr().err)


def test_a_good_config_given_explicitly_is_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write(tmp_path, VALID, name="good.toml")
    assert main(["check-bundle", "--config", str(good), str(EXAMPLE_BUNDLE)]) == 0
    assert capsys.readouterr().err == ""


def workspace_with(tmp_path: Path, text: str) -> Path:
    workspace = tmp_path / "ws"
    (workspace / "inbox" / "projects").mkdir(parents=True)
    write_to = workspace / "config" / "portfolio-optimiser.toml"
    write_to.parent.mkdir(parents=True)
    write_to.write_text(text, encoding="utf-8")
    return workspace


@pytest.mark.parametrize("before", [True, False], ids=["before-command", "after-command"])
def test_workspace_is_accepted_before_or_after_the_command_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], before: bool
) -> None:
    workspace = workspace_with(tmp_path, BAD)
    option = ["--workspace", str(workspace)]
    argv = (
        [*option, "check-bundle", str(EXAMPLE_BUNDLE)]
        if before
        else ["check-bundle", str(EXAMPLE_BUNDLE), *option]
    )
    assert main(argv) == 78
    assert "portfolio-optimiser.toml" in one_line(capsys.readouterr().err)


def test_the_current_folder_is_the_default_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace = workspace_with(tmp_path, BAD)
    monkeypatch.chdir(workspace)
    assert main(["check-bundle", str(EXAMPLE_BUNDLE)]) == 78
    assert "config/portfolio-optimiser.toml" in one_line(capsys.readouterr().err)


def test_a_workspace_with_a_good_config_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace = workspace_with(tmp_path, VALID)
    assert main(["--workspace", str(workspace), "check-bundle", str(EXAMPLE_BUNDLE)]) == 0
    assert capsys.readouterr().err == ""


def test_an_explicit_config_wins_over_the_workspace_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace = workspace_with(tmp_path, BAD)
    good = write(tmp_path, VALID, name="good.toml")
    argv = ["--workspace", str(workspace), "check-bundle", str(EXAMPLE_BUNDLE)]
    assert main([*argv, "--config", str(good)]) == 0
    assert capsys.readouterr().err == ""


def test_a_workspace_without_a_config_falls_back_to_the_packaged_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "inbox" / "projects").mkdir(parents=True)
    assert main(["check-bundle", str(EXAMPLE_BUNDLE), "--workspace", str(tmp_path)]) == 0
    assert capsys.readouterr().err == ""


def test_an_assumed_spread_that_does_not_hold_a_lines_amount_is_refused(tmp_path: Path) -> None:
    text = '[uncertainty]\nspread = [1.1, 1.5]\n\n[uncertainty.spreads]\n"02" = [0.8, 0.9]\n\n'
    config_error(
        write(tmp_path, text + VALID),
        "uncertainty.spread: [1.1, 1.5]",
        "uncertainty.spreads.02: [0.8, 0.9]",
        "e.g. [0.9, 1.25]",
    )
    loaded = load_config(write(tmp_path, '[uncertainty.spreads]\n"02" = [0.8, 1.6]\n\n' + VALID))
    rule = loaded.uncertainty.rule()
    assert (rule.account_of("02.3"), rule.account_of("07")) == (
        ("estimate maturity 02", (0.8, 1.6)),
        ("estimate maturity", (0.9, 1.25)),
    )
