"""Files published together (``published_together``): none in place before all of them are on
disk, each whole, and nothing at all when the block fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from portfolio_optimiser import _atomic
from portfolio_optimiser._atomic import publish_text, published_together


def test_nothing_is_in_place_before_the_block_ends_and_all_of_it_is_after(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("old a", encoding="utf-8")
    with published_together():
        publish_text(tmp_path / "a.md", "new a")
        publish_text(tmp_path / "sub" / "b.md", "new b")
        assert (tmp_path / "a.md").read_text("utf-8") == "old a"
        assert not (tmp_path / "sub" / "b.md").exists()
    assert (tmp_path / "a.md").read_text("utf-8") == "new a"
    assert (tmp_path / "sub" / "b.md").read_text("utf-8") == "new b"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.md", "b.md", "sub"]  # no temps


def test_every_file_is_on_disk_before_the_first_is_renamed_into_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every file's bytes flushed before any name changes: a power cut then leaves every file
    old or new, never a name over bytes that never reached the disk."""
    seen: list[str] = []
    real_flush, real_fsync_dir = _atomic.flush_files, _atomic.fsync_dir

    def flush(files: list[Path], folder: Path) -> None:
        in_place = [p.name for p in tmp_path.rglob("*.md")]
        seen.append(f"flush of {len(files)} with {sorted(in_place)} in place")
        real_flush(files, folder)

    def fsync_dir(folder: Path) -> None:
        seen.append(f"folder {folder.name}")
        real_fsync_dir(folder)

    monkeypatch.setattr(_atomic, "flush_files", flush)
    monkeypatch.setattr(_atomic, "fsync_dir", fsync_dir)
    with published_together():
        publish_text(tmp_path / "a.md", "a")
        publish_text(tmp_path / "sub" / "b.md", "b")
        publish_text(tmp_path / "c.md", "c")
    assert seen == ["flush of 3 with [] in place", f"folder {tmp_path.name}", "folder sub"]


@pytest.mark.loadbearing
def test_a_few_files_are_flushed_each_and_many_with_one_flush_of_their_file_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verdict's few files do not wait for every other writer's unflushed bytes (the class
    pages a refit stages meanwhile): they are flushed one by one; a refit's thousands of pages,
    with one flush of the file system, not a journal commit each."""
    synced: list[str] = []
    flushed: list[Path] = []
    real_sync, real_flush = _atomic.os.fdatasync, _atomic.flush_file_system

    def fdatasync(fd: int) -> None:
        synced.append(Path(f"/proc/self/fd/{fd}").readlink().name)
        real_sync(fd)

    def flush(folder: Path) -> None:
        flushed.append(folder)
        real_flush(folder)

    monkeypatch.setattr(_atomic.os, "fdatasync", fdatasync)
    monkeypatch.setattr(_atomic, "flush_file_system", flush)
    with published_together():
        for n in range(3):
            publish_text(tmp_path / f"{n}.md", "verdict")
    assert (len(synced), flushed) == (3, [])
    assert all(name.endswith(".tmp") for name in synced)  # the bytes, before their names
    with published_together():
        for n in range(_atomic.FEW_FILES + 1):
            publish_text(tmp_path / "pages" / f"{n}.md", "page")
    assert (len(synced), flushed) == (3, [tmp_path / "pages"])


def test_a_block_that_fails_publishes_nothing(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("old a", encoding="utf-8")
    with pytest.raises(RuntimeError), published_together():
        publish_text(tmp_path / "a.md", "new a")
        publish_text(tmp_path / "b.md", "new b")
        raise RuntimeError("the promotion was refused halfway")
    assert (tmp_path / "a.md").read_text("utf-8") == "old a"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.md"]


def test_a_file_published_twice_keeps_its_last_bytes(tmp_path: Path) -> None:
    with published_together(), published_together():  # nested: the outer block's
        publish_text(tmp_path / "a.md", "first")
        publish_text(tmp_path / "a.md", "second")
        assert not (tmp_path / "a.md").exists()
    assert (tmp_path / "a.md").read_text("utf-8") == "second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.md"]


def test_an_exclusive_publish_is_never_deferred(tmp_path: Path) -> None:
    with published_together():
        publish_text(tmp_path / "record.json", "{}", exclusive=True)
        assert (tmp_path / "record.json").is_file()
        with pytest.raises(FileExistsError):
            publish_text(tmp_path / "record.json", "{}", exclusive=True)


def test_a_block_a_later_flush_put_on_disk_is_not_flushed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records committed inside a block, many enough for a flush of the file system: that flush
    began after the block's files were written, so it put them on disk too, and the block does
    not flush again; a file written after that flush is flushed at the block's end."""
    flushes: list[Path] = []
    real_flush, real_flush_files = _atomic.flush_file_system, _atomic.flush_files

    def flush(folder: Path) -> None:
        flushes.append(folder)
        real_flush(folder)

    def flush_files(files: list[Path], folder: Path) -> None:
        flushes.append(folder)
        real_flush_files(files, folder)

    monkeypatch.setattr(_atomic, "flush_file_system", flush)
    monkeypatch.setattr(_atomic, "flush_files", flush_files)
    with published_together():
        publish_text(tmp_path / "a.md", "a")
        _atomic.flush_file_system(tmp_path)  # as the records' commit does
    assert len(flushes) == 1
    assert (tmp_path / "a.md").read_text("utf-8") == "a"
    with published_together():
        publish_text(tmp_path / "b.md", "b")
        _atomic.flush_file_system(tmp_path)
        publish_text(tmp_path / "c.md", "c")  # written after that flush
    assert len(flushes) == 3
