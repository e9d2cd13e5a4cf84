"""Curated writers: the ingest stamp is refused, the index label is neutral, the log is newest first."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from portfolio_optimiser.context.errors import IngestStampError
from portfolio_optimiser.context.frontmatter import parse_concept, read_concept
from portfolio_optimiser.context.wiki import (
    link_in_index,
    prepend_log,
    render_concept,
    write_concept_file,
)


@pytest.mark.loadbearing
def test_the_complete_ingest_stamp_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    page = tmp_path / "wiki" / "page.md"
    with pytest.raises(IngestStampError, match="ingest stamp"):
        write_concept_file(
            page, {"type": "verdict", "generated": True, "ingest_manifest": "m.json"}, "x"
        )
    assert not page.exists()
    assert not any(tmp_path.rglob("*"))  # not even a temporary file or a folder


@pytest.mark.parametrize("half", [{"generated": True}, {"ingest_manifest": "m.json"}])
def test_either_half_of_the_stamp_alone_is_allowed(tmp_path: Path, half: dict[str, object]) -> None:
    page = tmp_path / "page.md"
    write_concept_file(page, {"type": "note", **half}, "body")
    assert read_concept(page, "page.md").frontmatter == {"type": "note", **half}


def test_a_written_concept_reads_back_exactly(tmp_path: Path) -> None:
    page = tmp_path / "verdicts" / "c-1.md"
    frontmatter = {
        "type": "verdict",
        "affected_codes": ["02.3"],
        "claimed_saving_nok": "30000.0",
        "code": "02.3",
    }
    write_concept_file(page, frontmatter, "Approved.\n")
    concept = read_concept(page, "verdicts/c-1.md")
    assert concept.frontmatter == frontmatter
    assert concept.body.strip() == "Approved."


def test_reserved_names_and_missing_type_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="reserved"):
        write_concept_file(tmp_path / "index.md", {"type": "note"}, "")
    with pytest.raises(ValueError, match="type"):
        write_concept_file(tmp_path / "a.md", {"title": "no type"}, "")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.loadbearing
def test_index_links_use_a_neutral_label_once(tmp_path: Path) -> None:
    assert link_in_index(tmp_path, "verdicts/c-0123456789abcdef.md") is True
    assert link_in_index(tmp_path, "verdicts/c-0123456789abcdef.md") is False
    index = (tmp_path / "index.md").read_text()
    assert index.count("](verdicts/c-0123456789abcdef.md)") == 1
    assert "* [verdicts/c-0123456789abcdef](verdicts/c-0123456789abcdef.md)" in index


def test_a_second_page_joins_the_same_section(tmp_path: Path) -> None:
    (tmp_path / "index.md").write_text(
        "# Wiki\n\n## Pages\n\n* [a](a.md)\n\n## Other\n\n* [z](z.md)\n"
    )
    link_in_index(tmp_path, "b.md")
    assert (tmp_path / "index.md").read_text() == (
        "# Wiki\n\n## Pages\n\n* [a](a.md)\n* [b](b.md)\n\n## Other\n\n* [z](z.md)\n"
    )


def test_the_log_is_newest_first(tmp_path: Path) -> None:
    prepend_log(tmp_path, day="2026-11-29", kind="Creation", text="first")
    prepend_log(tmp_path, day="2026-11-30", kind="Creation", text="second")
    prepend_log(tmp_path, day="2026-11-30", kind="Deprecation", text="third")
    assert (tmp_path / "log.md").read_text() == (
        "# Log\n\n## 2026-11-30\n* **Deprecation** third\n* **Creation** second\n\n"
        "## 2026-11-29\n* **Creation** first\n"
    )


def _prepended_line_by_line(log: str, day: str, entry: str) -> str:
    """The log with an entry added, line by line: under today's heading if the newest is
    today's, else under a new heading above it."""
    lines = (log.rstrip("\n") or "# Log").split("\n")
    first = next((i for i, line in enumerate(lines) if line.startswith("## ")), None)
    if first is not None and lines[first] == f"## {day}":
        lines.insert(first + 1, entry)
    elif first is not None:
        lines[first:first] = [f"## {day}", entry, ""]
    else:
        lines += ["", f"## {day}", entry]
    return "\n".join(lines) + "\n"


_LOG_LINE = st.one_of(
    st.sampled_from(["# Log", "", "## 2026-11-30", "## 2026-12-01", "##x", " ## 2026-12-01"]),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=20),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_LOG_LINE, max_size=12), st.sampled_from(["2026-11-30", "2026-12-01"]), st.booleans()
)
def test_an_entry_lands_where_reading_the_log_line_by_line_puts_it(
    tmp_path_factory: pytest.TempPathFactory, lines: list[str], day: str, trailing: bool
) -> None:
    """Whatever an editor left in the log (no heading, an older day first, blank lines)."""
    wiki = tmp_path_factory.mktemp("wiki")
    log = "\n".join(lines) + ("\n" if trailing else "")
    (wiki / "log.md").write_text(log, encoding="utf-8")
    prepend_log(wiki, day=day, kind="Update", text="a  verdict\tpromoted")
    expected = _prepended_line_by_line(log, day, "* **Update** a verdict promoted")
    assert (wiki / "log.md").read_text(encoding="utf-8") == expected


def test_a_log_day_must_be_a_date(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        prepend_log(tmp_path, day="yesterday", kind="Update", text="x")


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=300)
_VALUE = st.one_of(
    _TEXT,
    st.integers(min_value=-(10**15), max_value=10**15),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.lists(_TEXT, max_size=4),
)


@settings(max_examples=300, deadline=None)
@given(values=st.dictionaries(st.sampled_from(["a", "b", "rationale", "codes"]), _VALUE))
def test_any_frontmatter_written_reads_back_as_it_was(values: dict[str, object]) -> None:
    """Pages are written by libyaml's emitter where PyYAML has it, which folds long quoted
    strings elsewhere than PyYAML's own: whatever the text, a page reads back as it was written."""
    frontmatter = {"type": "verdict", **values}
    text = render_concept(frontmatter, "Body.\n")
    assert parse_concept(text.encode("utf-8"), "c.md").frontmatter == frontmatter
