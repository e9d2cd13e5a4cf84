"""What a bundle gives its uncertainty frame beside its lines: uncertainty elements and events
(``type: uncertainty``), uncertainty drivers (``type: uncertainty-driver``), the correlation
coefficients, and the final cost a finished project is judged by (``type: outcome``)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator, model_validator

from .ir_types import IR, Money, finite

__all__ = [
    "DRIVER_TARGETS",
    "Outcome",
    "Uncertainty",
    "UncertaintyDriver",
    "coefficients_between",
    "group_coefficients",
]

DRIVER_TARGETS = "all, unstated, posts or an account's code (e.g. 2 or 23)"


class Uncertainty(IR):
    """An uncertainty element beside the cost lines — a general one (the market, the
    organisation) or an event that may happen (``probability`` below 1) — as a triple estimate
    in NOK of what it adds (a negative figure: what it may save)."""

    id: str = Field(min_length=1, max_length=80)
    title: str = ""
    min_nok: Money
    likely_nok: Money
    max_nok: Money
    probability: float = Field(default=1.0, gt=0, le=1)
    distribution: Literal["pert", "triangular", "normal"] = "pert"
    correlation_group: str | None = Field(default=None, min_length=1, max_length=60)
    source: str = ""

    _amounts = field_validator("min_nok", "likely_nok", "max_nok")(finite)

    @model_validator(mode="after")
    def _ordered(self) -> Uncertainty:
        if not self.min_nok <= self.likely_nok <= self.max_nok:
            raise ValueError("min_nok, likely_nok and max_nok must be in rising order")
        if self.distribution == "normal" and not math.isclose(
            self.likely_nok - self.min_nok, self.max_nok - self.likely_nok, abs_tol=0.5
        ):
            raise ValueError(
                "distribution normal is symmetric: likely_nok must lie midway from min_nok to "
                "max_nok (its P10 and P90); use pert or triangular for a skewed one"
            )
        return self


class Outcome(IR):
    """What a finished project cost in the end (``type: outcome``): its frames are judged
    against it, and a portfolio's frames against their history."""

    final_cost_nok: Money
    completed: str | None = None
    """When it was finished (a date or a year), as the bundle says it."""
    source: str = ""

    _amounts = field_validator("final_cost_nok")(finite)


class UncertaintyDriver(IR):
    """A general uncertainty driver (usikkerhetsdriver: the market, complexity, the
    organisation): a triple on a multiplier of the lines it names, drawn once a sample for all of
    them, so its spread does not average out over many lines."""

    id: str = Field(min_length=1, max_length=80)
    title: str = ""
    low: float = Field(ge=0)
    likely: float = Field(gt=0)
    high: float = Field(gt=0)
    applies_to: tuple[str, ...] = ("all",)
    """Which lines it multiplies: ``all``; ``unstated`` (the lines without a triple of their
    own); ``posts`` (an imported tender's or estimate's posts); or an account's code prefix."""
    distribution: Literal["pert", "triangular"] = "pert"
    source: str = ""

    @field_validator("applies_to", mode="before")
    @classmethod
    def _one_or_more(cls, value: object) -> object:
        if isinstance(value, str):
            return (value,)
        return tuple(value) if isinstance(value, list) else value

    @field_validator("low", "likely", "high", mode="before")
    @classmethod
    def _a_number(cls, value: object) -> object:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _ordered(self) -> UncertaintyDriver:
        if not self.low <= self.likely <= self.high:
            raise ValueError(
                "low, likely and high must be in rising order (multipliers, e.g. 0.95, 1.0, 1.15)"
            )
        if not self.applies_to or any(not target.strip() for target in self.applies_to):
            raise ValueError(f"applies_to names no lines; name {DRIVER_TARGETS}")
        return self

    def applies(self, code: str, *, stated: bool, post: bool) -> bool:
        """Whether the driver multiplies a line of ``code``."""
        return any(
            target == "all"
            or (target == "unstated" and not stated)
            or (target == "posts" and post)
            or (target not in {"all", "unstated", "posts"} and code.startswith(target))
            for target in self.applies_to
        )


def group_coefficients(value: object) -> object:
    """A project's ``correlation``: each group's coefficient, from 0 to 1."""
    if not isinstance(value, dict):
        return value
    for group, coefficient in value.items():
        if (
            isinstance(coefficient, bool)
            or not isinstance(coefficient, int | float)
            or not 0 <= coefficient <= 1
        ):
            raise ValueError(
                f"group {group!r}: {coefficient!r} is not a coefficient from 0 to 1 "
                "(write e.g. 0.6)"
            )
    return {str(group): float(coefficient) for group, coefficient in value.items()}


def coefficients_between(value: object) -> object:
    """A project's ``correlation_between``: factor → factor → coefficient, from -1 to 1."""
    if not isinstance(value, dict):
        return value
    found: dict[str, dict[str, float]] = {}
    for a, row in value.items():
        if not isinstance(row, dict):
            raise ValueError(f"{a!r}: write the factors it correlates with, e.g. {{ground: 0.4}}")
        for b, rho in row.items():
            if isinstance(rho, bool) or not isinstance(rho, int | float) or not -1 <= rho <= 1:
                raise ValueError(
                    f"{a!r} with {b!r}: {rho!r} is not a coefficient from -1 to 1 (e.g. 0.4)"
                )
            found.setdefault(str(a), {})[str(b)] = float(rho)
    return found
