"""The table both benchmarks print: one row per measure, its target, what was measured, met or not."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

__all__ = ["HEADER", "Row", "render_table", "report"]

HEADER: Final = "| measure | target | measured | ok |"


@dataclass(frozen=True)
class Row:
    measure: str
    target: str
    measured: str
    ok: bool

    def markdown(self) -> str:
        return f"| {self.measure} | {self.target} | {self.measured} | {'yes' if self.ok else '**NO**'} |"


def render_table(rows: Sequence[Row]) -> str:
    return "\n".join([HEADER, "|---|---|---|---|", *(row.markdown() for row in rows)])


def report(rows: Sequence[Row], scale_name: str, elapsed_s: float) -> int:
    """Print the table and the verdict line; the exit status is 1 when any target was missed."""
    print(render_table(rows))
    missed = [row.measure for row in rows if not row.ok]
    print(
        f"\n{scale_name} run in {elapsed_s:.1f} s; "
        + (f"missed: {'; '.join(missed)}" if missed else "every target met")
    )
    return 1 if missed else 0
