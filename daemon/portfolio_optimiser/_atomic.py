"""Publish a file atomically: a reader sees the old bytes or the new bytes, never half of either.

The sequence is the one Maildir and every careful writer use: write a temporary file in the
destination's own folder (so the rename stays on one file system), fsync it, rename it over the
destination, then fsync the folder so the rename itself survives a power cut.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Collection, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from ._libc import libc_function

__all__ = [
    "flush_file_system",
    "flush_files",
    "fsync_dir",
    "publish_atomic",
    "publish_text",
    "published_together",
    "stage_bytes",
    "sweep_temporaries",
    "write_tree",
]

_TEMPORARY: Final = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")
"""A temporary file this module writes beside a file's name (``stage_bytes``): ``mkstemp``'s
eight random characters between the name and ``.tmp``."""


def fsync_dir(directory: Path) -> None:
    """Make a rename or create inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_FLUSHED: dict[int, int] = {}
"""By file system (``st_dev``): when the last flush of it that succeeded began
(``time.monotonic_ns``). Whatever was written before then is on disk."""
_FLUSHED_LOCK = threading.Lock()


def flush_file_system(folder: Path) -> None:
    """Every file written so far on ``folder``'s file system on disk, at once: ``syncfs`` where
    the C library has it (Linux), else ``sync``. One flush for many files, where an fsync each
    costs a journal commit each."""
    began = time.monotonic_ns()
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        device = os.fstat(fd).st_dev
        syncfs = libc_function("syncfs")
        if syncfs is None:
            os.sync()
        elif syncfs(fd) != 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error), str(folder))
    finally:
        os.close(fd)
    with _FLUSHED_LOCK:
        _FLUSHED[device] = max(_FLUSHED.get(device, began), began)


FEW_FILES: Final = 8
"""Up to this many files are flushed one by one (an fdatasync each); more, with one flush of
their file system."""


def flush_files(files: Collection[Path], folder: Path) -> None:
    """``files`` (written in ``folder``'s file system) on disk. A few are flushed one by one: a
    flush of the whole file system would also wait for every other writer's unflushed bytes (the
    class pages a refit stages while an expert's verdict is taken in). Many at once: one flush."""
    if len(files) > FEW_FILES:
        flush_file_system(folder)
        return
    sync = getattr(os, "fdatasync", os.fsync)  # macOS has fsync only
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            sync(fd)
        finally:
            os.close(fd)


def _flushed_since(device: int, written: int) -> bool:
    """Whether a flush of this file system began after ``written`` (``time.monotonic_ns``)."""
    with _FLUSHED_LOCK:
        return _FLUSHED.get(device, -1) > written


def stage_bytes(path: Path, data: bytes, mode: int = 0o644) -> Path:
    """``data`` in a new temporary file beside ``path``, nothing flushed: a reader takes no
    temporary file for the file it stands beside. All of it or an error, and then no file: a
    write can take fewer bytes than it is given (a full disk, a file size limit)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:  # its write takes every byte, or raises
            file.write(data)
            os.fchmod(file.fileno(), mode)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def sweep_temporaries(
    folder: Path, *, older_than_s: float, now: float, keep: Collection[Path] = ()
) -> list[Path]:
    """Remove the temporary files in ``folder`` (not below it) that a process killed between
    writing and renaming them left, untouched for ``older_than_s`` (``now``: seconds since the
    epoch, as mtimes are), but those in ``keep`` (still to be published); returns them. No reader
    takes a temporary file for the file it stands beside, so they only take space."""
    removed: list[Path] = []
    try:
        with os.scandir(folder) as listing:
            found = [Path(e.path) for e in listing if _TEMPORARY.fullmatch(e.name) and e.is_file()]
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for path in sorted(set(found) - set(keep)):
        with contextlib.suppress(FileNotFoundError):
            if now - path.stat().st_mtime >= older_than_s:
                path.unlink()
                removed.append(path)
    return removed


@dataclass
class _Together:
    staged: dict[Path, Path] = field(default_factory=dict)
    """Each file published in the block, by its name: the temporary file holding its bytes."""
    written: int = 0
    """When the last of them was written (``time.monotonic_ns``)."""


_TOGETHER: ContextVar[_Together | None] = ContextVar("_TOGETHER", default=None)


@contextlib.contextmanager
def published_together() -> Iterator[None]:
    """Every ``publish_atomic`` in the block is made durable together, at its end: each file's
    bytes are written beside it unflushed; then they are all flushed (``flush_files``), each is
    renamed into place, and each folder named into is flushed once. As with
    ``publish_atomic``, a reader sees each file whole, old or new, and a power cut leaves each
    old or new; and none is in place before all of them are on disk. A file published twice
    keeps the last bytes. The block must not read back a file it published (it is renamed into
    place at the end), nor publish ``exclusive`` (which is never deferred). Nested blocks are
    the outer one's. An exception in the block publishes nothing of it."""
    if _TOGETHER.get() is not None:
        yield
        return
    batch = _Together()
    token = _TOGETHER.set(batch)
    try:
        yield
    except BaseException:
        for tmp in batch.staged.values():
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        raise
    finally:
        _TOGETHER.reset(token)
    if not batch.staged:
        return
    # The files of each file system they are on flushed (the wiki and the outbox may be apart),
    # unless a flush of it began after the last file was written (records committed in the
    # block, many enough for a flush of their file system, put these files on disk too).
    folders = sorted({path.parent for path in batch.staged})
    device = {folder: folder.stat().st_dev for folder in folders}
    on: dict[int, list[Path]] = {}
    for path, tmp in batch.staged.items():
        on.setdefault(device[path.parent], []).append(tmp)
    for device_id, tmps in on.items():
        if not _flushed_since(device_id, batch.written):
            flush_files(tmps, tmps[0].parent)
    for path, tmp in batch.staged.items():
        tmp.replace(path)
    for folder in folders:
        fsync_dir(folder)


def publish_atomic(path: Path, data: bytes, *, exclusive: bool = False, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` atomically and durably (at the end of a ``published_together``
    block, when one is open).

    With ``exclusive`` the publish refuses to replace an existing file (``FileExistsError``): the
    link(2) of the finished temporary file is atomic and fails if the name is taken.
    """
    batch = _TOGETHER.get()
    if batch is not None and not exclusive:
        earlier = batch.staged.pop(path, None)
        if earlier is not None:
            earlier.unlink(missing_ok=True)
        batch.staged[path] = stage_bytes(path, data, mode)
        batch.written = time.monotonic_ns()
        return
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
    posts of a large NS 3459 tender); ``flush_file_system`` flushes them all at once.
    """
    for rel, text in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    flush_file_system(folder)
