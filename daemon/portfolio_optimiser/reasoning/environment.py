"""Read the reasoning's inputs from the config and the process environment, once, at the edge.

Everything below this module receives values (mode, catalogue, presence, clock) and reads no
global state, so policy and availability stay pure and tests pin them without touching ``os``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from datetime import datetime

from portfolio_optimiser.config import Config, ConfigError

from .availability import disabled_from_env
from .catalogue import Catalogue, Presence, catalogue_from_config
from .modes import ModeError, resolve_mode
from .store import Admission

__all__ = ["COOLDOWN_VARIABLE", "admission_for", "catalogue_of", "cooldown_override"]

COOLDOWN_VARIABLE = "PORTFOLIO_OPTIMISER_REASONING_COOLDOWN_SECONDS"


def catalogue_of(config: Config) -> Catalogue:
    return catalogue_from_config(config.advisors)


def cooldown_override(environ: Mapping[str, str]) -> float | None:
    raw = environ.get(COOLDOWN_VARIABLE, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise ConfigError(
            f"{COOLDOWN_VARIABLE}={raw!r} is not a number of seconds; use e.g. 0 or 300"
        )
    return value


def admission_for(
    config: Config,
    *,
    now: datetime,
    environ: Mapping[str, str] | None = None,
    presence: Presence | None = None,
    clock: Callable[[], datetime] | None = None,
) -> Admission:
    """The admission context for this process: mode, catalogue, presence, switches, cooldowns."""
    environ = os.environ if environ is None else environ
    try:
        mode = resolve_mode(environ, config.reasoning.mode)
    except ModeError as exc:
        raise ConfigError(str(exc)) from None
    return Admission(
        catalogue=catalogue_of(config),
        mode=mode,
        now=now,
        presence=presence or Presence.of_this_machine(environ),
        disabled=disabled_from_env(environ),
        cooldown_override_s=cooldown_override(environ),
        clock=clock,
    )
