"""Publish a file atomically: a reader sees the old bytes or the new bytes, never half of either.

The sequence is the one Maildir and every careful writer use: write a temporary file in the
destination's own folder (so the rename stays on one file system), fsync it, rename it over the
destination, then fsync the folder so the rename itself survives a power cut.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

__all__ = ["fsync_dir", "publish_atomic", "publish_text", "write_tree"]


def fsync_dir(directory: Path) -> None:
    """Make a rename or create inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish_atomic(path: Path, data: bytes, *, exclusive: bool = False, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` atomically and durably.

    With ``exclusive`` the publish refuses to replace an existing file (``FileExistsError``): the
    link(2) of the finished temporary file is atomic and fails if the name is taken.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.chmod(mode)
        if exclusive:
            os.link(tmp, path)
            tmp.unlink()
        else:
            tmp.replace(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


def publish_text(path: Path, text: str, *, exclusive: bool = False) -> None:
    """``publish_atomic`` for UTF-8 text with ``\\n`` line ends."""
    publish_atomic(path, text.encode("utf-8"), exclusive=exclusive)


def publish_tree(target: Path, files: Mapping[str, str], *, staging: Path) -> Path:
    """The folder ``target``, with ``files``, whole or not at all: written under ``staging`` (a
    sibling nobody reads), flushed, then renamed into place; ``staging`` never outlives it."""
    shutil.rmtree(staging, ignore_errors=True)
    try:
        write_tree(staging, files)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    fsync_dir(target.parent)
    return target


def write_tree(folder: Path, files: Mapping[str, str]) -> None:
    """Write ``files`` (relative path → UTF-8 text) under ``folder``, a staging folder nobody
    reads, and make them durable with one flush: the caller renames the folder into place after.

    One ``fsync`` per file costs a journal commit each (2.6 ms a file here: 50 s for the 20 000
    posts of a large NS 3459 tender); ``os.sync`` flushes them all at once.
    """
    for rel, text in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    os.sync()
