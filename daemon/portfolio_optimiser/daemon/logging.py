"""Logging: structlog for our events, the same chain for every library's ``logging`` records.

Decides: what a log line looks like — readable lines on a terminal, one JSON object per line
everywhere else (the journal) — and that no line carries a secret or a terminal control sequence
(DESIGN §7). Never writes anywhere but the one stream it is given.

Every event, ours or a library's, goes through one ``logging`` handler whose
``structlog.stdlib.ProcessorFormatter`` runs this chain. **Order is part of the contract:**

1. shared: ``add_logger_name``, ``add_log_level``, ``TimeStamper(fmt="iso", utc=True)`` (ours
   also ``filter_by_level``, context variables and ``%``-arguments first; a library record
   arrives with its message already formatted);
2. ``StackInfoRenderer``, then the exception into text: ``format_exc_info`` on a terminal,
   ``dict_tracebacks`` (without locals: a local variable may hold a key) for JSON. They are
   alternatives — ``format_exc_info`` first would leave ``dict_tracebacks`` nothing to do;
3. ``plain_values``: keys and values become JSON-native (an exception or object becomes its text
   here, not later inside the renderer, where nothing would scrub it);
4. ``redact_event`` **last before the renderer**, after everything that adds text (a traceback
   can carry a URL with a key in it);
5. the renderer: ``ConsoleRenderer`` (colours only on a terminal) or ``JSONRenderer``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Any, TextIO

import structlog
from structlog.processors import ExceptionRenderer
from structlog.tracebacks import ExceptionDictTransformer
from structlog.typing import EventDict, Processor, WrappedLogger

from portfolio_optimiser._text import strip_control
from portfolio_optimiser.reasoning.redaction import redact_event

__all__ = ["configure_logging", "get_logger", "plain_values"]

# dict_tracebacks, minus the locals of every frame.
_dict_tracebacks_without_locals = ExceptionRenderer(ExceptionDictTransformer(show_locals=False))


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, Mapping):
        return {strip_control(str(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    return str(value)


def plain_values(_logger: WrappedLogger, _method: str, event: EventDict) -> EventDict:
    """Make every key a clean string and every value JSON-native, so redaction sees all text."""
    return {strip_control(str(k)): _plain(v) for k, v in event.items()}


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _level(level: str | int) -> int:
    if isinstance(level, int):
        return level
    number = logging.getLevelNamesMapping().get(level.upper())
    if number is None:
        raise ValueError(
            f"unknown log level {level!r}; use one of debug, info, warning, error, critical"
        )
    return number


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """Ours, so a second ``configure_logging`` replaces it instead of adding another.

    Without an explicit stream it writes to whatever ``sys.stderr`` is when a record is emitted
    (like ``logging.lastResort``), so a replaced or closed stderr never swallows a line.
    """

    def __init__(self, stream: TextIO | None) -> None:
        super().__init__(sys.stderr if stream is None else stream)
        self._follow_stderr = stream is None

    def emit(self, record: logging.LogRecord) -> None:
        if self._follow_stderr:
            self.stream = sys.stderr
        super().emit(record)


def configure_logging(
    *, json: bool | None = None, level: str | int = "info", stream: TextIO | None = None
) -> None:
    """Route structlog and stdlib logging through one redacting chain to ``stream``.

    ``json=None`` picks by the stream: a terminal gets readable lines, anything else JSON lines.
    ``stream=None`` means ``sys.stderr`` at call time (line-buffered, so the journal gets each
    line at once). Calling it again replaces the previous configuration.
    """
    out = sys.stderr if stream is None else stream
    tty = _is_tty(out)
    as_json = not tty if json is None else json

    shared: list[Processor] = [
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Processor
    if as_json:
        exceptions: Processor = _dict_tracebacks_without_locals
        renderer = structlog.processors.JSONRenderer()
    else:
        exceptions = structlog.processors.format_exc_info
        colors = tty and "NO_COLOR" not in os.environ
        renderer = structlog.dev.ConsoleRenderer(colors=colors)

    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.StackInfoRenderer(),
            exceptions,
            plain_values,
            redact_event,  # last before the renderer
            renderer,
        ],
    )
    handler = _Handler(stream)
    handler.setFormatter(formatter)

    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(_level(level))
    # warnings.warn(...) goes through the same chain. Off first: another hand (a test runner's
    # catch_warnings, a library) may have set its own showwarning since a first capture, which
    # leaves logging's flag set and a second capture a no-op.
    logging.captureWarnings(False)
    logging.captureWarnings(True)

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.contextvars.merge_contextvars,
            *shared,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        # Not cached: a logger made at import time must pick up this configuration, never the
        # unredacted default it would have cached had it logged before configure_logging ran.
        cache_logger_on_first_use=False,
    )


def get_logger(name: str | None = None) -> structlog.stdlib.BoundLogger:
    """A structlog logger named like a stdlib one (``get_logger(__name__)``)."""
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger
