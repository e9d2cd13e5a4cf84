"""A finished project's final cost in its report, against the frames it was steered by."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._markdown import md as _md
from .frame_report import kroner as _kr

if TYPE_CHECKING:  # the pipeline package imports agent_framework; the outputs never do
    from portfolio_optimiser.pipeline.outcome import RunResult

    from .report import Redactor

__all__ = ["outcome_section"]


def outcome_section(result: RunResult, red: Redactor) -> list[str]:
    """A finished project's final cost against the frames it was steered by."""
    found = result.backtest
    if found is None:
        return []
    basis = (
        "the P50 and P85 the project states"
        if found.basis == "stated"
        else "the simulated frame's P50 and P85 (the project does not state both)"
    )

    def against(name: str, frame: float) -> str:
        word = "above" if found.final_cost_nok > frame else "within"
        share = (found.final_cost_nok - frame) / frame if frame else 0.0
        return f"{word} its {name} ({_kr(frame)} NOK, {share:+.1%})"

    when = (
        f", completed {_md(red.text(found.completed, 'a completion date'))}"
        if found.completed
        else ""
    )
    return [
        "## The outcome",
        "",
        f"The project finished at **{_kr(found.final_cost_nok)} NOK**{when}: "
        f"{against('P85', found.p85_nok)} and {against('P50', found.p50_nok)}, judged against "
        f"{basis}.",
        "",
    ]
