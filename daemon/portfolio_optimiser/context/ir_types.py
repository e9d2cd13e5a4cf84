"""What every IR model is built on: a frozen, strict pydantic model, and a finite amount."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

__all__ = ["IR", "Money", "finite"]

Money = int | float


def finite(value: Money) -> Money:
    if isinstance(value, bool) or not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


class IR(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
