"""The validator's decision: accepted with a receipt, or rejected with the rule and the reason."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "RECOMPUTED_SAVING",
    "Accepted",
    "Decision",
    "Receipt",
    "Rejected",
    "Rule",
    "RuleCheck",
    "RuleOutcome",
    "line_recomputed",
]

RECOMPUTED_SAVING: Final = "recomputed_saving_nok"
"""The ``arithmetic`` figure given exactly when the saving itself was recomputed (quantity × unit
price): a passed check without it had nothing to recompute the saving from, and says so."""


def line_recomputed(code: str) -> str:
    """The ``arithmetic`` figure of cost line ``code``'s own quantity × unit price."""
    return f"line_{code}_recomputed_nok"


class Rule(StrEnum):
    """The validator's rules, in the order they are checked."""

    CODES_EXIST = "codes_exist"
    SAVING_POSITIVE = "saving_positive"
    SAVING_WITHIN_COST = "saving_within_cost"
    ARITHMETIC = "arithmetic"
    NO_DOUBLE_COUNTING = "no_double_counting"
    EVIDENCE_INSIDE_BUNDLE = "evidence_inside_bundle"
    FRAME_REPRODUCED = "frame_reproduced"


class RuleOutcome(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    """Could not be checked because an earlier rule failed (e.g. no cost to compare with)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RuleCheck(_Frozen):
    rule: Rule
    outcome: RuleOutcome
    detail: str
    figures: dict[str, str] = Field(default_factory=dict)
    """Recomputed numbers, as decimal strings, so a reader can redo the check by hand."""

    @property
    def recomputed_saving(self) -> bool:
        """Whether this check recomputed the claimed saving itself, not only the lines."""
        return self.rule is Rule.ARITHMETIC and RECOMPUTED_SAVING in self.figures


class Receipt(_Frozen):
    candidate_id: str
    project_id: str
    checks: tuple[RuleCheck, ...]

    def check(self, rule: Rule) -> RuleCheck:
        return next(c for c in self.checks if c.rule is rule)


class Accepted(_Frozen):
    outcome: Literal["accepted"] = "accepted"
    candidate_id: str
    receipt: Receipt


class Rejected(_Frozen):
    outcome: Literal["rejected"] = "rejected"
    candidate_id: str
    rule: Rule
    reason: str
    receipt: Receipt


Decision = Annotated[Accepted | Rejected, Field(discriminator="outcome")]
