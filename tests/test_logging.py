"""Logging: JSON lines off a terminal, readable lines on one, and never a secret or an escape sequence.

Secrets are built at run time, so no committed file carries one.
"""

from __future__ import annotations

import io
import json
import logging
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import structlog

from portfolio_optimiser._text import strip_control
from portfolio_optimiser.daemon.logging import configure_logging, get_logger, plain_values
from portfolio_optimiser.reasoning.redaction import redact_event

SECRET = "sk-ant-" + "bQ7" * 8
ESCAPES = ("\x1b[2J", "\x1b]0;owned\x07", "\x9b31m")
HOSTILE = f"{SECRET} {''.join(ESCAPES)}"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(False)
    structlog.reset_defaults()


def _assert_clean(out: str) -> None:
    assert SECRET not in out
    assert "bQ7" * 8 not in out
    for escape in ESCAPES:
        assert escape not in out
    assert "\x07" not in out
    assert "[redacted:anthropic-key]" in out


def _json_lines(out: str) -> list[dict[str, Any]]:
    lines = out.splitlines()
    assert lines
    return [json.loads(line) for line in lines]


def test_not_a_terminal_gives_one_json_object_per_line() -> None:
    stream = io.StringIO()
    configure_logging(stream=stream)
    get_logger("portfolio_optimiser.test").info("bundle claimed", name="acme", count=3)
    logging.getLogger("watchdog.observers").warning("inotify watch limit at %d%%", 90)

    ours, library = _json_lines(stream.getvalue())
    assert ours["event"] == "bundle claimed"
    assert ours["name"] == "acme"
    assert ours["count"] == 3
    assert ours["level"] == "info"
    assert ours["logger"] == "portfolio_optimiser.test"
    assert ours["timestamp"].endswith("Z")
    assert library["event"] == "inotify watch limit at 90%"
    assert library["level"] == "warning"
    assert library["logger"] == "watchdog.observers"


def _emit_everything_hostile() -> None:
    log = get_logger("portfolio_optimiser.test")
    log.info(f"event {HOSTILE}")
    log.info("value", detail=HOSTILE, nested={"key": [HOSTILE]}, error=ValueError(HOSTILE))
    log.bind(token=HOSTILE).warning("bound")
    log.info("positional %s", HOSTILE)
    try:
        raise RuntimeError(f"exception {HOSTILE}")
    except RuntimeError:
        log.exception("failed")
    library = logging.getLogger("some.library")
    library.warning("library %s", HOSTILE)
    library.info(f"library f-string {HOSTILE}")
    try:
        raise OSError(f"library exception {HOSTILE}")
    except OSError:
        library.exception("library failed")


@pytest.mark.loadbearing
@pytest.mark.parametrize("as_json", [True, False])
def test_no_secret_or_escape_sequence_reaches_the_output(as_json: bool) -> None:
    stream = io.StringIO()  # not a terminal: no colours, so no escape may appear at all
    configure_logging(json=as_json, stream=stream)
    _emit_everything_hostile()
    out = stream.getvalue()
    _assert_clean(out)
    assert "\x1b" not in out
    assert out.count("[redacted:anthropic-key]") >= 10
    if as_json:
        events = _json_lines(out)
        assert len(events) == 8
        exceptions = [e for e in events if "exception" in e]
        assert len(exceptions) == 2
        assert all(isinstance(e["exception"], list) for e in exceptions)  # dict_tracebacks
        # no frame carries its local variables (one could hold a key)
        assert all("locals" not in f for e in exceptions for f in e["exception"][0]["frames"])
    else:
        assert "Traceback (most recent call last)" in out


def test_a_terminal_gets_readable_lines_and_still_no_injected_sequences(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    stream = Terminal()
    configure_logging(stream=stream)
    get_logger("portfolio_optimiser.test").info("daemon started", watch="inotify")
    _emit_everything_hostile()
    out = stream.getvalue()
    _assert_clean(out)  # the renderer's own colours are fine; the injected sequences are not
    first = strip_control(out.splitlines()[0])
    assert not first.startswith("{")
    assert "daemon started" in first
    assert "watch=inotify" in first
    assert "[info" in first


def test_no_color_turns_terminal_colours_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    stream = Terminal()
    configure_logging(stream=stream)
    get_logger("t").info("plain")
    assert "\x1b" not in stream.getvalue()
    assert "plain" in stream.getvalue()


def test_json_can_be_forced_on_a_terminal() -> None:
    stream = Terminal()
    configure_logging(json=True, stream=stream)
    get_logger("t").info("forced")
    assert _json_lines(stream.getvalue())[0]["event"] == "forced"


def test_a_logger_made_before_configuration_is_redacted_too() -> None:
    early = get_logger("portfolio_optimiser.early")  # module level, import time
    stream = io.StringIO()
    configure_logging(stream=stream)
    early.info("late", key=SECRET)
    assert SECRET not in stream.getvalue()
    assert _json_lines(stream.getvalue())[0]["key"] == "[redacted:anthropic-key]"


def test_warnings_go_through_the_same_chain() -> None:
    stream = io.StringIO()
    configure_logging(stream=stream)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn(f"deprecated {SECRET}", DeprecationWarning, stacklevel=1)
    out = stream.getvalue()
    assert SECRET not in out
    assert "DeprecationWarning" in out


def test_warnings_reach_the_chain_though_another_hand_put_its_own_showwarning_back() -> None:
    # A test runner (pytest's catch_warnings around each test) or a library can set
    # warnings.showwarning after a first capture: logging's flag stays set, and capturing again
    # would leave the other hand's in place.
    configure_logging(stream=io.StringIO())
    stream = io.StringIO()
    with warnings.catch_warnings():
        warnings.showwarning = lambda *_args, **_kwargs: None
        configure_logging(stream=stream)
        warnings.simplefilter("always")
        warnings.warn("deprecated", DeprecationWarning, stacklevel=1)
    assert "DeprecationWarning" in stream.getvalue()


def test_the_level_filters_ours_and_the_libraries() -> None:
    stream = io.StringIO()
    configure_logging(level="warning", stream=stream)
    get_logger("t").info("hidden")
    logging.getLogger("lib").info("hidden too")
    get_logger("t").warning("shown")
    assert [e["event"] for e in _json_lines(stream.getvalue())] == ["shown"]


def test_an_unknown_level_is_one_clear_sentence() -> None:
    with pytest.raises(ValueError, match="unknown log level 'loud'"):
        configure_logging(level="loud", stream=io.StringIO())


def test_configuring_again_replaces_the_handler() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging(stream=first)
    configure_logging(stream=second)
    get_logger("t").info("once")
    assert first.getvalue() == ""
    assert len(_json_lines(second.getvalue())) == 1


@pytest.mark.loadbearing
def test_redaction_runs_last_before_the_renderer() -> None:
    configure_logging(stream=io.StringIO())
    handler = next(
        h for h in logging.getLogger().handlers if type(h).__module__.endswith("daemon.logging")
    )
    formatter = handler.formatter
    assert isinstance(formatter, structlog.stdlib.ProcessorFormatter)
    chain: list[Callable[..., Any]] = list(formatter.processors)
    assert chain[-2] is redact_event
    assert isinstance(chain[-1], structlog.processors.JSONRenderer)
    assert chain.index(plain_values) < chain.index(redact_event)


def test_plain_values_makes_objects_text_before_redaction() -> None:
    event = plain_values(
        None, "info", {"err": KeyError("k"), "path": object, "n": 1, "ok": None, "\x1b[1mkey": 2}
    )
    assert event == {
        "err": "KeyError: 'k'",
        "path": "<class 'object'>",
        "n": 1,
        "ok": None,
        "key": 2,
    }


def test_without_a_stream_it_follows_the_current_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    configure_logging(json=True)
    later = io.StringIO()
    monkeypatch.setattr("sys.stderr", later)
    get_logger("t").info("followed")
    assert _json_lines(later.getvalue())[0]["event"] == "followed"
