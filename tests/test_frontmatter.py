"""Frontmatter: safe YAML only, a mapping, UTF-8; editors' BOM and CRLF are fine."""

from __future__ import annotations

import pytest

from portfolio_optimiser.context.errors import BundleError, FrontmatterError
from portfolio_optimiser.context.frontmatter import parse_concept


def test_a_plain_concept_parses() -> None:
    concept = parse_concept(b'---\ntype: cost-line\ncode: "02.3"\n---\nBody [x](y.md)\n', "c.md")
    assert concept.frontmatter == {"type": "cost-line", "code": "02.3"}
    assert concept.body == "Body [x](y.md)\n"
    assert concept.body_line == 5


def test_bom_and_crlf_are_accepted() -> None:
    concept = parse_concept(b"\xef\xbb\xbf---\r\ntype: note\r\n---\r\nText\r\n", "c.md")
    assert concept.type == "note"
    assert concept.body == "Text\n"


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    "tag",
    [
        "!!python/object:os.system",
        "!!python/object/apply:os.system",
        "!!python/name:os.system",
        "!custom",
    ],
)
def test_an_unsafe_yaml_tag_is_refused_with_its_line(tag: str) -> None:
    with pytest.raises(FrontmatterError, match=r"c\.md line 3: the YAML tag .* is not allowed"):
        parse_concept(f"---\ntype: note\nx: {tag} ['echo hi']\n---\n".encode(), "c.md")


def test_yaml_aliases_are_refused() -> None:
    with pytest.raises(FrontmatterError, match="aliases"):
        parse_concept(b"---\ntype: note\na: &x [1, 2]\nb: *x\n---\n", "c.md")


@pytest.mark.parametrize(
    ("yaml_text", "kind"), [("- a\n- b", "list"), ("just text", "plain string")]
)
def test_frontmatter_that_is_not_a_mapping_is_refused(yaml_text: str, kind: str) -> None:
    with pytest.raises(FrontmatterError, match=f"must be a mapping .* not a {kind}"):
        parse_concept(f"---\n{yaml_text}\n---\n".encode(), "c.md")


def test_invalid_yaml_names_the_file_line() -> None:
    with pytest.raises(FrontmatterError, match=r"c\.md line 3: frontmatter is not valid YAML"):
        parse_concept(b"---\ntype: note\ntitle: [unclosed\n---\n", "c.md")


def test_an_unterminated_frontmatter_is_refused() -> None:
    with pytest.raises(FrontmatterError, match="never ends"):
        parse_concept(b"---\ntype: note\n", "c.md")


def test_non_utf8_names_the_line() -> None:
    with pytest.raises(BundleError, match=r"c\.md line 2: byte 0xff is not valid UTF-8"):
        parse_concept(b"---\n\xff\n---\n", "c.md")


def test_dates_stay_the_text_the_planner_wrote() -> None:
    concept = parse_concept(
        b"---\ntype: measure-option\nlatest_decision_point: 2027-03-01\n---\n", "c.md"
    )
    assert concept.frontmatter["latest_decision_point"] == "2027-03-01"


def test_a_file_without_frontmatter_has_none() -> None:
    concept = parse_concept(b"# Title\n", "c.md")
    assert concept.frontmatter == {}
    assert concept.type is None
