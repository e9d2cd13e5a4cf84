"""The rendered context: flat, bounded, and never carrying the learned layer."""

from __future__ import annotations

from pathlib import Path

import pytest

from portfolio_optimiser.context.navigate import navigate_bundle
from portfolio_optimiser.context.render import bundle_context, render_context

from .conftest import EXAMPLES
from .test_navigation import write

HIERARCHY = EXAMPLES / "nav-golden-hierarchy" / "bundle"


@pytest.mark.loadbearing
def test_bundle_context_excludes_verdict_layer() -> None:
    context = bundle_context(HIERARCHY)
    assert "LEARNED-SIGNAL-MUST-NOT-LEAK" not in context
    assert "VERDICT-LINKED-PAGE-MUST-NOT-LEAK" not in context
    assert "## verdicts/v-001.md" not in context


@pytest.mark.loadbearing
def test_a_verdict_is_kept_out_even_when_the_budget_turns_the_rest_into_a_map() -> None:
    context = bundle_context(HIERARCHY, budget_chars=10)
    assert "LEARNED-SIGNAL-MUST-NOT-LEAK" not in context
    assert "v-001" not in context.split("## Not shown in full", 1)[1]


def test_unlinked_files_are_not_context() -> None:
    assert "ORPHAN-MUST-NOT-APPEAR" not in bundle_context(HIERARCHY)


def test_past_the_budget_each_concept_becomes_one_map_line() -> None:
    navigation = navigate_bundle(HIERARCHY)
    full = render_context(navigation, budget_chars=1_000_000)
    small = render_context(navigation, budget_chars=900)
    assert len(small) < len(full)
    header, _, mapped = small.partition(
        "## Not shown in full (open them with the data-source tools)\n\n"
    )
    lines = mapped.strip().split("\n")
    shown = [c.rel for c in navigation.concepts if f"## {c.rel}\n" in header]
    listed = [line.split(" · ", 1)[0].removeprefix("- ") for line in lines]
    # Navigation order is kept: full bodies first, then the map, nothing lost but the verdict.
    expected = [c.rel for c in navigation.concepts if c.type != "verdict"]
    assert shown + listed == expected
    assert all(line.startswith("- ") and "\n" not in line for line in lines)
    assert "amount_nok: 2880000" in mapped or "amount_nok: 2880000" in header


def test_prompt_size_does_not_grow_with_bodies_past_the_budget(tmp_path: Path) -> None:
    links = " ".join(f"[c{i}](c{i}.md)" for i in range(40))
    write(tmp_path, "index.md", links + "\n")
    for i in range(40):
        write(
            tmp_path,
            f"c{i}.md",
            f"---\ntype: note\ntitle: Note {i}\n---\n" + "long body " * 500 + "\n",
        )
    context = bundle_context(tmp_path, budget_chars=6000)
    assert len(context) < 6000 + 40 * 80
    assert context.count("\n- c") == 40 - context.count("\n## c")


def test_rendering_is_deterministic() -> None:
    assert bundle_context(HIERARCHY) == bundle_context(HIERARCHY)
