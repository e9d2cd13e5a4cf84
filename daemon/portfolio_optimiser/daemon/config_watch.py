"""The daemon's configuration, read again when its file changes: settings that take effect.

Decides when the file laid over the packaged default has changed (its stat: it may come, go or
be replaced by an editor's rename), whether the new one can be used (a bad edit is refused, the
running config kept, and the reason kept for ``status``), and what it changed, key by key, for
the log. Never applies a config: the service does, at a moment the processor is free.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from portfolio_optimiser.config import Config, ConfigError, effective_settings, load_config
from portfolio_optimiser.reasoning.environment import admission_for

from .stamps import iso
from .stores import stores_for

__all__ = ["ConfigWatch", "changes"]

_Stamp = tuple[int, int, int]


def _stamp(path: Path | None) -> _Stamp | None:
    try:
        info = path.stat() if path is not None else None
    except OSError:
        return None
    return (info.st_mtime_ns, info.st_size, info.st_ino) if info is not None else None


class ConfigWatch:
    def __init__(self, path: Path | None, *, log: Any, clock: Callable[[], float]) -> None:
        self.path, self.log, self.clock = path, log, clock
        self._stamp = _stamp(path)
        self.problem: str | None = None
        """Why the last edit was refused (the running config kept), until one is taken."""

    def moved(self) -> bool:
        """Whether the file changed (or came, or went) since it was last looked at: one stat."""
        stamp = _stamp(self.path)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        return True

    def load(self, running: Config) -> Config | None:
        """The file read again over the default; None (logged, kept as ``problem``) when it
        cannot be used instead of ``running``."""
        path = self.path
        try:
            config = load_config(path if path is not None and path.is_file() else None)
            admission_for(config, now=datetime.now(UTC))
            if stores_for(config) != stores_for(running):
                # The ledger's connection and DBOS's database must move together: a restart does.
                raise ConfigError("[scale] changed: restart the daemon to move its databases")
        except ConfigError as exc:
            self.problem = f"{exc} (refused at {iso(self.clock())})"
            self.log.error("config reload refused; keeping the running config", problem=str(exc))
            return None
        self.problem = None
        return config


def changes(old: Config, new: Config) -> list[str]:
    """What a reload changed, key by key (``verdicts.require_signature: 'off' → 'approvals'``)."""
    before = {key: value for key, value, _where in effective_settings(old)}
    return [
        f"{key}: {before.get(key)!r} → {value!r}"
        for key, value, _where in effective_settings(new)
        if before.get(key) != value
    ]
