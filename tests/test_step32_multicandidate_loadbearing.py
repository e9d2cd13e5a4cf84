"""S3.2: a verdict is keyed on ITS candidate, not on the bundle's one IR projection.

Each load-bearing test here turns red under one measured mutation: detach per-verdict keying,
detach the key fields promotion writes, make a partial or unparseable key tolerant, normalise the
magnitude on write, or remove the fallback to the bundle's own candidate.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from portfolio_optimiser.context.frontmatter import read_concept
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.models import mint_candidate_id
from portfolio_optimiser.context.verdict import parse_verdict
from portfolio_optimiser.learning import (
    CandidateKey,
    VerdictFrontmatterError,
    VerdictStore,
    load_verdicts_from_dir,
    promote_verdict,
    retrieve,
    seed_store_from_bundle,
    similarity,
)

PROJECT = "demo"
KEY_A = CandidateKey(PROJECT, ("02.3",), "standardisation", "798000")
KEY_B = CandidateKey(PROJECT, ("03.1",), "simplification", "30000")
AT = "2026-11-30T12:00:00Z"


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def page(*lines: str, body: str = "Prose.") -> str:
    return "---\n" + "".join(f"{line}\n" for line in lines) + f"---\n\n{body}\n"


def make_bundle(root: Path) -> Path:
    """A project whose first measure option (k-01) is candidate A; k-02 is candidate B."""
    write(root, "index.md", "# Demo\n\n* [Project](project.md)\n")
    write(root, "project.md", page("type: project", f"id: {PROJECT}", "name: Demo"))
    write(root, "cost/02.3.md", page("type: cost-line", 'code: "02.3"', "amount_nok: 5000000"))
    write(root, "cost/03.1.md", page("type: cost-line", 'code: "03.1"', "amount_nok: 2000000"))
    write(
        root,
        "kuttliste/k-01.md",
        page(
            "type: measure-option",
            "id: k-01",
            "measure_type: standardisation",
            'affected_codes: ["02.3"]',
            "estimated_saving_nok: 798000",
        ),
    )
    write(
        root,
        "kuttliste/k-02.md",
        page(
            "type: measure-option",
            "id: k-02",
            "measure_type: simplification",
            'affected_codes: ["03.1"]',
            "estimated_saving_nok: 30000",
        ),
    )
    return root


def verdict_page(*key_lines: str, decision: str = "approved") -> str:
    return page("type: verdict", f"decision: {decision}", "reviewer: KE", *key_lines, body="Ok.")


KEYED_A = (
    'affected_codes: ["02.3"]',
    "measure_type: standardisation",
    "claimed_saving_nok: 798000",
)
KEYED_B = ('affected_codes: ["03.1"]', "measure_type: simplification", "claimed_saving_nok: 30000")


def verdict_json(candidate_id: str, saving: str, *, decision: str = "approved") -> bytes:
    """A verdict file as an editor saves it; the saving is spliced in as written."""
    text = json.dumps(
        {
            "id": candidate_id,
            "decision": decision,
            "rationale": "Checked the quantities; the saving holds.",
            "reviewer": "KE",
            "candidate": {
                "project_id": "other-project",
                "affected_codes": ["03.1"],
                "measure_type": "simplification",
                "claimed_saving_nok": "SAVING",
            },
        },
        indent=2,
    )
    return text.replace('"SAVING"', saving).encode()


# --- per-verdict keying -------------------------------------------------------------------------


@pytest.mark.loadbearing
def test_two_verdicts_in_one_bundle_key_on_their_own_candidates(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "demo")
    write(root, "verdicts/a.md", verdict_page(*KEYED_A))
    write(root, "verdicts/b.md", verdict_page(*KEYED_B))
    store = seed_store_from_bundle(root)
    id_a, id_b = KEY_A.candidate_id(), KEY_B.candidate_id()
    assert id_a and id_b
    learned_a, learned_b = store.get(id_a), store.get(id_b)
    assert learned_a is not None and learned_b is not None, "two verdicts collapsed on one key"
    assert (learned_a.key, learned_b.key) == (KEY_A, KEY_B)


@pytest.mark.loadbearing
def test_a_verdict_on_b_does_not_match_a_query_for_a_perfectly(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "demo")
    write(root, "verdicts/a.md", verdict_page("candidate_id: c-aaaaaaaaaaaaaaaa", *KEYED_A))
    write(root, "verdicts/b.md", verdict_page("candidate_id: c-bbbbbbbbbbbbbbbb", *KEYED_B))
    store = seed_store_from_bundle(root)
    project = load_ir_projections(root)
    ranked_for_b = retrieve(store, project, query=KEY_B)
    assert ranked_for_b[0].candidate_id == "c-bbbbbbbbbbbbbbbb"
    on_a = store.get("c-aaaaaaaaaaaaaaaa")
    on_b = store.get("c-bbbbbbbbbbbbbbbb")
    assert on_a is not None and on_b is not None
    query = (KEY_A.affected_codes, {"standardisation"})
    assert similarity(on_b.key, project, query[0], query_measure_types=query[1]) < similarity(
        on_a.key, project, query[0], query_measure_types=query[1]
    )


# --- promotion writes the key, seeding reads it back --------------------------------------------


@pytest.mark.loadbearing
def test_a_promoted_verdict_seeds_back_to_its_own_key_and_id(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "demo")
    own = CandidateKey("other-project", ("03.1",), "simplification", "30000")
    candidate_id = own.candidate_id()
    assert candidate_id is not None
    verdict = parse_verdict(verdict_json(candidate_id, "30000"), "v.json")
    promote_verdict(verdict, wiki_root=root, run_id="run-a", at=AT)
    written = read_concept(root / f"verdicts/{candidate_id}.md", "v").frontmatter
    assert (written["affected_codes"], written["measure_type"], written["claimed_saving_nok"]) == (
        ["03.1"],
        "simplification",
        "30000",
    )
    learned = seed_store_from_bundle(root).get(candidate_id)
    assert learned is not None
    assert learned.key == own, "the promoted page poses as the target bundle's candidate"
    assert learned.key.candidate_id() == candidate_id


# --- all three or none --------------------------------------------------------------------------


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    ("lines", "missing"),
    [
        (KEYED_A[:2], "claimed_saving_nok"),
        ((KEYED_A[0], KEYED_A[2]), "measure_type"),
        (KEYED_A[:1], "measure_type, claimed_saving_nok"),
        (KEYED_A[1:], "but not affected_codes"),
    ],
)
def test_a_partial_key_raises_naming_the_file_and_the_missing_fields(
    tmp_path: Path, lines: tuple[str, ...], missing: str
) -> None:
    root = make_bundle(tmp_path / "demo")
    write(root, "verdicts/partial.md", verdict_page(*lines))
    with pytest.raises(VerdictFrontmatterError, match=r"verdicts/partial\.md") as caught:
        seed_store_from_bundle(root)
    assert missing in str(caught.value)


@pytest.mark.loadbearing
@pytest.mark.parametrize("saving", ['"30 000"', '"NaN"', "true", '"0x10"', '"30000kr"', "[1]"])
def test_an_unparseable_saving_is_refused_not_repaired(tmp_path: Path, saving: str) -> None:
    root = make_bundle(tmp_path / "demo")
    lines = (*KEYED_A[:2], f"claimed_saving_nok: {saving}")
    write(root, "verdicts/bad.md", verdict_page(*lines))
    with pytest.raises(VerdictFrontmatterError, match=r"verdicts/bad.md field claimed_saving_nok"):
        seed_store_from_bundle(root)


def test_a_partial_summary_in_the_inbox_is_skipped_and_reported_not_merged(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    raw = json.loads(verdict_json("c-0123456789abcdef", "30000"))
    del raw["candidate"]["measure_type"]
    (inbox / "v.json").write_text(json.dumps(raw), encoding="utf-8")
    store = VerdictStore()
    report = load_verdicts_from_dir(inbox, store)
    assert len(store) == 0
    assert [name for name, _ in report.skipped] == ["v.json"]
    assert "measure_type" in report.skipped[0][1]


# --- the literal as written ---------------------------------------------------------------------


@pytest.mark.loadbearing
def test_a_saving_written_30000_0_stays_that_literal_and_mints_another_id(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "demo")
    as_float = CandidateKey("other-project", ("03.1",), "simplification", "30000.0")
    candidate_id = as_float.candidate_id()
    assert candidate_id is not None
    assert candidate_id != mint_candidate_id("other-project", ("03.1",), "simplification", "30000")
    verdict = parse_verdict(verdict_json(candidate_id, "30000.0"), "v.json")
    promote_verdict(verdict, wiki_root=root, run_id="run-a", at=AT)
    written = read_concept(root / f"verdicts/{candidate_id}.md", "v").frontmatter
    assert written["claimed_saving_nok"] == "30000.0"
    learned = seed_store_from_bundle(root).get(candidate_id)
    assert learned is not None and learned.key.saving_literal == "30000.0"
    assert learned.key.candidate_id() == candidate_id


def test_a_hand_written_float_saving_keeps_its_literal(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "demo")
    lines = (*KEYED_B[:2], "claimed_saving_nok: 30000.0")
    write(root, "verdicts/b.md", verdict_page(*lines))
    (learned,) = seed_store_from_bundle(root).verdicts()
    assert learned.key == CandidateKey(PROJECT, ("03.1",), "simplification", "30000.0")
    assert learned.candidate_id != KEY_B.candidate_id()


# --- the fallback -------------------------------------------------------------------------------


@pytest.mark.loadbearing
def test_a_verdict_without_key_fields_falls_back_to_the_bundle_candidate(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "demo")
    write(root, "verdicts/old.md", verdict_page())
    (learned,) = seed_store_from_bundle(root).verdicts()
    assert learned.key == KEY_A
    assert learned.candidate_id == KEY_A.candidate_id()


def test_an_unkeyed_page_in_a_wiki_without_a_project_has_an_empty_key(tmp_path: Path) -> None:
    wiki = tmp_path / "wiki"
    write(wiki, "index.md", "# Wiki\n")
    write(wiki, "verdicts/old.md", verdict_page())
    (learned,) = seed_store_from_bundle(wiki).verdicts()
    assert learned.key == CandidateKey()
    assert learned.candidate_id == "concept:verdicts/old"
