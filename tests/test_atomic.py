"""Atomic publishing: readers see the old bytes or the new bytes, and nothing is left behind."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import NoReturn

import pytest

from portfolio_optimiser._atomic import publish_atomic, publish_text


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_publish_atomic_writes_the_bytes(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    data = bytes(range(256)) * 3
    publish_atomic(target, data)
    assert target.read_bytes() == data
    assert names(tmp_path) == ["out.bin"]


def test_publish_atomic_writes_an_empty_file(tmp_path: Path) -> None:
    target = tmp_path / "empty"
    publish_atomic(target, b"")
    assert target.read_bytes() == b""


def test_publish_atomic_replaces_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    target.write_bytes(b"old and rather longer than the new content")
    publish_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert names(tmp_path) == ["out.json"]


def test_publish_atomic_gives_the_file_the_requested_mode(tmp_path: Path) -> None:
    target = tmp_path / "out"
    publish_atomic(target, b"x")
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    publish_atomic(target, b"y", mode=0o600)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_exclusive_publish_creates_a_new_file(tmp_path: Path) -> None:
    target = tmp_path / "new.json"
    publish_atomic(target, b"first", exclusive=True)
    assert target.read_bytes() == b"first"
    assert names(tmp_path) == ["new.json"]


def test_exclusive_publish_refuses_an_existing_file_and_leaves_it_unchanged(
    tmp_path: Path,
) -> None:
    target = tmp_path / "taken.json"
    target.write_bytes(b"original")
    inode = target.stat().st_ino
    with pytest.raises(FileExistsError):
        publish_atomic(target, b"intruder", exclusive=True)
    assert target.read_bytes() == b"original"
    assert target.stat().st_ino == inode
    assert names(tmp_path) == ["taken.json"]


def test_publish_atomic_creates_missing_parent_folders(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c" / "out.txt"
    publish_atomic(target, b"deep")
    assert target.read_bytes() == b"deep"
    assert names(target.parent) == ["out.txt"]


def test_publish_text_writes_utf8_with_newlines_as_given(tmp_path: Path) -> None:
    target = tmp_path / "page.md"
    publish_text(target, "Blåbær\nline two\n")
    assert target.read_bytes() == "Blåbær\nline two\n".encode()


def test_publish_text_honours_exclusive(tmp_path: Path) -> None:
    target = tmp_path / "page.md"
    target.write_text("mine", encoding="utf-8")
    with pytest.raises(FileExistsError):
        publish_text(target, "theirs", exclusive=True)
    assert target.read_text(encoding="utf-8") == "mine"


# --- failures leave nothing behind --------------------------------------------------------------


def _boom(*_args: object, **_kwargs: object) -> NoReturn:
    raise OSError(5, "Input/output error (simulated)")


def _existing(tmp_path: Path) -> Path:
    (tmp_path / "neighbour.txt").write_bytes(b"neighbour")
    target = tmp_path / "out.json"
    target.write_bytes(b"original")
    return target


def test_a_failed_fsync_leaves_no_temporary_file_and_the_old_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = _existing(tmp_path)
    monkeypatch.setattr(os, "fsync", _boom)
    with pytest.raises(OSError, match="simulated"):
        publish_atomic(target, b"new")
    monkeypatch.undo()
    assert names(tmp_path) == ["neighbour.txt", "out.json"]
    assert target.read_bytes() == b"original"


def test_a_failed_rename_leaves_no_temporary_file_and_the_old_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = _existing(tmp_path)
    monkeypatch.setattr(Path, "replace", _boom)
    with pytest.raises(OSError, match="simulated"):
        publish_atomic(target, b"new")
    monkeypatch.undo()
    assert names(tmp_path) == ["neighbour.txt", "out.json"]
    assert target.read_bytes() == b"original"


def test_a_failed_fsync_of_a_new_file_leaves_the_folder_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "neighbour.txt").write_bytes(b"neighbour")
    monkeypatch.setattr(os, "fsync", _boom)
    with pytest.raises(OSError):
        publish_atomic(tmp_path / "fresh.json", b"new", exclusive=True)
    monkeypatch.undo()
    assert names(tmp_path) == ["neighbour.txt"]


def test_an_interrupt_during_the_write_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = _existing(tmp_path)

    def interrupt(_fd: int) -> NoReturn:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupt)
    with pytest.raises(KeyboardInterrupt):
        publish_atomic(target, b"new")
    monkeypatch.undo()
    assert names(tmp_path) == ["neighbour.txt", "out.json"]
    assert target.read_bytes() == b"original"


def test_a_refused_exclusive_publish_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = _existing(tmp_path)
    with pytest.raises(FileExistsError):
        publish_atomic(target, b"new", exclusive=True)
    assert names(tmp_path) == ["neighbour.txt", "out.json"]


def test_a_successful_publish_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = _existing(tmp_path)
    for round_ in range(5):
        publish_atomic(target, f"round {round_}".encode())
    assert names(tmp_path) == ["neighbour.txt", "out.json"]
    assert target.read_bytes() == b"round 4"


SHORT_WRITE = """
import resource, signal, sys
from pathlib import Path
from portfolio_optimiser._atomic import stage_bytes

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, not the process
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
try:
    stage_bytes(Path(sys.argv[1]) / "record.json", b"x" * 5000)
except OSError as exc:
    print("refused", exc.errno)
else:
    print("written")
"""


def test_a_file_the_disk_takes_only_part_of_is_no_file(tmp_path: Path) -> None:
    """A write can take fewer bytes than it is given (a full disk, a file size limit): the
    temporary file is all of them or an error and no file, never a torn one that a commit would
    then link under a record's name. In a process of its own, under a file size limit."""
    import errno
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", SHORT_WRITE, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stdout.split() == ["refused", str(errno.EFBIG)], done.stdout + done.stderr
    assert names(tmp_path) == []
