"""Where a candidate stands after the two falsifiers (DESIGN §4 step 4): is an expert's verdict
asked on it, and does its saving count as validated.

Decides those two things, once, from the two words a candidate carries: the validator's
(``accepted`` / ``rejected``) and the checker's (``approved``, ``rejected``, ``no_verdict``,
``not_run``). The run (``pipeline.outcome.CandidateRun``), the file it leaves
(``outputs.proposals``) and every reader of either ask these functions, so a verdict template,
the ledger's open candidates, the report's total and the portfolio page cannot disagree.

- **awaits_verdict**: the validator accepted it. The checker's word does not enter: models make
  the review deeper but never decide (§1), and a checker that opposes a validated candidate opens
  a disagreement that the expert's verdict resolves (§5), so the expert is asked, with the
  checker's reason in the template. A candidate the validator rejected is never asked: its numbers
  did not hold, so there is nothing to sign off. (An expert who decided it already is not asked
  twice; that is the run's knowledge, not the candidate's.)
- **validated**: the validator accepted it and the checker did not reject it — "an explicit
  reject blocks an otherwise valid candidate (a missing marker fails open)" (§4 step 4). Only these
  count in the validated saving: the report's total, its chart and the portfolio page.

| validator | checker | awaits_verdict | validated |
|---|---|---|---|
| accepted | approved | yes | yes |
| accepted | no_verdict | yes | yes |
| accepted | not_run | yes | yes |
| accepted | rejected | yes | no |
| rejected | not_run | no | no |
| rejected | approved | no | no |
"""

from __future__ import annotations

from typing import Literal

__all__ = ["CheckerWord", "ValidatorWord", "awaits_verdict", "validated"]

ValidatorWord = Literal["accepted", "rejected"]
CheckerWord = Literal["approved", "rejected", "no_verdict", "not_run"]


def awaits_verdict(validator: ValidatorWord) -> bool:
    """An expert's verdict is asked on the candidate: the validator accepted it."""
    return validator == "accepted"


def validated(validator: ValidatorWord, checker: CheckerWord) -> bool:
    """The candidate's saving counts: accepted by the validator, not blocked by the checker."""
    return validator == "accepted" and checker != "rejected"
