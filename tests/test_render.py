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
    small = render_context(navigation, budget_chars=1500)
    assert len(small) < len(full)
    header, _, mapped = small.partition(
        "## Not shown in full (open them with the data-source tools)\n\n"
    )
    lines = mapped.strip().split("\n")
    shown = [c.rel for c in navigation.concepts if f"## {c.rel}\n" in header]
    listed = [line.split(" · ", 1)[0].removeprefix("- ") for line in lines if " · " in line]
    summary = [line for line in lines if "more concepts" in line]
    more = int(summary[0].split()[3]) if summary else 0
    # Navigation order is kept: full bodies first, then the map, then a count; nothing is lost
    # but the verdict, which is never context.
    expected = [c.rel for c in navigation.concepts if c.type != "verdict"]
    assert shown + listed == expected[: len(shown) + len(listed)]
    assert len(shown) + len(listed) + more == len(expected)
    assert all(line.startswith("- ") and "\n" not in line for line in lines)


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


@pytest.mark.loadbearing
def test_the_map_is_bounded_so_the_prompt_stops_growing(tmp_path: Path) -> None:
    def context_for(count: int) -> str:
        root = tmp_path / f"b{count}"
        write(root, "index.md", " ".join(f"[c{i}](c{i}.md)" for i in range(count)) + "\n")
        for i in range(count):
            write(
                root, f"c{i}.md", f"---\ntype: note\ntitle: Note {i}\n---\n" + "body " * 200 + "\n"
            )
        return bundle_context(root, budget_chars=6000)

    small, large = context_for(100), context_for(1000)
    # Full bodies within the budget, the index and the map a third of it each, then one line.
    assert len(large) <= 6000 + 2 * (6000 // 3) + 300
    assert len(large) - len(small) < 6000 // 3
    assert "more concepts; list_concepts names them all" in large
