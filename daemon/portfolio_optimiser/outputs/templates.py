"""Verdict templates: the pre-filled JSON an expert edits by hand (DESIGN §3, "Verdict file").

Decides: which candidates get a template (only those awaiting a verdict, ``context.standing``:
the deterministic validator accepted them, whatever the checker said — a rejected candidate's
numbers did not hold, so there is nothing to sign off), what the template carries (every field of
``verdict.schema.json``, an empty decision the expert must choose, and a read-only summary of the
candidate) and its exact bytes (indent 2, UTF-8, trailing newline, field order as the schema
lists them so the file reads top to bottom). The id is copied verbatim: it is minted from the
candidate's key and the learning store finds the candidate by it.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Final

from portfolio_optimiser.context.signature import sign_command

from .report import Redactor

if TYPE_CHECKING:  # the pipeline package imports agent_framework; the outputs never do
    from portfolio_optimiser.pipeline.outcome import CandidateRun

__all__ = ["VERDICT_SCHEMA", "dump_json", "template_for", "template_name"]

VERDICT_SCHEMA: Final = "verdict.schema.json"
_CANDIDATE_ID: Final = re.compile(r"^c-[0-9a-f]{16}$")


def template_name(candidate_id: str) -> str:
    """The template's file name; the id is checked first because it becomes a path."""
    if not _CANDIDATE_ID.fullmatch(candidate_id):
        raise ValueError(f"{candidate_id!r} is not a candidate id; it cannot name a file")
    return f"{candidate_id}.json"


def template_for(
    candidate_run: CandidateRun, *, schema_ref: str, redactor: Redactor | None = None
) -> dict[str, Any]:
    """The verdict template for one validator-accepted candidate, every string scrubbed.

    ``schema_ref`` is written as ``$schema`` verbatim (the writer makes it correct from
    ``inbox/verdicts/``, where the expert saves the file); an empty one leaves ``$schema`` out.
    Raises ``ValueError`` for a candidate the validator rejected.
    """
    run = candidate_run
    cand = run.candidate
    if not run.awaits_verdict:
        raise ValueError(f"{cand.id} was rejected by the validator; it gets no verdict template")
    template_name(cand.id)
    red = redactor if redactor is not None else Redactor()
    where = f"the verdict template of {cand.id}"
    summary: dict[str, Any] = {
        "project_id": cand.project_id,
        "title": cand.title,
        "affected_codes": list(cand.affected_codes),
        "measure_type": cand.measure_type,
        # The raw number as proposed: the expert compares it with adjusted_saving_nok.
        "claimed_saving_nok": cand.claimed_saving_nok,
        # A risk claims nothing; what the expert judges is the sum at stake.
        **({"at_stake_nok": cand.at_stake_nok} if cand.is_risk else {}),
        **({"unit": cand.unit} if cand.unit else {}),
        **({"grade": cand.grade} if cand.grade else {}),
        "consequence": cand.rationale,
        **({"decide_by": cand.decide_by} if cand.decide_by else {}),
        "validator": run.validator.outcome,
        "checker": run.checker.outcome,
        "checker_reason": run.checker.reason,
        "evidence": list(cand.evidence),
    }
    template: dict[str, Any] = {}
    if schema_ref:
        template["$schema"] = schema_ref
    template |= {
        "id": cand.id,
        "decision": "",
        "rationale": "",
        "reviewer": "",
        "realization_rate": None,
        "adjusted_saving_nok": None,
        "decided_at": None,
        "how_to_sign": (
            "Where approvals must be signed: save this file into inbox/verdicts/, then, in that "
            f"folder, run `{sign_command(f'{cand.id}.json')}` (your own key); reviewer is the name "
            "your key is listed under in the workspace's config/allowed_signers. Sign again after "
            "every edit."
        ),
        "candidate": summary,
    }
    scrubbed: dict[str, Any] = red.value(template, where)
    return scrubbed


def dump_json(document: Any) -> bytes:
    """Pretty, stable JSON: indent 2, UTF-8 (not \\u escapes, so people can read it), newline."""
    text = json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False)
    return (text + "\n").encode("utf-8")
