"""The words a bundle may write where the product reads a fixed set: units and measure types.

Units: ``m2``, ``m²``, ``kvm`` and ``kvadratmeter`` are one unit, compared under one spelling;
lines of one unit compare across projects, a measure's unit must be its line's, and a unit
outside the vocabulary is a problem ``check-bundle`` names (a typo would otherwise make a line
incomparable without a word). Measure types: the kinds of measure experts' verdicts are learned
by; a config may add its own (``[bundles] measure_types``). Pure.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Final

__all__ = [
    "MEASURE_TYPES",
    "UNITS",
    "known_measure_type",
    "known_unit",
    "normalise_unit",
    "unit_vocabulary",
    "unknown_unit",
]

MEASURE_TYPES: Final = {
    "standardisation": "fewer variants: standard products, sizes and details",
    "simplification": "a simpler design or detail for the same function",
    "scope-reduction": "less of something, or a part of the scope left out",
    "material-substitution": "another material or product that does the same job",
    "design-optimisation": "dimensions or quantities optimised by calculation",
    "prefabrication": "made off site instead of on site",
    "reuse": "what exists reused: materials, buildings, designs",
    "procurement": "the contract form, the packaging of contracts, or the competition",
    "phasing": "the work in another order or at another time",
    "deferral": "done later, in a later phase or budget",
    "removal": "taken out altogether",
    "unspecified": "an imported kuttliste named no type",
    "reference_price": "computed by the product from the portfolio's prices, never written",
}
"""Each measure type and what it means (README: *A project bundle*)."""

UNITS: Final = {
    "m2": ("m2", "m²", "m^2", "kvm", "sqm", "kvadratmeter"),
    "m3": ("m3", "m³", "m^3", "kbm", "kubikkmeter"),
    "fm3": ("fm3", "fm³", "pfm3", "pfm³", "faste m3"),
    "lm3": ("lm3", "lm³", "løse m3"),
    "m": ("m", "lm", "meter", "løpemeter", "lopemeter"),
    "stk": ("stk", "pcs", "pc", "ea", "each", "styk", "stykk"),
    "kg": ("kg",),
    "tonn": ("t", "tonn", "tonne", "tonnes"),
    "time": ("time", "timer", "h", "hour", "hours", "tv", "timeverk"),
    "dag": ("dag", "dager", "day", "days", "dv", "dagsverk"),
    "uke": ("uke", "uker", "week", "weeks"),
    "mnd": ("mnd", "måned", "måneder", "month", "months"),
    "år": ("år", "year", "years"),
    "rs": ("rs", "lump sum", "sum", "rund sum"),
    "%": ("%", "prosent", "pst"),
}
"""Each unit and the spellings folded into it. Fast and loose rock or soil (``fm3``, ``lm3``) are
not ``m3``: a cubic metre blasted is not a cubic metre cast. ``%`` is NS 3459's unit of a
post priced as a share (``Prosentsats``), as the tools write it. A config adds units of its own
(``[bundles] units``: an IT project's users or integrations)."""
_ALIASES: Final = {alias: unit for unit, aliases in UNITS.items() for alias in aliases}


def normalise_unit(unit: str | None) -> str | None:
    """One spelling per unit: lower case, spaces and dots dropped, known aliases folded."""
    if unit is None:
        return None
    plain = " ".join(unit.strip().lower().replace(".", "").split())
    if not plain:
        return None
    return _ALIASES.get(plain, _ALIASES.get(plain.replace(" ", ""), plain))


def known_unit(unit: str, extra: Sequence[str] = ()) -> bool:
    folded = normalise_unit(unit)
    return folded in UNITS or folded in {normalise_unit(u) for u in extra}


def unknown_unit(unit: str, extra: Sequence[str] = ()) -> str | None:
    """What to tell the planner of a unit outside the vocabulary and the config's own units
    (``extra``), or None for a known one: its nearest spelling, as a typo usually is one, and
    every unit it may write instead."""
    if known_unit(unit, extra):
        return None
    plain = " ".join(unit.strip().lower().replace(".", "").split())
    spellings = [*_ALIASES, *extra]
    near = difflib.get_close_matches(plain, spellings, n=1, cutoff=0.6)
    hint = ""
    if near:
        meant = _ALIASES.get(near[0], near[0])
        hint = f"did you mean {near[0]!r}" + (f" ({meant})" if meant != near[0] else "") + "? "
    names = ", ".join(dict.fromkeys([*UNITS, *extra]))
    return (
        f"{unit!r} is not a unit the product knows; {hint}write one of {names}, or add it to "
        "[bundles] units"
    )


def _type_key(kind: str) -> str:
    return "-".join(kind.strip().lower().replace("_", "-").split())


def known_measure_type(kind: str, extra: tuple[str, ...] = ()) -> bool:
    """A type of the documented list or of the config's own, spelled with - or _ alike."""
    return _type_key(kind) in {_type_key(k) for k in (*MEASURE_TYPES, *extra)}


def unit_vocabulary() -> str:
    """The vocabulary in one line, for a sentence that names a unit it does not know."""
    return "; ".join(
        f"{unit} ({', '.join(a for a in aliases if a != unit)})" if len(aliases) > 1 else unit
        for unit, aliases in UNITS.items()
    )
