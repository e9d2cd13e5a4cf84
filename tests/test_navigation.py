"""Navigation: the goldens gate the contract byte for byte, positive and escape (DESIGN §4 step 1)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from portfolio_optimiser.context.errors import BundleError, BundleEscapeError
from portfolio_optimiser.context.navigate import (
    ProblemKind,
    extract_links,
    navigate_bundle,
    safe_resolve,
)
from portfolio_optimiser.context.render import render_context

from .conftest import EXAMPLES

HIERARCHY = EXAMPLES / "nav-golden-hierarchy"
ESCAPE = EXAMPLES / "nav-golden-escape"


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.loadbearing
def test_nav_golden_hierarchy_renders_byte_for_byte() -> None:
    expected = (HIERARCHY / "expected-read-context.md").read_bytes()
    assert render_context(navigate_bundle(HIERARCHY / "bundle")).encode("utf-8") == expected


@pytest.mark.loadbearing
def test_nav_golden_hierarchy_reads_depth_first_in_first_seen_order() -> None:
    navigation = navigate_bundle(HIERARCHY / "bundle")
    assert [c.rel for c in navigation.concepts] == [
        "project.md",
        "cost/02/02.3-walls.md",
        "context/risks/ground.md",
        "context/risks/a/b/c/deep.md",
        "cost/01-general.md",
        "verdicts/v-001.md",
        "kuttliste/k-01.md",
    ]
    assert [c.rel for c in navigation.navigation_files] == ["cost/index.md"]


@pytest.mark.loadbearing
def test_nav_golden_escape_renders_byte_for_byte() -> None:
    expected = (ESCAPE / "expected-read-context.md").read_bytes()
    assert render_context(navigate_bundle(ESCAPE / "bundle")).encode("utf-8") == expected


@pytest.mark.loadbearing
def test_nav_golden_escape_reads_nothing_outside_and_reports_every_attempt() -> None:
    navigation = navigate_bundle(ESCAPE / "bundle")
    rendered = render_context(navigation)
    assert "OUTSIDE-THE-BUNDLE-MUST-NOT-LEAK" not in rendered
    assert [c.rel for c in navigation.concepts] == ["docs/inside.md"]
    refused = {(p.file, p.target) for p in navigation.escapes}
    assert refused == {
        ("index.md", "../outside.md"),
        ("index.md", "../../etc/passwd"),
        ("index.md", "%2e%2e/outside.md"),
        ("index.md", "file:///etc/passwd"),
        ("index.md", "C:\\Windows\\win.ini"),
        ("index.md", "docs/escape-link.md"),
        ("index.md", "linked-dir/outside.md"),
        ("docs/inside.md", "../../outside.md"),
    }
    for problem in navigation.escapes:
        assert "leaves the bundle" in str(problem)


def test_a_copied_bundle_renders_the_same_context(tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere" / "bundle"
    shutil.copytree(HIERARCHY / "bundle", copy)
    assert (
        render_context(navigate_bundle(copy))
        == (HIERARCHY / "expected-read-context.md").read_text()
    )


def test_a_missing_root_index_is_an_error(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "---\ntype: note\n---\n")
    with pytest.raises(BundleError, match=r"index\.md is missing at the bundle root"):
        navigate_bundle(tmp_path)


def test_a_missing_nested_index_is_not_an_error(tmp_path: Path) -> None:
    write(tmp_path, "index.md", "[deep](a/b/c.md)\n")
    write(tmp_path, "a/b/c.md", "---\ntype: note\n---\nno index in a/ or a/b/\n")
    assert [c.rel for c in navigate_bundle(tmp_path).concepts] == ["a/b/c.md"]


def test_dot_slash_and_plain_links_are_one_file(tmp_path: Path) -> None:
    write(
        tmp_path, "index.md", "[a](./a.md) [again](a.md) [rooted](/a.md) [up and back](x/../a.md)\n"
    )
    write(tmp_path, "a.md", "---\ntype: note\n---\n")
    navigation = navigate_bundle(tmp_path)
    assert [c.rel for c in navigation.concepts] == ["a.md"]
    assert navigation.problems == ()


def test_a_cycle_ends_and_is_noted(tmp_path: Path) -> None:
    write(tmp_path, "index.md", "[a](a.md)\n")
    write(tmp_path, "a.md", "---\ntype: note\n---\n[b](b.md)\n")
    write(tmp_path, "b.md", "---\ntype: note\n---\n[a](a.md)\n")
    navigation = navigate_bundle(tmp_path)
    assert [c.rel for c in navigation.concepts] == ["a.md", "b.md"]
    assert [(p.kind, p.file, p.line) for p in navigation.problems] == [
        (ProblemKind.CYCLE, "b.md", 4)
    ]


def test_a_link_into_a_non_utf8_file_is_a_clear_error(tmp_path: Path) -> None:
    write(tmp_path, "index.md", "[a](a.md)\n")
    (tmp_path / "a.md").write_bytes(b"---\ntype: note\n---\ncaf\xe9\n")
    with pytest.raises(BundleError, match=r"a\.md line 4: byte 0xe9 is not valid UTF-8"):
        navigate_bundle(tmp_path)


def test_links_in_fenced_code_are_not_followed() -> None:
    body = "[a](a.md)\n```\n[b](b.md)\n```\n[c](c.md 'title')\n[ref]: d.md\n![img](e.png)\n"
    assert [(link.target, link.line) for link in extract_links(body)] == [
        ("a.md", 1),
        ("c.md", 5),
        ("d.md", 6),
        ("e.png", 7),
    ]


@pytest.mark.parametrize(
    ("target", "from_rel", "rel"),
    [
        ("a.md", "index.md", "a.md"),
        ("/a.md", "x/y/z.md", "a.md"),
        ("../a.md", "x/z.md", "a.md"),
        ("./b/../a.md", "index.md", "a.md"),
        ("a.md#section", "index.md", "a.md"),
        ("my%20page.md", "index.md", "my page.md"),
        ("//a.md", "index.md", "a.md"),
    ],
)
def test_safe_resolve_keeps_links_inside(
    tmp_path: Path, target: str, from_rel: str, rel: str
) -> None:
    assert safe_resolve(tmp_path, target, from_rel=from_rel)[1] == rel


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    ("target", "from_rel"),
    [
        ("../../etc/passwd", "index.md"),
        ("..", "index.md"),
        ("../a.md", "index.md"),
        ("../../a.md", "x/z.md"),
        ("x/../../a.md", "index.md"),
        ("%2e%2e/a.md", "index.md"),
        ("..\\..\\etc\\passwd", "index.md"),
        ("file:///etc/passwd", "index.md"),
        ("C:\\Windows\\win.ini", "index.md"),
        ("a\x00.md", "index.md"),
    ],
)
def test_safe_resolve_refuses_escapes(tmp_path: Path, target: str, from_rel: str) -> None:
    with pytest.raises(BundleEscapeError):
        safe_resolve(tmp_path / "bundle", target, from_rel=from_rel) if (
            tmp_path / "bundle"
        ).mkdir() is None else None


@pytest.mark.loadbearing
def test_safe_resolve_refuses_a_symlink_out_of_the_bundle(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    write(tmp_path, "secret.md", "secret")
    (bundle / "link.md").symlink_to(tmp_path / "secret.md")
    with pytest.raises(BundleEscapeError):
        safe_resolve(bundle, "link.md")


def test_a_symlink_inside_the_bundle_is_followed_once(tmp_path: Path) -> None:
    write(tmp_path, "index.md", "[a](a.md) [alias](alias.md)\n")
    write(tmp_path, "a.md", "---\ntype: note\n---\n")
    (tmp_path / "alias.md").symlink_to(tmp_path / "a.md")
    assert [c.rel for c in navigate_bundle(tmp_path).concepts] == ["a.md"]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.lists(
            st.sampled_from(["..", ".", "a", "b", "", "%2e%2e", "c.md", "a.md"]),
            min_size=1,
            max_size=6,
        ),
        min_size=1,
        max_size=8,
    )
)
def test_navigation_never_reads_outside_the_bundle(
    tmp_path_factory: pytest.TempPathFactory, paths: list[list[str]]
) -> None:
    top = tmp_path_factory.mktemp("nav")
    write(top, "outside.md", "---\ntype: note\n---\nOUTSIDE\n")
    write(top, "a.md", "---\ntype: note\n---\nOUTSIDE\n")
    bundle = top / "bundle"
    links = " ".join(f"[x]({'/'.join(parts)})" for parts in paths)
    write(bundle, "index.md", links + "\n")
    write(bundle, "a/a.md", "---\ntype: note\n---\n" + links + "\n")
    write(bundle, "a/b/c.md", "---\ntype: note\n---\n" + links + "\n")
    navigation = navigate_bundle(bundle)
    resolved = bundle.resolve()
    for concept in navigation.concepts:
        assert (resolved / concept.rel).resolve().is_relative_to(resolved)
        assert "OUTSIDE" not in concept.body
