"""Step 7, the long loop through files: a verdict dropped after run A reaches run B's fold.

Run B starts from a FRESH store, so the only way the verdict can reach it is the folder. The marker
is a realisation value that exists nowhere in the bundle; an empty inbox is the control. The
folder is the expert's workbench: foreign and half-written files are skipped and reported.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.learning import (
    CandidateKey,
    VerdictStore,
    fold,
    load_verdicts_from_dir,
    seed_store_from_bundle,
)

MARKER = "0.73"  # a realisation value no bundle file contains (asserted below)
DROPPED_KEY = CandidateKey("demo", ("03.1",), "simplification", "30000")
DROPPED_ID = DROPPED_KEY.candidate_id() or ""


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def page(*lines: str, body: str = "Prose.") -> str:
    return "---\n" + "".join(f"{line}\n" for line in lines) + f"---\n\n{body}\n"


def make_bundle(root: Path) -> Path:
    """A project with two measure options and one verdict page learned earlier (on k-01)."""
    write(root, "index.md", "# Demo\n\n* [Project](project.md)\n")
    write(root, "project.md", page("type: project", "id: demo", "name: Demo"))
    write(root, "cost/02.3.md", page("type: cost-line", 'code: "02.3"', "amount_nok: 5000000"))
    write(root, "cost/03.1.md", page("type: cost-line", 'code: "03.1"', "amount_nok: 2000000"))
    for option, kind, code, saving in (
        ("k-01", "standardisation", "02.3", 798000),
        ("k-02", "simplification", "03.1", 30000),
    ):
        write(
            root,
            f"kuttliste/{option}.md",
            page(
                "type: measure-option",
                f"id: {option}",
                f"measure_type: {kind}",
                f'affected_codes: ["{code}"]',
                f"estimated_saving_nok: {saving}",
            ),
        )
    write(
        root,
        "verdicts/earlier.md",
        page("type: verdict", "decision: approved", "reviewer: AB", body="Standard sizes work."),
    )
    return root


def verdict_json(**changes: Any) -> str:
    raw: dict[str, Any] = {
        "id": DROPPED_ID,
        "decision": "approved",
        "rationale": "Simplified detailing is proven on similar lines.",
        "reviewer": "KE",
        "realization_rate": float(MARKER),
        "candidate": {
            "project_id": "demo",
            "affected_codes": ["03.1"],
            "measure_type": "simplification",
            "claimed_saving_nok": 30000,
        },
    }
    raw.update(changes)
    return json.dumps(raw, indent=2)


def run(bundle: Path, inbox: Path, store: VerdictStore) -> tuple[str, VerdictStore]:
    """What a run does before proposing: seed from the bundle, merge the inbox, fold."""
    seed_store_from_bundle(bundle, store)
    load_verdicts_from_dir(inbox, store)
    return fold(store, load_ir_projections(bundle)), store


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    root = make_bundle(tmp_path / "demo")
    assert not any(MARKER in p.read_text("utf-8") for p in root.rglob("*.md"))
    return root


@pytest.mark.loadbearing
def test_a_verdict_dropped_after_run_a_reaches_run_b_through_the_folder(
    tmp_path: Path, bundle: Path
) -> None:
    inbox = tmp_path / "inbox" / "verdicts"
    inbox.mkdir(parents=True)
    prompt_a, store_a = run(bundle, inbox, VerdictStore())
    assert MARKER not in prompt_a
    (inbox / "k-02.json").write_text(verdict_json(), encoding="utf-8")  # the expert, after run A
    prompt_b, store_b = run(bundle, inbox, VerdictStore())
    assert store_b is not store_a
    assert f"realisation {MARKER}" in prompt_b
    assert len(store_b) == 2, "merge, never replace: the earlier bundle verdict stays"


@pytest.mark.loadbearing
def test_an_empty_inbox_control_does_not_carry_the_marker(tmp_path: Path, bundle: Path) -> None:
    inbox = tmp_path / "inbox" / "verdicts"
    inbox.mkdir(parents=True)
    run(bundle, inbox, VerdictStore())
    prompt_b, store_b = run(bundle, inbox, VerdictStore())
    assert MARKER not in prompt_b
    assert prompt_b, "the control still folds the bundle's own earlier verdict"
    assert len(store_b) == 1


def test_foreign_and_half_written_files_are_skipped_and_reported(tmp_path: Path) -> None:
    inbox = tmp_path / "verdicts"
    inbox.mkdir()
    (inbox / "a-good.json").write_text(verdict_json(), encoding="utf-8")
    (inbox / "b-half.json").write_text(verdict_json()[:70], encoding="utf-8")
    (inbox / "c-foreign.json").write_text('{"name": "not a verdict"}', encoding="utf-8")
    (inbox / "d-template.json").write_text(verdict_json(decision=""), encoding="utf-8")
    (inbox / "README.txt").write_text("drop verdicts here", encoding="utf-8")
    (inbox / ".a-good.json.tmp").write_text("{", encoding="utf-8")
    (inbox / "a-good.json.error.txt").write_text("old report", encoding="utf-8")
    store = VerdictStore()
    report = load_verdicts_from_dir(inbox, store)
    assert report.loaded == ["a-good.json"]
    assert [name for name, _ in report.skipped] == [
        "b-half.json",
        "c-foreign.json",
        "d-template.json",
    ]
    reasons = dict(report.skipped)
    assert reasons["b-half.json"].startswith("b-half.json line")
    assert "the field id is missing" in reasons["c-foreign.json"]
    assert "decision is empty" in reasons["d-template.json"]
    assert [v.candidate_id for v in store.verdicts()] == [DROPPED_ID]


def test_a_missing_folder_is_reported_not_raised(tmp_path: Path) -> None:
    store = VerdictStore()
    report = load_verdicts_from_dir(tmp_path / "nowhere", store)
    assert report.loaded == []
    assert "does not exist" in report.skipped[0][1]
    assert len(store) == 0


def test_ids_are_read_verbatim_never_reminted(tmp_path: Path) -> None:
    inbox = tmp_path / "verdicts"
    inbox.mkdir()
    (inbox / "v.json").write_text(verdict_json(id="c-0123456789abcdef"), encoding="utf-8")
    store = VerdictStore()
    load_verdicts_from_dir(inbox, store)
    (learned,) = store.verdicts()
    assert learned.candidate_id == "c-0123456789abcdef" != DROPPED_KEY.candidate_id()
    assert learned.key == DROPPED_KEY


def test_a_later_file_on_the_same_candidate_wins_and_the_earlier_is_history(
    tmp_path: Path,
) -> None:
    inbox = tmp_path / "verdicts"
    inbox.mkdir()
    (inbox / "1.json").write_text(verdict_json(), encoding="utf-8")
    (inbox / "2.json").write_text(
        verdict_json(decision="rejected", rationale="The detailing fails on site."),
        encoding="utf-8",
    )
    store = VerdictStore()
    load_verdicts_from_dir(inbox, store)
    current = store.get(DROPPED_ID)
    assert current is not None and current.decision == "rejected"
    assert store.approved() == []
    assert [(e.fate, e.verdict.decision) for e in store.history] == [("superseded", "approved")]
