"""The reasoning mode: how much independent review a run may ask for, and from whom.

Resolution, first match wins: ``PORTFOLIO_OPTIMISER_REASONING_MODE``; ``ci`` when the ``CI``
variable is set (a CI runner never consults a model, whatever is installed); the config's
``[reasoning] mode``; ``standard``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Mode", "ModeError", "ModeResolution", "resolve_mode"]

MODE_VARIABLE = "PORTFOLIO_OPTIMISER_REASONING_MODE"


class Mode(StrEnum):
    STANDARD = "standard"
    OFFLINE = "offline"
    """Only advisors that run on this machine."""
    CI = "ci"
    """No advisor at all."""
    FAST = "fast"
    """Review only high and critical uncertainty."""
    STRICT = "strict"
    """One more independent review for critical uncertainty."""


class ModeError(ValueError):
    """An unknown mode word; ``str(exc)`` says where it came from and the choices."""


@dataclass(frozen=True)
class ModeResolution:
    mode: Mode
    source: str
    """``env``, ``ci``, ``config`` or ``default``: where the mode came from, for explanations."""


def _is_set(value: str | None) -> bool:
    return value is not None and value.strip().lower() not in {"", "0", "false", "no"}


def resolve_mode(environ: Mapping[str, str], configured: str | None) -> ModeResolution:
    chosen = environ.get(MODE_VARIABLE, "").strip()
    if chosen:
        try:
            return ModeResolution(Mode(chosen.lower()), "env")
        except ValueError:
            raise ModeError(
                f"{MODE_VARIABLE}={chosen!r} is not a mode; use one of "
                f"{', '.join(m.value for m in Mode)}"
            ) from None
    if _is_set(environ.get("CI")):
        return ModeResolution(Mode.CI, "ci")
    if configured:
        try:
            return ModeResolution(Mode(configured), "config")
        except ValueError:
            raise ModeError(
                f"reasoning.mode {configured!r} is not a mode; use one of {', '.join(m.value for m in Mode)}"
            ) from None
    return ModeResolution(Mode.STANDARD, "default")
