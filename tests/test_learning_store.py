"""The learning store: merge semantics, structural similarity and retrieval, and its boundaries."""

from __future__ import annotations

from pathlib import Path

import pytest

from portfolio_optimiser.context.models import CostLine, MeasureOption, Project
from portfolio_optimiser.context.verdict import Decision, parse_verdict
from portfolio_optimiser.learning import (
    CandidateKey,
    LearnedVerdict,
    VerdictFrontmatterError,
    VerdictStore,
    retrieve,
    seed_store_from_bundle,
    similarity,
)
from portfolio_optimiser.learning.insights import MEASURE_TYPE_BONUS, SAME_PROJECT_BONUS

from .conftest import REPO
from .fresh import fresh_python

EMPTY_KEY = CandidateKey()
EXAMPLE_VERDICT = REPO / "shared/skills/expert-reviewer/references/example-verdict.json"
PROJECT = Project(
    id="school",
    name="A school",
    cost_lines=(
        CostLine(code="02.3", amount_nok=5_000_000),
        CostLine(code="03.1", amount_nok=2_000_000),
    ),
    measure_options=(
        MeasureOption(
            id="k-01", measure_type="reuse", affected_codes=("02.3",), estimated_saving_nok=1
        ),
    ),
)


def learned(
    candidate_id: str,
    decision: Decision = Decision.APPROVED,
    key: CandidateKey = EMPTY_KEY,
    adjusted_saving_nok: int | None = None,
) -> LearnedVerdict:
    return LearnedVerdict(
        candidate_id=candidate_id,
        decision=decision,
        rationale="Because.",
        reviewer="KE",
        key=key,
        source=Path(f"{candidate_id}.json"),
        adjusted_saving_nok=adjusted_saving_nok,
    )


# --- the store ----------------------------------------------------------------------------------


def test_the_last_write_for_a_candidate_wins_and_the_earlier_is_kept() -> None:
    store = VerdictStore()
    first, second = learned("c-1"), learned("c-1", Decision.REJECTED)
    store.add(first)
    store.add(learned("c-2"))
    store.add(second)
    assert len(store) == 2
    assert store.get("c-1") is second
    assert [(e.fate, e.verdict) for e in store.history] == [("superseded", first)]


def test_approved_holds_only_approving_verdicts_in_id_order() -> None:
    store = VerdictStore()
    for verdict in (
        learned("c-3", Decision.APPROVED_WITH_ADJUSTMENT, adjusted_saving_nok=10),
        learned("c-2", Decision.REJECTED),
        learned("c-1"),
    ):
        store.add(verdict)
    assert [v.candidate_id for v in store.approved()] == ["c-1", "c-3"]
    assert [v.candidate_id for v in store.verdicts()] == ["c-1", "c-2", "c-3"]


def test_a_retraction_withdraws_from_approved_and_keeps_history() -> None:
    store = VerdictStore()
    store.add(learned("c-1"))
    assert store.retract("c-1") is True
    assert store.retract("c-1") is False
    assert store.approved() == [] and "c-1" not in store and len(store) == 0
    assert [e.fate for e in store.history] == ["withdrawn"]


def test_a_parsed_verdict_keeps_its_id_verbatim_and_keys_on_its_summary() -> None:
    verdict = parse_verdict(EXAMPLE_VERDICT.read_bytes(), EXAMPLE_VERDICT.name)
    result = LearnedVerdict.from_verdict(verdict, source=EXAMPLE_VERDICT)
    assert result.candidate_id == verdict.id
    assert result.key == CandidateKey("lillevik-school", ("02.3",), "standardisation", "798000")
    assert result.realization_rate == 0.85 and result.approves


def test_a_deprecated_page_seeds_as_withdrawn_history(tmp_path: Path) -> None:
    (tmp_path / "index.md").write_text("# Wiki\n", encoding="utf-8")
    (tmp_path / "v.md").write_text(
        "---\ntype: verdict\ndecision: approved\ncandidate_id: c-1\nstatus: deprecated\n---\nOk.\n",
        encoding="utf-8",
    )
    store = seed_store_from_bundle(tmp_path)
    assert len(store) == 0
    assert [(e.fate, e.verdict.candidate_id) for e in store.history] == [("withdrawn", "c-1")]


def test_seeding_merges_into_a_given_store(tmp_path: Path) -> None:
    (tmp_path / "index.md").write_text("# Wiki\n", encoding="utf-8")
    (tmp_path / "v.md").write_text(
        "---\ntype: verdict\ndecision: rejected\ncandidate_id: c-2\n---\nNo.\n", encoding="utf-8"
    )
    store = VerdictStore()
    store.add(learned("c-1"))
    assert seed_store_from_bundle(tmp_path, store) is store
    assert [v.candidate_id for v in store.verdicts()] == ["c-1", "c-2"]
    seeded = store.get("c-2")
    assert seeded is not None and seeded.rationale == "No."


# --- similarity and retrieval -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        (("02.3",), 1.0),  # the query's own code: closure {02, 02.3} both ways
        (("02",), 0.5),  # a prefix meets its account: {02} against {02, 02.3}
        (("02.9",), 1 / 3),  # a sibling shares only the prefix
        (("07",), 0.0),
    ],
)
def test_code_overlap_is_jaccard_on_prefix_closed_sets(
    codes: tuple[str, ...], expected: float
) -> None:
    key = CandidateKey(affected_codes=codes)
    assert similarity(key, PROJECT, ("02.3",), query_measure_types=()) == pytest.approx(expected)


def test_measure_type_and_same_project_add_their_bonus() -> None:
    bare = CandidateKey(affected_codes=("07",))
    assert similarity(CandidateKey(affected_codes=("07",), measure_type="reuse"), PROJECT) == (
        similarity(bare, PROJECT) + MEASURE_TYPE_BONUS
    )
    assert similarity(CandidateKey("school", ("07",)), PROJECT) == SAME_PROJECT_BONUS


def test_retrieve_returns_the_closest_approved_verdicts_ties_by_id() -> None:
    store = VerdictStore()
    close = CandidateKey(affected_codes=("02.3",), measure_type="reuse")
    near = CandidateKey(affected_codes=("02.3",))
    store.add(learned("c-b", key=near))
    store.add(learned("c-a", key=near))
    store.add(learned("c-z", key=close))
    store.add(learned("c-r", Decision.REJECTED, key=close))
    store.add(learned("c-u", key=CandidateKey(affected_codes=("99",))))
    assert [v.candidate_id for v in retrieve(store, PROJECT)] == ["c-z", "c-a", "c-b"]
    assert [v.candidate_id for v in retrieve(store, PROJECT, k=1)] == ["c-z"]
    assert retrieve(store, PROJECT, k=0) == []


# --- boundaries ---------------------------------------------------------------------------------


def test_importing_the_learning_layer_loads_no_model_framework() -> None:
    package = REPO / "daemon" / "portfolio_optimiser" / "learning"
    modules = sorted(f"portfolio_optimiser.learning.{p.stem}" for p in package.glob("[!_]*.py"))
    script = (
        "import sys\nimport portfolio_optimiser.learning\n"
        + "".join(f"import {m}\n" for m in modules)
        + "print(sorted(m for m in sys.modules if m.split('.')[0] in ('agent_framework', 'mcp')))\n"
    )
    assert fresh_python(script).strip() == "[]"


def test_seeding_refuses_a_page_without_a_decision(tmp_path: Path) -> None:
    (tmp_path / "index.md").write_text("# Wiki\n", encoding="utf-8")
    (tmp_path / "v.md").write_text("---\ntype: verdict\n---\nOk.\n", encoding="utf-8")
    with pytest.raises(VerdictFrontmatterError, match=r"v\.md field decision"):
        seed_store_from_bundle(tmp_path)
