"""Markdown-safe text and Norwegian money, shared by every report the outputs write."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Final

__all__ = ["format_nok", "md"]

_MARKDOWN_SPECIAL: Final = re.compile(r"([\\`*_\[\]<>|#!])")


def format_nok(value: int | float | Decimal) -> str:
    """``1234567`` → ``1 234 567``; ``1234.5`` → ``1 234,50`` (Norwegian decimal comma)."""
    amount = value if isinstance(value, Decimal) else Decimal(str(value))
    sign = "-" if amount < 0 else ""
    amount = abs(amount)
    fraction = ""
    if amount != amount.to_integral_value():
        amount = amount.quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN)
        fraction = "," + f"{amount:.2f}".rpartition(".")[2]
    return sign + f"{int(amount):,}".replace(",", " ") + fraction


def md(text: str) -> str:
    """Markdown-safe inline text: one line, punctuation escaped (no raw HTML, no table breaks)."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(text.split()))
