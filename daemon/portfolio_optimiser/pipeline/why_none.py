"""Why a run found no candidate, in the reader's words: a run that says only "none" leaves the
planner to guess whether the product looked at all.

Pure: from the project, its reference snapshot, the approvals the learning store holds and the
size of the portfolio. Names each source of candidates the local rules have (the project's own
list, what experts approved elsewhere, the portfolio's prices) and why it gave nothing here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from portfolio_optimiser.context.line_references import ProjectReferences
from portfolio_optimiser.context.models import Project

__all__ = ["why_none"]


def why_none(
    project: Project, references: ProjectReferences, approved: Iterable[Any], *, others: int
) -> tuple[str, ...]:
    """One sentence per source of candidates, saying why it proposed nothing."""
    reasons = []
    if not project.measure_options:
        reasons.append(
            "the bundle lists no measures of its own (no `type: measure-option` concept and no "
            "kuttliste)"
        )
    applies = [
        v
        for v in approved
        if v.key.affected_codes
        and set(v.key.affected_codes) <= project.codes
        and v.key.project_id != project.id
    ]
    if not applies:
        reasons.append("no measure experts approved in another project is on this project's codes")
    priced = [
        line for line in project.cost_lines if line.quantity and line.unit_price_nok and line.unit
    ]
    if not priced:
        reasons.append(
            "none of its lines gives a quantity, a unit and a unit price, which the portfolio's "
            "reference prices compare"
        )
    elif not references.lines:
        reasons.append(
            f"none of its {len(priced)} priced line(s) has a reference yet: one needs "
            f"{references.min_comparables} other projects pricing the same code in the same unit, "
            f"and the portfolio has {others} other project(s)"
        )
    else:
        reasons.append(
            f"its {len(references.lines)} line(s) with a reference were compared with the "
            "portfolio's prices, and none lies far enough above the price expected here to be "
            "flagged (`[reference] threshold`, `min_saving_nok`, `min_share`)"
        )
    return tuple(reasons)
