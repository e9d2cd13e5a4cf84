"""Gated promotion: an approved expert verdict becomes a curated ``type: verdict`` wiki page.

Decides: what may enter the curated wiki, what the page says, and how it leaves. The gate is
fail-closed: a decision other than ``approved`` / ``approved_with_adjustment`` raises
:class:`PromotionRefused` and writes and links nothing — only human-approved knowledge reaches the
wiki, never raw agent output. So does a verdict without a complete candidate key: a page without
its own key would be read as the candidate of whatever bundle it sits in (the S3.2 collapse).

The page carries its own key (``affected_codes``, ``measure_type``, and ``claimed_saving_nok`` as
the literal written, since the id hashes it) and a provenance stamp (who, which run, when; the time
is passed in, there is no wall-clock default). The learning signal lives only in the body. The
index link and the log entry are neutral (the id, never the rationale): the index is context, and
a descriptive label would carry the signal into every prompt outside the fold.

Never deletes: a withdrawn approval deprecates its page (:func:`retract_verdict`).
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from portfolio_optimiser.context.frontmatter import read_concept
from portfolio_optimiser.context.signature import Proof
from portfolio_optimiser.context.verdict import Verdict
from portfolio_optimiser.context.wiki import link_in_index, prepend_log, write_concept_file
from portfolio_optimiser.errors import UserError

from .verdict_store import CandidateKey, VerdictFrontmatterError, key_from_summary

__all__ = ["PROMOTER", "PromotionRefused", "promote_verdict", "retract_verdict"]

PROMOTER: Final = "portfolio-optimiser/promotion"
VERDICTS_DIR: Final = "verdicts"
_CANDIDATE_ID = re.compile(r"^c-[0-9a-f]{16}$")


class PromotionRefused(UserError):
    """A verdict may not enter the wiki; ``str(exc)`` is the one sentence saying why."""


def _page_rel(candidate_id: str, error: type[Exception]) -> str:
    # The id becomes a file name, so only the minted shape is allowed (no path, no dots).
    if not _CANDIDATE_ID.match(candidate_id):
        raise error(
            f"{candidate_id!r} is not a candidate id (c- and 16 hex digits); copy it verbatim "
            "from the verdict template"
        )
    return f"{VERDICTS_DIR}/{candidate_id}.md"


def _day(at: str) -> str:
    """The log day of ``at``; checked before anything is written, so a bad stamp writes nothing."""
    try:
        datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{at!r} is not a date and time; pass e.g. 2026-11-30T12:00:00Z") from None
    if not re.match(r"^\d{4}-\d{2}-\d{2}", at):
        raise ValueError(f"{at!r} does not start with a YYYY-MM-DD date")
    return at[:10]


def _complete_key(verdict: Verdict, key: CandidateKey | None) -> CandidateKey:
    if key is None:
        try:
            key = key_from_summary(verdict.candidate, where=f"verdict {verdict.id} candidate")
        except VerdictFrontmatterError as exc:
            raise PromotionRefused(str(exc)) from None
    if not (key.affected_codes and key.measure_type and key.saving_literal is not None):
        raise PromotionRefused(
            f"verdict {verdict.id} carries no candidate key (affected_codes, measure_type, "
            "claimed_saving_nok); keep the template's candidate summary or pass the key, so the "
            "page does not pose as another bundle's candidate"
        )
    return key


def _decide_by(verdict: Verdict) -> str | None:
    found = (verdict.candidate or {}).get("decide_by")
    return found if isinstance(found, str) and found.strip() else None


def promote_verdict(
    verdict: Verdict,
    *,
    wiki_root: Path,
    run_id: str,
    at: str,
    key: CandidateKey | None = None,
    signed: Proof | None = None,
) -> Path:
    """Write ``wiki_root/verdicts/<id>.md``, link it from the index, log it; return the page.

    ``key`` defaults to the key of the verdict's candidate summary. A second approval of the same
    candidate replaces the page (one curated page per candidate) and is logged as an update.
    """
    if not verdict.approves:
        raise PromotionRefused(
            f"verdict {verdict.id} is {verdict.decision.value}; only approved or "
            "approved_with_adjustment verdicts are promoted into the wiki"
        )
    rel = _page_rel(verdict.id, PromotionRefused)
    day = _day(at)
    if not run_id.strip():
        raise ValueError("run_id is empty; pass the id of the run whose candidate was judged")
    key = _complete_key(verdict, key)
    decide_by = _decide_by(verdict)
    frontmatter: dict[str, Any] = {
        "type": "verdict",
        "title": f"Verdict {verdict.id}",  # neutral: the signal is in the body only
        "candidate_id": verdict.id,
        "decision": verdict.decision.value,
        "reviewer": verdict.reviewer,
        "realization_rate": verdict.realization_rate,
        "adjusted_saving_nok": verdict.adjusted_saving_nok,
        "decided_at": verdict.decided_at,
        "project_id": key.project_id,
        "affected_codes": list(key.affected_codes),
        "measure_type": key.measure_type,
        "claimed_saving_nok": key.saving_literal,  # the literal as written, never normalised
        **({"unit": key.unit} if key.unit else {}),
        # The measure's decision point, so what is learned from the page still carries it once
        # the verdict file has left the inbox.
        **({"decide_by": decide_by} if decide_by else {}),
        "verified": {"by": f"human:{verdict.reviewer}", "at": at},
        **({"signed": signed.to_json()} if signed is not None else {}),
        "generated": {"by": PROMOTER, "at": at},
        "promoted_from_run": run_id,
        "status": "stable",
    }
    page = wiki_root / rel
    existed = page.exists()
    write_concept_file(page, frontmatter, verdict.rationale)
    link_in_index(wiki_root, rel)
    prepend_log(
        wiki_root,
        day=day,
        kind="Update" if existed else "Creation",
        text=f"{rel} promoted from run {run_id}, verified by human:{verdict.reviewer}"
        + (f", signed with {signed.fingerprint}" if signed is not None else ""),
    )
    return page


def retract_verdict(candidate_id: str, *, wiki_root: Path, at: str, reason: str) -> bool:
    """Deprecate a promoted page (content kept, never deleted) and log it; idempotent.

    Returns whether the page changed: ``False`` when there is no page or it is already deprecated.
    """
    rel = _page_rel(candidate_id, ValueError)
    day = _day(at)
    page = wiki_root / rel
    if not page.is_file():
        return False
    concept = read_concept(page, rel)
    if concept.frontmatter.get("status") == "deprecated":
        return False
    frontmatter = {
        **concept.frontmatter,
        "status": "deprecated",
        "deprecated": {"at": at, "reason": reason},
    }
    write_concept_file(page, frontmatter, concept.body)
    prepend_log(wiki_root, day=day, kind="Deprecation", text=f"{rel} deprecated: {reason}")
    return True
