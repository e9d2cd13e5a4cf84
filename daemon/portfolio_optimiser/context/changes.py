"""What changed between two versions of a project's estimate: the lines a revision added,
removed or repriced, by their code (an account, or an imported post's number).

Pure: two projections in, a sorted list of changes out. A figure counts as changed only when it
differs beyond rounding to the øre; a line's text or its source row moving is no change.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Final, Literal

from .models import CostLine, Project

__all__ = ["LineChange", "line_changes"]

_FIGURES: Final = (
    ("amount_nok", "amount"),
    ("quantity", "quantity"),
    ("unit", "unit"),
    ("unit_price_nok", "unit price"),
)


@dataclass(frozen=True)
class LineChange:
    code: str
    kind: Literal["added", "removed", "changed"]
    what: str
    """Which figures changed (``amount, unit price``), or the line's title when added/removed."""
    before: str
    now: str


def _show(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, int | float):
        return f"{Decimal(str(value)).normalize():f}"
    return str(value)


def _differs(a: object, b: object) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return abs(Decimal(str(a)) - Decimal(str(b))) >= Decimal("0.005")
    return a != b


def _line(line: CostLine) -> str:
    return ", ".join(
        f"{label} {_show(getattr(line, name))}"
        for name, label in _FIGURES
        if getattr(line, name) is not None
    )


def line_changes(previous: Project, current: Project) -> list[LineChange]:
    """The lines ``current`` added, removed or changed against ``previous``, by code."""
    before = {line.code: line for line in previous.cost_lines}
    now = {line.code: line for line in current.cost_lines}
    found = []
    for code in sorted(before.keys() | now.keys()):
        old, new = before.get(code), now.get(code)
        if old is None and new is not None:
            found.append(LineChange(code, "added", new.title or code, "—", _line(new)))
        elif new is None and old is not None:
            found.append(LineChange(code, "removed", old.title or code, _line(old), "—"))
        elif old is not None and new is not None:
            moved = [
                (name, label)
                for name, label in _FIGURES
                if _differs(getattr(old, name), getattr(new, name))
            ]
            if moved:
                found.append(
                    LineChange(
                        code,
                        "changed",
                        ", ".join(label for _n, label in moved),
                        ", ".join(f"{label} {_show(getattr(old, n))}" for n, label in moved),
                        ", ".join(f"{label} {_show(getattr(new, n))}" for n, label in moved),
                    )
                )
    return found
