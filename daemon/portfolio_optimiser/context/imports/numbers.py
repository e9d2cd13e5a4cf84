"""Figures as estimating tools and spreadsheets write them, read exactly.

Decides how one file writes its numbers (decimal comma or point, thousands grouped by spaces,
points or commas, ``kr`` or ``NOK`` before or after) from all of its figures at once, and reads
each figure in that format into a ``Decimal``. Never guesses a figure: a text that is not a number
in the file's format is refused with what it is, so the caller reports it with its place. A
number a workbook stored as one (a binary float) is read as the 15 significant digits Excel keeps
and shows, never as the float's noise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Context, Decimal, InvalidOperation
from typing import Final

__all__ = ["NumberFormat", "NumberRefused", "detect_format", "excel_number", "parse_number"]

_CURRENCY: Final = re.compile(r"(?i)\b(?:nok|kr)\b\.?|,-$")
_SPACES: Final = re.compile(r"[\s\u00a0\u202f\u2009']")
_MINUS: Final = str.maketrans({"\u2212": "-", "\u2013": "-"})
_COMMA_DECIMALS: Final = re.compile(r",(?:\d{1,2}|\d{4,6})$")
_POINT_DECIMALS: Final = re.compile(r"\.(?:\d{1,2}|\d{4,6})$")
_EXCEL_DIGITS: Final = Context(prec=15)
"""Excel keeps a number to 15 significant digits: what it shows, and what a planner typed."""


def excel_number(value: float) -> Decimal:
    """A float a workbook stored, as the 15 significant digits Excel keeps: a saved formula value
    of 18524.879999999997 is 18524.88, 0.1 + 0.2 is 0.3, and 1450.0 is 1450 (no exponent, no
    trailing zeros). The float's exact binary value is rounded, half to even, once."""
    rounded = _EXCEL_DIGITS.create_decimal_from_float(value).normalize(_EXCEL_DIGITS)
    if not rounded:
        return Decimal(0)  # -0.0 too: a sign on nothing is no figure a planner wrote
    exponent = rounded.as_tuple().exponent
    # normalize() writes 145000 as 1.45E+5: a whole number is given back as one.
    return Decimal(int(rounded)) if isinstance(exponent, int) and exponent > 0 else rounded


class NumberRefused(ValueError):
    """A text that is not a number in the file's format; ``str(exc)`` says what it is."""


@dataclass(frozen=True)
class NumberFormat:
    decimal: str
    """``,`` or ``.``: the other one, and spaces, group thousands."""
    why: str
    """How it was told, for the import report."""

    def describe(self) -> str:
        mark = "decimal comma" if self.decimal == "," else "decimal point"
        return f"{mark} ({self.why})"

    def show(self, value: Decimal) -> str:
        """``value`` as this file writes its figures (``10 290 000,00`` in a decimal-comma file),
        so that a problem quotes the figure the planner sees, not ``10290000.00``."""
        whole, _, decimals = f"{value:f}".partition(".")
        sign, digits = ("-", whole[1:]) if whole.startswith("-") else ("", whole)
        grouped = f"{int(digits):,}".replace(",", " ") if digits else "0"
        return sign + grouped + (f"{self.decimal}{decimals}" if decimals else "")


def _clean(text: str) -> str:
    plain = _CURRENCY.sub("", text.translate(_MINUS)).strip()
    return _SPACES.sub("", plain)


def detect_format(figures: Iterable[str], *, comma_by_default: bool) -> NumberFormat:
    """The format of a file's figures: the separator that ends a figure with 1, 2 or 4-6
    digits is its decimal mark; where both appear in one figure, the last is; where no figure
    tells (whole numbers, groups of three), ``comma_by_default`` decides (a semicolon file)."""
    comma = point = 0
    for raw in figures:
        text = _clean(raw)
        if "," in text and "." in text:
            if text.rfind(",") > text.rfind("."):
                comma += 1
            else:
                point += 1
        elif _COMMA_DECIMALS.search(text):
            comma += 1
        elif _POINT_DECIMALS.search(text):
            point += 1
    if comma and not point:
        return NumberFormat(",", f"{comma} figure(s) end in a comma and decimals")
    if point and not comma:
        return NumberFormat(".", f"{point} figure(s) end in a point and decimals")
    if comma or point:
        decimal = "," if comma >= point else "."
        return NumberFormat(decimal, f"mostly: {comma} with a comma, {point} with a point")
    if comma_by_default:
        return NumberFormat(",", "no figure has decimals; a semicolon file writes a comma")
    return NumberFormat(".", "no figure has decimals")


def parse_number(text: str, fmt: NumberFormat) -> Decimal:
    """The figure ``text`` says in ``fmt``; raises :class:`NumberRefused`."""
    plain = _clean(text)
    negative = plain.startswith("(") and plain.endswith(")")
    if negative:
        plain = plain[1:-1]
    group = "." if fmt.decimal == "," else ","
    if fmt.decimal in plain and plain.rfind(group) > plain.rfind(fmt.decimal):
        raise NumberRefused(f"{text.strip()!r} mixes its separators")
    if group in plain and not re.fullmatch(
        r"[-+]?\d{1,3}(?:" + re.escape(group) + r"\d{3})+(?:" + re.escape(fmt.decimal) + r"\d+)?",
        plain,
    ):
        raise NumberRefused(f"{text.strip()!r} is not a number with {fmt.describe()}")
    plain = plain.replace(group, "").replace(fmt.decimal, ".")
    if not re.fullmatch(r"[-+]?(?:\d+\.?\d*|\.\d+)", plain):
        raise NumberRefused(f"{text.strip()!r} is not a number")
    try:
        value = Decimal(plain)
    except InvalidOperation:
        raise NumberRefused(f"{text.strip()!r} is not a number") from None
    return -value if negative else value
