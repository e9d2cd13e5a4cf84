"""Claiming: content digests, claim by atomic rename without clobbering, recovery, release, sweep."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from portfolio_optimiser.daemon.claim import (
    ClaimError,
    claim,
    content_digest,
    digest_bytes,
    original_name,
    recover,
    release,
    same_filesystem,
    sweep_stale,
)


def tokens(*values: str) -> Callable[[], str]:
    """A token source that hands out ``values`` in order: collisions on demand."""
    it: Iterator[str] = iter(values)
    return lambda: next(it)


def make_bundle(folder: Path, files: dict[str, bytes]) -> Path:
    for relpath, data in files.items():
        path = folder / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return folder


BUNDLE = {"index.md": b"# A\n", "costs/02.3.md": b"---\ntype: cost-line\n---\n"}


# -- content_digest ------------------------------------------------------------------------------


def test_a_file_digest_is_plain_sha256_so_sha256sum_agrees(tmp_path: Path) -> None:
    path = tmp_path / "v.json"
    path.write_bytes(b'{"id": "c-1"}')
    expected = hashlib.sha256(b'{"id": "c-1"}').hexdigest()
    assert content_digest(path) == expected == digest_bytes(b'{"id": "c-1"}')


@pytest.mark.loadbearing
def test_a_tree_digest_ignores_the_folder_name_and_the_creation_order(tmp_path: Path) -> None:
    first = make_bundle(tmp_path / "project-a", BUNDLE)
    second = make_bundle(tmp_path / "0192abc-project-a", dict(reversed(BUNDLE.items())))
    assert content_digest(first) == content_digest(second)
    assert content_digest(first) == content_digest(first)


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    "change",
    [
        {"index.md": b"# B\n"},  # one byte differs
        {"costs/02.4.md": b"---\ntype: cost-line\n---\n"},  # a file renamed (old one kept)
        {"extra.md": b""},  # an empty file added
    ],
)
def test_a_tree_digest_changes_with_any_content_or_name(
    tmp_path: Path, change: dict[str, bytes]
) -> None:
    base = make_bundle(tmp_path / "a", BUNDLE)
    changed = make_bundle(tmp_path / "b", {**BUNDLE, **change})
    assert content_digest(base) != content_digest(changed)


def test_bytes_moved_between_files_change_the_digest(tmp_path: Path) -> None:
    left = make_bundle(tmp_path / "a", {"index.md": b"ab", "x.md": b""})
    right = make_bundle(tmp_path / "b", {"index.md": b"a", "x.md": b"b"})
    assert content_digest(left) != content_digest(right)


def test_an_empty_sub_folder_counts(tmp_path: Path) -> None:
    plain = make_bundle(tmp_path / "a", BUNDLE)
    with_dir = make_bundle(tmp_path / "b", BUNDLE)
    (with_dir / "empty").mkdir()
    assert content_digest(plain) != content_digest(with_dir)


def test_a_tree_never_digests_like_a_file_with_its_bytes(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "b", {"index.md": b"# A\n"})
    assert content_digest(bundle) != digest_bytes(b"# A\n")


def test_a_symlink_inside_a_tree_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("x")
    bundle = make_bundle(tmp_path / "b", BUNDLE)
    (bundle / "link.md").symlink_to(tmp_path / "secret")
    with pytest.raises(ClaimError, match="symbolic link"):
        content_digest(bundle)


def test_a_symlinked_entry_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real.json").write_text("{}")
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    with pytest.raises(ClaimError, match="symbolic link"):
        content_digest(tmp_path / "link.json")


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "b", BUNDLE)
    os.mkfifo(bundle / "pipe")
    with pytest.raises(ClaimError, match="pipe"):
        content_digest(bundle)


# -- claim ---------------------------------------------------------------------------------------


@pytest.mark.loadbearing
def test_claim_moves_the_entry_out_of_the_inbox_in_one_rename(tmp_path: Path) -> None:
    inbox, claimed_dir = tmp_path / "inbox", tmp_path / ".state" / "claimed"
    bundle = make_bundle(inbox / "project-a", BUNDLE)
    before = content_digest(bundle)
    inode = bundle.stat().st_ino
    claimed = claim(bundle, claimed_dir, token=tokens("t1"))
    assert claimed == claimed_dir / "t1-project-a"
    assert not bundle.exists()
    assert claimed.stat().st_ino == inode  # renamed, not copied
    assert content_digest(claimed) == before
    assert original_name(claimed) == "project-a"


@pytest.mark.loadbearing
def test_claim_never_clobbers_an_entry_with_the_same_claimed_name(tmp_path: Path) -> None:
    inbox, claimed_dir = tmp_path / "inbox", tmp_path / "claimed"
    inbox.mkdir()
    (inbox / "v.json").write_text("first")
    first = claim(inbox / "v.json", claimed_dir, token=tokens("t1"))
    (inbox / "v.json").write_text("second")
    second = claim(inbox / "v.json", claimed_dir, token=tokens("t1", "t2"))
    assert first == claimed_dir / "t1-v.json"
    assert second == claimed_dir / "t2-v.json"
    assert first.read_text() == "first"
    assert second.read_text() == "second"


@pytest.mark.loadbearing
def test_claim_never_renames_onto_an_existing_empty_folder(tmp_path: Path) -> None:
    # os.rename(dir, existing_EMPTY_dir) replaces it without an error (research F15).
    inbox, claimed_dir = tmp_path / "inbox", tmp_path / "claimed"
    bundle = make_bundle(inbox / "project-a", BUNDLE)
    (claimed_dir / "t1-project-a").mkdir(parents=True)
    claimed = claim(bundle, claimed_dir, token=tokens("t1", "t2"))
    assert claimed == claimed_dir / "t2-project-a"
    assert (claimed_dir / "t1-project-a").is_dir()
    assert list((claimed_dir / "t1-project-a").iterdir()) == []
    assert (claimed / "index.md").read_bytes() == BUNDLE["index.md"]


@pytest.mark.loadbearing
def test_a_vanished_entry_is_none(tmp_path: Path) -> None:
    assert claim(tmp_path / "inbox" / "gone", tmp_path / "claimed") is None


@pytest.mark.loadbearing
def test_a_second_claim_of_the_same_entry_finds_nothing(tmp_path: Path) -> None:
    inbox, claimed_dir = tmp_path / "inbox", tmp_path / "claimed"
    bundle = make_bundle(inbox / "project-a", BUNDLE)
    assert claim(bundle, claimed_dir) is not None
    assert claim(bundle, claimed_dir) is None
    assert len(recover(claimed_dir)) == 1


def test_claim_gives_up_with_a_sentence_when_every_name_is_taken(tmp_path: Path) -> None:
    inbox, claimed_dir = tmp_path / "inbox", tmp_path / "claimed"
    (claimed_dir / "t-v.json").mkdir(parents=True)
    (inbox / "v.json").parent.mkdir()
    (inbox / "v.json").write_text("{}")
    with pytest.raises(ClaimError, match="no free name"):
        claim(inbox / "v.json", claimed_dir, token=lambda: "t")
    assert (inbox / "v.json").exists()


def test_a_long_name_is_shortened_to_fit_with_its_token(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    entry = inbox / ("å" * 120 + ".json")  # 245 bytes in UTF-8
    entry.write_text("{}")
    claimed = claim(entry, tmp_path / "claimed")
    assert claimed is not None and claimed.exists()
    assert len(os.fsencode(claimed.name)) <= 255


def test_claim_refuses_another_file_system_with_a_sentence(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("needs a second file system at /dev/shm")
    with tempfile.TemporaryDirectory(dir=shm) as other:
        (tmp_path / "v.json").write_text("{}")
        with pytest.raises(ClaimError, match="another file system"):
            claim(tmp_path / "v.json", Path(other) / "claimed")
        assert not same_filesystem(tmp_path, Path(other))
    assert (tmp_path / "v.json").exists()


def test_same_filesystem_uses_the_nearest_existing_folder(tmp_path: Path) -> None:
    assert same_filesystem(tmp_path, tmp_path / "not" / "made" / "yet")


# -- recover -------------------------------------------------------------------------------------


@pytest.mark.loadbearing
def test_recover_lists_what_was_claimed_but_not_finished_oldest_first(tmp_path: Path) -> None:
    inbox, claimed_dir = tmp_path / "inbox", tmp_path / "claimed"
    make_bundle(inbox / "b", BUNDLE)
    make_bundle(inbox / "a", BUNDLE)
    claim(inbox / "b", claimed_dir, token=tokens("0001"))
    claim(inbox / "a", claimed_dir, token=tokens("0002"))
    (claimed_dir / ".tmp-0003").mkdir()  # a work folder of our own, not an input
    assert recover(claimed_dir) == [claimed_dir / "0001-b", claimed_dir / "0002-a"]


def test_recover_of_a_missing_folder_is_empty(tmp_path: Path) -> None:
    assert recover(tmp_path / "never-made") == []


def test_original_name_keeps_dashes_in_the_name(tmp_path: Path) -> None:
    assert original_name(tmp_path / "0192.77.ab12cd-project-a-2026.zip") == "project-a-2026.zip"
    assert original_name(tmp_path / "no-token-here") == "token-here"
    assert original_name(tmp_path / "plain") == "plain"


# -- release -------------------------------------------------------------------------------------


@pytest.mark.loadbearing
def test_release_adds_a_number_instead_of_overwriting(tmp_path: Path) -> None:
    failed = tmp_path / "failed"
    moved = []
    for n in range(3):
        claimed = tmp_path / "claimed" / f"t{n}-v.json"
        claimed.parent.mkdir(exist_ok=True)
        claimed.write_text(f"copy {n}")
        moved.append(release(claimed, failed / "v.json"))
    assert moved == [failed / "v.json", failed / "v-2.json", failed / "v-3.json"]
    assert [p.read_text() for p in moved] == ["copy 0", "copy 1", "copy 2"]
    assert list((tmp_path / "claimed").iterdir()) == []


def test_release_numbers_a_tar_gz_before_its_double_suffix(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "b.tar.gz").write_text("taken")
    (tmp_path / "b.tar.gz").write_text("new")
    assert release(tmp_path / "b.tar.gz", tmp_path / "out" / "b.tar.gz") == (
        tmp_path / "out" / "b-2.tar.gz"
    )


@pytest.mark.loadbearing
def test_release_of_a_folder_never_replaces_an_existing_empty_folder(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path / "claimed" / "t1-project.v2", BUNDLE)
    (tmp_path / "failed" / "project.v2").mkdir(parents=True)
    moved = release(bundle, tmp_path / "failed" / "project.v2")
    assert moved == tmp_path / "failed" / "project.v2-2"
    assert (moved / "index.md").exists()
    assert (tmp_path / "failed" / "project.v2").is_dir()


# -- sweep_stale ---------------------------------------------------------------------------------

NOW = 2_000_000_000.0
DAY_S = 86_400.0


def aged(path: Path, age_s: float) -> Path:
    os.utime(path, (NOW - age_s, NOW - age_s), follow_symlinks=False)
    return path


@pytest.mark.loadbearing
def test_sweep_removes_only_old_tmp_entries(tmp_path: Path) -> None:
    old_dir = tmp_path / ".tmp-old"
    (old_dir / "sub").mkdir(parents=True)
    (old_dir / "sub" / "f").write_text("x")
    for path in (old_dir / "sub" / "f", old_dir / "sub", old_dir):
        aged(path, 2 * DAY_S)
    old_file = tmp_path / ".tmp-file"
    old_file.write_text("x")
    aged(old_file, 2 * DAY_S)
    fresh = tmp_path / ".tmp-fresh"
    fresh.mkdir()
    aged(fresh, 60)
    old_input = tmp_path / "project-a"
    old_input.mkdir()
    aged(old_input, 10 * DAY_S)
    removed = sweep_stale(tmp_path, older_than_s=DAY_S, now=NOW)
    assert removed == [tmp_path / ".tmp-file", old_dir]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp-fresh", "project-a"]


def test_sweep_keeps_a_work_folder_still_written_deep_inside(tmp_path: Path) -> None:
    work = tmp_path / ".tmp-busy"
    (work / "a" / "b").mkdir(parents=True)
    (work / "a" / "b" / "part").write_text("x")
    for path in (work / "a" / "b", work / "a", work):
        aged(path, 3 * DAY_S)
    aged(work / "a" / "b" / "part", 5)
    assert sweep_stale(tmp_path, older_than_s=DAY_S, now=NOW) == []
    assert work.exists()


def test_sweep_removes_a_stale_symlink_but_not_its_target(tmp_path: Path) -> None:
    target = tmp_path / "keep"
    target.mkdir()
    link = tmp_path / ".tmp-link"
    link.symlink_to(target, target_is_directory=True)
    aged(link, 2 * DAY_S)
    aged(target, 2 * DAY_S)
    assert sweep_stale(tmp_path, older_than_s=DAY_S, now=NOW) == [link]
    assert target.is_dir()


def test_sweep_of_a_missing_folder_is_empty(tmp_path: Path) -> None:
    assert sweep_stale(tmp_path / "never", older_than_s=1.0, now=NOW) == []
