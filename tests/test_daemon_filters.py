"""The inbox filter: an allow-list of bundle and verdict shapes, a deny-list, never a symlink."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from portfolio_optimiser.daemon.filters import DENY_PATTERNS, InboxFilter, top_level_entry

# One name per deny pattern, in DENY_PATTERNS order, each one a plausible input shape (.json, a
# bundle folder or archive) so that only the deny-list can keep it out.
JUNK_NAMES = [
    ("4913", "vim write probe"),
    ("12345", "pure digits"),
    ("verdict.json.swp", "vim swap"),
    ("verdict.json.swo", "vim second swap"),
    ("verdict.json.swx", "vim swap probe"),
    ("verdict.json~", "backup"),
    (".#verdict.json", "emacs lock"),
    ("#verdict.json#", "emacs auto-save"),
    (".goutputstream-AB12CD", "gedit temporary"),
    ("verdict.json___jb_tmp___", "JetBrains temporary"),
    ("verdict.json___jb_old___", "JetBrains old copy"),
    ("bundle.zip.part", "partial download"),
    ("bundle.zip.crdownload", "Chrome partial download"),
    ("verdict.json.tmp", "generic temporary"),
    (".~lock.verdict.json#", "LibreOffice lock"),
    ("~$verdict.json", "MS Office owner file"),
    (".syncthing.verdict.json.tmp", "Syncthing temporary"),
    (".verdict.json.a1B2c3", "rsync temporary"),
    (".DS_Store", "macOS Finder"),
    ("._verdict.json", "AppleDouble"),
    ("Thumbs.db", "Windows thumbnails"),
    ("desktop.ini", "Windows folder settings"),
    (".hidden.json", "any dotfile"),
    ("verdict.json.error.txt", "our own report"),
]


@pytest.fixture
def inbox_filter() -> InboxFilter:
    return InboxFilter()


@pytest.mark.loadbearing
@pytest.mark.parametrize(("name", "why"), JUNK_NAMES, ids=[why for _, why in JUNK_NAMES])
def test_editor_and_os_temporaries_are_junk(inbox_filter: InboxFilter, name: str, why: str) -> None:
    assert inbox_filter.is_junk(name), why


@pytest.mark.loadbearing
@pytest.mark.parametrize(("name", "why"), JUNK_NAMES, ids=[why for _, why in JUNK_NAMES])
def test_junk_is_never_a_verdict_even_when_it_is_a_json_file(
    tmp_path: Path, inbox_filter: InboxFilter, name: str, why: str
) -> None:
    path = tmp_path / name
    path.write_text("{}")
    assert not inbox_filter.is_verdict_candidate(path), why


def test_every_deny_pattern_has_a_junk_name_in_this_table(inbox_filter: InboxFilter) -> None:
    import re

    for pattern in DENY_PATTERNS:
        compiled = re.compile(pattern, re.IGNORECASE)
        assert any(compiled.fullmatch(name) for name, _ in JUNK_NAMES), pattern


@pytest.mark.parametrize(
    "name",
    ["verdict.json", "c-0123abcd.json", "Verdict.JSON", "my verdict (2).json", "v1.2.json"],
)
def test_ordinary_verdict_names_are_not_junk(inbox_filter: InboxFilter, name: str) -> None:
    assert not inbox_filter.is_junk(name)


def test_a_json_file_is_a_verdict_candidate(tmp_path: Path, inbox_filter: InboxFilter) -> None:
    path = tmp_path / "verdict.json"
    path.write_text("{}")
    assert inbox_filter.is_verdict_candidate(path)
    assert not inbox_filter.is_bundle_candidate(path)


@pytest.mark.parametrize("name", ["notes.txt", "verdict.yaml", "verdict", ".json"])
def test_other_files_are_not_verdicts(tmp_path: Path, inbox_filter: InboxFilter, name: str) -> None:
    path = tmp_path / name
    path.write_text("{}")
    assert not inbox_filter.is_verdict_candidate(path)


def test_a_folder_is_never_a_verdict(tmp_path: Path, inbox_filter: InboxFilter) -> None:
    (tmp_path / "folder.json").mkdir()
    assert not inbox_filter.is_verdict_candidate(tmp_path / "folder.json")


def test_a_folder_with_index_md_at_its_root_is_a_bundle(
    tmp_path: Path, inbox_filter: InboxFilter
) -> None:
    bundle = tmp_path / "project-a"
    bundle.mkdir()
    (bundle / "index.md").write_text("# A\n")
    assert inbox_filter.is_bundle_candidate(bundle)
    assert not inbox_filter.is_verdict_candidate(bundle)


def test_a_folder_without_a_root_index_is_still_taken_so_it_can_be_reported(
    tmp_path: Path, inbox_filter: InboxFilter
) -> None:
    # Ignoring it would leave the planner waiting for ever; processing quarantines it with the
    # sentence that says what is missing (tests/test_daemon_processor.py).
    bundle = tmp_path / "project-a"
    (bundle / "inner").mkdir(parents=True)
    (bundle / "inner" / "index.md").write_text("# A\n")
    assert inbox_filter.is_bundle_candidate(bundle)


@pytest.mark.parametrize("name", ["a.zip", "a.tar.gz", "a.tgz", "A.ZIP", "a.TAR.GZ"])
def test_archives_are_bundle_candidates(
    tmp_path: Path, inbox_filter: InboxFilter, name: str
) -> None:
    path = tmp_path / name
    path.write_bytes(b"not checked here")
    assert inbox_filter.is_bundle_candidate(path)


@pytest.mark.parametrize("name", ["a.tar", "a.gz", "a.7z", "a.md", "zip"])
def test_other_files_are_not_bundles(tmp_path: Path, inbox_filter: InboxFilter, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"x")
    assert not inbox_filter.is_bundle_candidate(path)


def test_a_missing_path_is_no_candidate(tmp_path: Path, inbox_filter: InboxFilter) -> None:
    assert not inbox_filter.is_bundle_candidate(tmp_path / "gone")
    assert not inbox_filter.is_verdict_candidate(tmp_path / "gone.json")


def test_a_junk_named_folder_with_index_md_is_not_a_bundle(
    tmp_path: Path, inbox_filter: InboxFilter
) -> None:
    bundle = tmp_path / ".state"
    bundle.mkdir()
    (bundle / "index.md").write_text("# hidden\n")
    assert not inbox_filter.is_bundle_candidate(bundle)


@pytest.mark.loadbearing
def test_symlinks_are_never_candidates(tmp_path: Path, inbox_filter: InboxFilter) -> None:
    real_json = tmp_path / "real.json"
    real_json.write_text("{}")
    real_bundle = tmp_path / "real-bundle"
    real_bundle.mkdir()
    (real_bundle / "index.md").write_text("# A\n")
    real_zip = tmp_path / "real.zip"
    real_zip.write_bytes(b"PK")
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "linked.json").symlink_to(real_json)
    (inbox / "linked-bundle").symlink_to(real_bundle, target_is_directory=True)
    (inbox / "linked.zip").symlink_to(real_zip)
    assert not inbox_filter.is_verdict_candidate(inbox / "linked.json")
    assert not inbox_filter.is_bundle_candidate(inbox / "linked-bundle")
    assert not inbox_filter.is_bundle_candidate(inbox / "linked.zip")


def test_a_symlinked_folder_is_never_taken(tmp_path: Path, inbox_filter: InboxFilter) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "index.md").write_text("# A\n")
    (tmp_path / "link").symlink_to(real)
    assert not inbox_filter.is_bundle_candidate(tmp_path / "link")


@pytest.mark.loadbearing
def test_the_daemons_own_error_reports_are_ignored(
    tmp_path: Path, inbox_filter: InboxFilter
) -> None:
    report = tmp_path / "verdict.json.error.txt"
    report.write_text("line 3: trailing comma")
    assert inbox_filter.is_junk(report.name)
    assert not inbox_filter.is_verdict_candidate(report)
    assert not inbox_filter.is_bundle_candidate(report)


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ("inbox/project-a", "inbox/project-a"),
        ("inbox/project-a/index.md", "inbox/project-a"),
        ("inbox/project-a/deep/er/cost.md", "inbox/project-a"),
        ("inbox/verdict.json", "inbox/verdict.json"),
        ("inbox/./project-a/x.md", "inbox/project-a"),
        ("inbox", None),
        ("inbox/", None),
        ("outbox/project-a", None),
        ("inbox-other/project-a", None),
        ("inbox/../outbox/x", None),
    ],
)
def test_top_level_entry_maps_an_event_path_to_its_inbox_entry(
    tmp_path: Path, event: str, expected: str | None
) -> None:
    inbox = tmp_path / "inbox"
    result = top_level_entry(inbox, os.path.join(tmp_path, event))  # noqa: PTH118 - a raw event string
    assert result == (None if expected is None else tmp_path / expected)


def test_top_level_entry_does_not_follow_symlinks(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (inbox / "link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    assert top_level_entry(inbox, inbox / "link" / "x.md") == inbox / "link"
