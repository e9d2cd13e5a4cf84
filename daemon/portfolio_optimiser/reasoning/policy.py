"""The consultation policy: how many advisors an uncertainty deserves, and which ones.

Decides: consult (and whom), decide locally (with the structured local review), or reuse a standing
conclusion. Pure: mode, materiality, confidence, requested capabilities and the advisors' states in;
a plan with a reason for every advisor out. It names capabilities only, never an advisor, vendor or
model, and it never counts votes: there is no quorum and no majority anywhere in it.

Budget (number of advisors) by mode and materiality; ``high`` confidence lowers it by one:

| mode | trivial | low | material | high | critical |
|---|---|---|---|---|---|
| ci | 0 | 0 | 0 | 0 | 0 |
| fast | 0 | 0 | 0 | 1 | 1 |
| standard | 0 | 0 | 1 | 2 | 2 |
| offline | 0 | 0 | 1 | 2 | 2 |
| strict | 0 | 0 | 1 | 2 | 3 |

Selection is greedy and explained: next comes the advisor that covers the most requested
capabilities not yet covered, then one reached through an adapter not yet chosen (two answers from
one source are one opinion twice), then declaration order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from .availability import AdvisorState
from .modes import Mode

__all__ = [
    "BUDGET",
    "LOCAL_REVIEW",
    "Confidence",
    "Excluded",
    "Materiality",
    "PlanOutcome",
    "PlanRequest",
    "ReviewPlan",
    "Selected",
    "budget",
    "capacity",
    "plan",
]


class Materiality(StrEnum):
    TRIVIAL = "trivial"
    LOW = "low"
    MATERIAL = "material"
    HIGH = "high"
    CRITICAL = "critical"

    @property
    def is_material(self) -> bool:
        return self in {Materiality.MATERIAL, Materiality.HIGH, Materiality.CRITICAL}


class Confidence(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class PlanOutcome(StrEnum):
    CONSULT = "consult"
    DECIDE_LOCALLY = "decide_locally"
    REUSE_PRIOR = "reuse_prior"


_M = Materiality
BUDGET: Final[dict[Mode, dict[Materiality, int]]] = {
    Mode.CI: {_M.TRIVIAL: 0, _M.LOW: 0, _M.MATERIAL: 0, _M.HIGH: 0, _M.CRITICAL: 0},
    Mode.FAST: {_M.TRIVIAL: 0, _M.LOW: 0, _M.MATERIAL: 0, _M.HIGH: 1, _M.CRITICAL: 1},
    Mode.STANDARD: {_M.TRIVIAL: 0, _M.LOW: 0, _M.MATERIAL: 1, _M.HIGH: 2, _M.CRITICAL: 2},
    Mode.OFFLINE: {_M.TRIVIAL: 0, _M.LOW: 0, _M.MATERIAL: 1, _M.HIGH: 2, _M.CRITICAL: 2},
    Mode.STRICT: {_M.TRIVIAL: 0, _M.LOW: 0, _M.MATERIAL: 1, _M.HIGH: 2, _M.CRITICAL: 3},
}

LOCAL_REVIEW: Final[tuple[str, ...]] = (
    "state the hypothesis and its strongest alternative",
    "list every assumption with the evidence behind it",
    "name what would falsify the hypothesis",
    "run the smallest experiment that tells the two apart",
    "record the conclusion with its evidence, rejected alternatives, risks and a validation plan",
)


@dataclass(frozen=True)
class PlanRequest:
    materiality: Materiality
    capabilities: tuple[str, ...]
    confidence: Confidence = Confidence.MEDIUM


@dataclass(frozen=True)
class Selected:
    advisor: str
    adapter: str
    covers: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class Excluded:
    advisor: str
    reason: str


@dataclass(frozen=True)
class ReviewPlan:
    outcome: PlanOutcome
    mode: Mode
    budget: int
    reason: str
    selected: tuple[Selected, ...] = ()
    excluded: tuple[Excluded, ...] = ()
    local_review: tuple[str, ...] = ()
    reuse: str | None = None
    uncovered: tuple[str, ...] = field(default=())
    """Requested capabilities no selected advisor offers."""


def budget(mode: Mode, materiality: Materiality, confidence: Confidence = Confidence.MEDIUM) -> int:
    base = BUDGET[mode][materiality]
    return max(0, base - 1) if confidence is Confidence.HIGH else base


def capacity(states: Sequence[AdvisorState], capabilities: Sequence[str]) -> dict[str, int]:
    """How many available advisors offer each capability."""
    return {
        cap: sum(1 for s in states if s.available and cap in s.capabilities) for cap in capabilities
    }


def plan(
    request: PlanRequest,
    mode: Mode,
    states: Sequence[AdvisorState],
    *,
    standing_conclusion: str | None = None,
) -> ReviewPlan:
    """The review plan; every advisor is either selected (with why) or excluded (with a reason)."""
    limit = budget(mode, request.materiality, request.confidence)
    requested = tuple(dict.fromkeys(request.capabilities))
    if standing_conclusion is not None:
        return ReviewPlan(
            outcome=PlanOutcome.REUSE_PRIOR,
            mode=mode,
            budget=limit,
            reason=f"conclusion {standing_conclusion} stands for this subject and no new evidence was declared",
            excluded=tuple(
                Excluded(s.advisor, "a standing conclusion answers this subject") for s in states
            ),
            reuse=standing_conclusion,
            uncovered=requested,
        )

    excluded: list[Excluded] = []
    pool: list[AdvisorState] = []
    for state in states:
        if not state.available:
            excluded.append(Excluded(state.advisor, f"{state.status}: {state.reason}"))
        elif not set(requested) & set(state.capabilities):
            excluded.append(Excluded(state.advisor, f"offers none of {', '.join(requested)}"))
        else:
            pool.append(state)

    selected: list[Selected] = []
    covered: set[str] = set()
    adapters: set[str] = set()
    order = {state.advisor: i for i, state in enumerate(states)}
    while pool and len(selected) < limit:
        best = max(
            pool,
            key=lambda s: (
                len(set(s.capabilities) & (set(requested) - covered)),
                s.adapter not in adapters,
                -order[s.advisor],
            ),
        )
        pool.remove(best)
        new = [c for c in requested if c in best.capabilities and c not in covered]
        offered = tuple(c for c in requested if c in best.capabilities)
        reasons = [
            f"covers {', '.join(new)}" if new else f"a second opinion on {', '.join(offered)}"
        ]
        reasons.append(
            f"adapter {best.adapter} not yet chosen"
            if best.adapter not in adapters
            else f"adapter {best.adapter} again"
        )
        reasons.append(f"declared {order[best.advisor] + 1}.")
        if best.recovering:
            reasons.append("recovering: this answer tests the circuit")
        selected.append(Selected(best.advisor, best.adapter, offered, "; ".join(reasons)))
        covered.update(offered)
        adapters.add(best.adapter)
    excluded.extend(
        Excluded(s.advisor, f"the budget of {limit} for {request.materiality} is spent")
        for s in pool
    )
    excluded.sort(key=lambda e: order[e.advisor])
    uncovered = tuple(c for c in requested if c not in covered)

    if selected:
        return ReviewPlan(
            outcome=PlanOutcome.CONSULT,
            mode=mode,
            budget=limit,
            reason=f"{request.materiality} uncertainty in mode {mode} earns {limit} independent review(s)",
            selected=tuple(selected),
            excluded=tuple(excluded),
            uncovered=uncovered,
        )
    if limit == 0:
        why = f"{request.materiality} uncertainty (confidence {request.confidence}) in mode {mode} needs no independent review"
    else:
        why = f"no available advisor offers {', '.join(requested)}; the run reviews locally"
    return ReviewPlan(
        outcome=PlanOutcome.DECIDE_LOCALLY,
        mode=mode,
        budget=limit,
        reason=why,
        excluded=tuple(excluded),
        local_review=LOCAL_REVIEW,
        uncovered=uncovered,
    )
