"""Step 8: gated promotion of an approved verdict into the curated wiki, and its retraction.

The load-bearing trio: the gate refuses a non-approved verdict (red without the gate); an approved
verdict is navigable (red when ``link_in_index`` is detached); the promoted signal stays out of
``bundle_context`` (red when a descriptive index label leaks it) yet reaches the fold.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest

from portfolio_optimiser.context.frontmatter import read_concept
from portfolio_optimiser.context.models import CostLine, MeasureOption, Project
from portfolio_optimiser.context.navigate import navigate_bundle
from portfolio_optimiser.context.render import bundle_context
from portfolio_optimiser.context.verdict import Verdict, parse_verdict
from portfolio_optimiser.learning import (
    CandidateKey,
    PromotionRefused,
    fold,
    promote_verdict,
    retract_verdict,
    seed_store_from_bundle,
)

AT = "2026-11-30T12:00:00Z"
MARKER = "QZ-4471"  # exists nowhere but in the rationale
KEY = CandidateKey("lillevik-school", ("02.3",), "standardisation", "798000")
CANDIDATE_ID = KEY.candidate_id() or ""
PROJECT = Project(
    id="lillevik-school",
    name="Lillevik skole",
    cost_lines=(CostLine(code="02.3", amount_nok=5_000_000),),
    measure_options=(
        MeasureOption(
            id="k-01",
            measure_type="standardisation",
            affected_codes=("02.3",),
            estimated_saving_nok=798000,
        ),
    ),
)


def verdict(decision: str = "approved", **changes: Any) -> Verdict:
    raw: dict[str, Any] = {
        "id": CANDIDATE_ID,
        "decision": decision,
        "rationale": f"The framework agreement {MARKER} holds the standard unit prices. Checked.",
        "reviewer": "KE",
        "realization_rate": 0.85,
        "decided_at": "2026-11-29T09:00:00Z",
        "candidate": {
            "project_id": KEY.project_id,
            "affected_codes": list(KEY.affected_codes),
            "measure_type": KEY.measure_type,
            "claimed_saving_nok": 798000,
        },
    }
    raw.update(changes)
    if raw["candidate"] is None:  # the schema has no null summary: None means "deleted"
        del raw["candidate"]
    return parse_verdict(json.dumps(raw).encode(), "v.json")


def make_wiki(tmp_path: Path) -> Path:
    wiki = tmp_path / "wiki"
    wiki.mkdir(parents=True)
    (wiki / "index.md").write_text("# Wiki\n\nCurated knowledge.\n", encoding="utf-8")
    return wiki


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


# --- the trio -----------------------------------------------------------------------------------


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    "refused",
    [verdict("rejected"), verdict("rejected", rationale="No.", realization_rate=None)],
    ids=["rejected", "rejected-terse"],
)
def test_the_gate_refuses_a_non_approved_verdict_and_writes_nothing(
    tmp_path: Path, refused: Verdict
) -> None:
    wiki = make_wiki(tmp_path)
    before = snapshot(wiki)
    with pytest.raises(PromotionRefused, match="only approved or approved_with_adjustment"):
        promote_verdict(refused, wiki_root=wiki, run_id="run-a", at=AT)
    assert snapshot(wiki) == before


@pytest.mark.loadbearing
def test_an_approved_verdict_is_reachable_by_navigation(tmp_path: Path) -> None:
    wiki = make_wiki(tmp_path)
    page = promote_verdict(verdict(), wiki_root=wiki, run_id="run-a", at=AT)
    assert page == wiki / "verdicts" / f"{CANDIDATE_ID}.md"
    reached = [c.rel for c in navigate_bundle(wiki).concepts]
    assert f"verdicts/{CANDIDATE_ID}.md" in reached


@pytest.mark.loadbearing
def test_the_promoted_signal_stays_out_of_bundle_context_but_reaches_the_fold(
    tmp_path: Path,
) -> None:
    wiki = make_wiki(tmp_path)
    promote_verdict(verdict(), wiki_root=wiki, run_id="run-a", at=AT)
    assert MARKER not in bundle_context(wiki)
    assert MARKER not in (wiki / "index.md").read_text(encoding="utf-8")
    assert MARKER not in (wiki / "log.md").read_text(encoding="utf-8")
    assert MARKER in fold(seed_store_from_bundle(wiki), PROJECT)


# --- the page -----------------------------------------------------------------------------------


def test_the_page_carries_its_key_and_a_provenance_stamp(tmp_path: Path) -> None:
    wiki = make_wiki(tmp_path)
    page = promote_verdict(verdict(), wiki_root=wiki, run_id="run-a", at=AT)
    concept = read_concept(page, "p")
    assert concept.frontmatter == {
        "type": "verdict",
        "title": f"Verdict {CANDIDATE_ID}",
        "candidate_id": CANDIDATE_ID,
        "decision": "approved",
        "reviewer": "KE",
        "realization_rate": 0.85,
        "adjusted_saving_nok": None,
        "decided_at": "2026-11-29T09:00:00Z",
        "project_id": "lillevik-school",
        "affected_codes": ["02.3"],
        "measure_type": "standardisation",
        "claimed_saving_nok": "798000",
        "verified": {"by": "human:KE", "at": AT},
        "generated": {"by": "portfolio-optimiser/promotion", "at": AT},
        "promoted_from_run": "run-a",
        "status": "stable",
    }
    assert MARKER in concept.body


def test_the_timestamp_is_a_required_keyword_without_a_clock_default() -> None:
    parameter = inspect.signature(promote_verdict).parameters["at"]
    assert parameter.kind is inspect.Parameter.KEYWORD_ONLY
    assert parameter.default is inspect.Parameter.empty


def test_the_same_inputs_write_the_same_bytes(tmp_path: Path) -> None:
    first, second = make_wiki(tmp_path / "1"), make_wiki(tmp_path / "2")
    for wiki in (first, second):
        promote_verdict(verdict(), wiki_root=wiki, run_id="run-a", at=AT)
    assert snapshot(first) == snapshot(second)


def test_an_adjusted_approval_is_promoted(tmp_path: Path) -> None:
    wiki = make_wiki(tmp_path)
    adjusted = verdict("approved_with_adjustment", adjusted_saving_nok=600000)
    page = promote_verdict(adjusted, wiki_root=wiki, run_id="run-a", at=AT)
    assert read_concept(page, "p").frontmatter["adjusted_saving_nok"] == 600000


def test_a_verdict_without_a_candidate_key_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    wiki = make_wiki(tmp_path)
    before = snapshot(wiki)
    with pytest.raises(PromotionRefused, match="no candidate key"):
        promote_verdict(verdict(candidate=None), wiki_root=wiki, run_id="run-a", at=AT)
    assert snapshot(wiki) == before


def test_a_bad_timestamp_writes_nothing(tmp_path: Path) -> None:
    wiki = make_wiki(tmp_path)
    before = snapshot(wiki)
    with pytest.raises(ValueError, match="not a date and time"):
        promote_verdict(verdict(), wiki_root=wiki, run_id="run-a", at="yesterday")
    assert snapshot(wiki) == before


def test_a_second_approval_replaces_the_page_and_logs_an_update(tmp_path: Path) -> None:
    wiki = make_wiki(tmp_path)
    promote_verdict(verdict(), wiki_root=wiki, run_id="run-a", at=AT)
    promote_verdict(verdict(realization_rate=0.9), wiki_root=wiki, run_id="run-b", at=AT)
    assert len(list((wiki / "verdicts").iterdir())) == 1
    index = (wiki / "index.md").read_text(encoding="utf-8")
    assert index.count(f"verdicts/{CANDIDATE_ID}.md") == 1
    log = (wiki / "log.md").read_text(encoding="utf-8")
    assert log.index("**Update**") < log.index("**Creation**")


# --- retraction ---------------------------------------------------------------------------------


def test_a_retraction_deprecates_the_page_logs_it_and_leaves_the_fold(tmp_path: Path) -> None:
    wiki = make_wiki(tmp_path)
    page = promote_verdict(verdict(), wiki_root=wiki, run_id="run-a", at=AT)
    body = read_concept(page, "p").body
    later = "2026-12-02T08:00:00Z"
    assert retract_verdict(CANDIDATE_ID, wiki_root=wiki, at=later, reason="approval withdrawn")
    concept = read_concept(page, "p")
    assert concept.frontmatter["status"] == "deprecated"
    assert concept.frontmatter["deprecated"] == {"at": later, "reason": "approval withdrawn"}
    assert concept.body == body, "a retraction keeps the content"
    log = (wiki / "log.md").read_text(encoding="utf-8")
    assert log.startswith("# Log\n\n## 2026-12-02\n* **Deprecation**")
    store = seed_store_from_bundle(wiki)
    assert store.approved() == []
    assert [entry.fate for entry in store.history] == ["withdrawn"]
    assert MARKER not in fold(store, PROJECT)


def test_a_retraction_is_idempotent_and_never_deletes(tmp_path: Path) -> None:
    wiki = make_wiki(tmp_path)
    page = promote_verdict(verdict(), wiki_root=wiki, run_id="run-a", at=AT)
    assert retract_verdict(CANDIDATE_ID, wiki_root=wiki, at=AT, reason="withdrawn")
    after_first = snapshot(wiki)
    assert not retract_verdict(CANDIDATE_ID, wiki_root=wiki, at=AT, reason="withdrawn")
    assert snapshot(wiki) == after_first
    assert page.is_file()
    assert not retract_verdict("c-0000000000000000", wiki_root=wiki, at=AT, reason="none")
