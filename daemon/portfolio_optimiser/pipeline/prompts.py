"""What the agents are told. The hypothesis prompt is built from exactly three things: the
navigated, size-bounded bundle context, the learning fold, and (on a retry) the validator's latest
rejection reason. Nothing else reaches it — in particular no verdict except through the fold, and
never an earlier attempt's proposal.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CHECKER_INSTRUCTIONS",
    "MAKER_INSTRUCTIONS",
    "PROPOSER_INSTRUCTIONS",
    "checker_task",
    "hypothesis_prompt",
]

PROPOSER_INSTRUCTIONS: Final = (
    "You find cost savings inside one project. Propose concrete savings measures, each on cost "
    "lines that exist (use their codes exactly), with a saving in NOK that the affected lines can "
    "carry, quantity and unit price when the saving is a product, a short rationale, and evidence: "
    "bundle paths of the concepts the figures come from. Every number will be recomputed by a "
    "deterministic validator. Use the tools to open what the context lists but does not show."
)
MAKER_INSTRUCTIONS: Final = (
    "You proposed the savings measure under review. Defend it briefly with its figures and evidence; "
    "concede a point the checker proves."
)
CHECKER_INSTRUCTIONS: Final = (
    "You check the reasoning of a proposed savings measure whose numbers a validator already "
    "recomputed. Look for double counting with other measures, consequences for function, benefit "
    "and operating cost, and whether the decision point is still ahead. End your turn with exactly "
    "one line: 'VERDICT: APPROVE' or 'VERDICT: REJECT — <reason>'."
)


def hypothesis_prompt(
    *, context: str, fold: str, max_candidates: int, prior_rejection: str | None = None
) -> str:
    parts = [
        f"Propose up to {max_candidates} savings measures for the project below.",
        "",
        context.rstrip("\n"),
    ]
    if fold.strip():
        parts += ["", fold.rstrip("\n")]
    if prior_rejection:
        parts += [
            "",
            "Your previous attempt was rejected by the deterministic validator for this reason; correct it:",
            prior_rejection,
        ]
    return "\n".join(parts) + "\n"


def checker_task(*, candidate_summary: str, receipt_summary: str) -> str:
    return (
        "Review this savings measure.\n\n"
        f"{candidate_summary}\n\nValidator receipt (numbers recomputed):\n{receipt_summary}\n"
    )
