"""OKF v0.2 conformance of the commons' bundles and of the wiki the writers produce."""

from __future__ import annotations

from pathlib import Path

import pytest

from portfolio_optimiser.context.conformance import check_conformance
from portfolio_optimiser.context.wiki import link_in_index, prepend_log, write_concept_file

from .conftest import EXAMPLES
from .test_navigation import write


@pytest.mark.parametrize("bundle", sorted((EXAMPLES / "portfolio").iterdir()), ids=lambda p: p.name)
def test_the_example_bundles_conform(bundle: Path) -> None:
    assert check_conformance(bundle) == []


def test_the_hierarchy_golden_conforms() -> None:
    assert check_conformance(EXAMPLES / "nav-golden-hierarchy" / "bundle") == []


def test_what_the_wiki_writers_produce_conforms(tmp_path: Path) -> None:
    write_concept_file(
        tmp_path / "verdicts" / "c-1.md",
        {"type": "verdict", "verified": {"by": "human:KE", "at": "2026-11-30"}},
        "ok",
    )
    link_in_index(tmp_path, "verdicts/c-1.md")
    prepend_log(tmp_path, day="2026-11-30", kind="Creation", text="c-1")
    assert check_conformance(tmp_path) == []


def test_problems_are_reported_not_repaired(tmp_path: Path) -> None:
    write(tmp_path, "index.md", "---\ntitle: not allowed\n---\n")
    write(tmp_path, "sub/index.md", "---\nokf_version: '0.2'\n---\n")
    write(tmp_path, "a.md", "---\ntitle: no type\nstatus: gone\n---\n")
    write(tmp_path, "b.md", "---\n- a\n---\n")
    write(tmp_path, "log.md", "# Log\n\n## 2026-11-01\n* x\n\n## 2026-11-30\n* y\n\n## yesterday\n")
    messages = [str(issue) for issue in check_conformance(tmp_path)]
    assert any(m.startswith("a.md: frontmatter needs a non-empty 'type'") for m in messages)
    assert any(m.startswith("a.md: status 'gone'") for m in messages)
    assert any(m.startswith("b.md:") and "mapping" in m for m in messages)
    assert any(
        m.startswith("index.md: an index carries no frontmatter (found title)") for m in messages
    )
    assert any(
        m.startswith("sub/index.md: an index carries no frontmatter (found okf_version)")
        for m in messages
    )
    assert any(m.startswith("log.md:") and "newest first" in m for m in messages)
    assert any(m.startswith("log.md:") and "'## YYYY-MM-DD'" in m for m in messages)
    assert (tmp_path / "b.md").read_text() == "---\n- a\n---\n"
