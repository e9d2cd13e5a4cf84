"""What a bundle gives its uncertainty frame beside its lines: uncertainty elements and events
(``type: uncertainty``) and uncertainty drivers (``type: uncertainty-driver``)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator, model_validator

from .ir_types import IR, Money, finite

__all__ = ["DRIVER_TARGETS", "Uncertainty", "UncertaintyDriver"]

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
