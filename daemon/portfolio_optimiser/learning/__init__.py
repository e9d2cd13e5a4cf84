"""The learning layer: expert verdicts kept, keyed, distilled into insights and promoted (ExpeL).

Like ``context/``, it imports no model framework (``agent_framework``) and no ``mcp``: what the
experts taught is plain data and deterministic code, the same for any agent stack. The fold
(:func:`fold`) is the only path from verdicts into a prompt; promotion (:func:`promote_verdict`) is
the only path from a verdict into the curated wiki.
"""

from __future__ import annotations

from .insights import (
    MAX_INSIGHTS,
    Insight,
    InsightList,
    derive_insights,
    fold,
    relevant,
    retrieve,
    similarity,
)
from .promotion import PromotionRefused, promote_verdict, retract_verdict
from .verdict_store import (
    CandidateKey,
    HistoryEntry,
    LearnedVerdict,
    LoadReport,
    VerdictFrontmatterError,
    VerdictStore,
    key_from_summary,
    load_verdicts_from_dir,
    seed_store_from_bundle,
)

__all__ = [
    "MAX_INSIGHTS",
    "CandidateKey",
    "HistoryEntry",
    "Insight",
    "InsightList",
    "LearnedVerdict",
    "LoadReport",
    "PromotionRefused",
    "VerdictFrontmatterError",
    "VerdictStore",
    "derive_insights",
    "fold",
    "key_from_summary",
    "load_verdicts_from_dir",
    "promote_verdict",
    "relevant",
    "retract_verdict",
    "retrieve",
    "seed_store_from_bundle",
    "similarity",
]
