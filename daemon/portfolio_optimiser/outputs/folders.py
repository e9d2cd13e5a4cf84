"""A folder of outputs published whole: a reader sees no folder or a whole one, never part.

Decides: how a folder of files appears. It is built in a hidden sibling
``.tmp-<name>-<random>/``, every file and folder is fsynced, then it is renamed into place without
replacing anything (``renameat2(RENAME_NOREPLACE)``). A target that already exists is accepted
only if it holds the same bytes (the same run written again after a crash); anything else is
:class:`OutputExists`. A staged folder moves into the outbox the same way, across file systems by
publishing its files again.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import secrets
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from portfolio_optimiser._atomic import fsync_dir
from portfolio_optimiser.errors import UserError

__all__ = ["OutputExists", "move_run_folder", "publish_folder"]


class OutputExists(UserError, FileExistsError):
    """The run folder already exists with different content; nothing was replaced."""

    def __init__(self, folder: Path) -> None:
        super().__init__(
            f"{folder} already exists and holds different outputs; nothing was replaced. "
            "Use a new run id, or move the old folder away if it should be written again"
        )
        self.folder = folder


def move_run_folder(staged: Path, target: Path) -> Path:
    """Move a staged run folder to ``target`` whole; return ``target``.

    Idempotent over its own bytes: moved before (``staged`` gone, ``target`` there) or the same
    bytes already at ``target`` is done; other bytes at ``target`` raise :class:`OutputExists`.
    Across file systems (a state directory elsewhere) the files are published again, atomically.
    """
    if not staged.exists():
        if target.is_dir():
            return target
        raise FileNotFoundError(f"{staged}: the staged run folder is missing")
    created = _make_parents(target.parent)
    try:
        moved = _rename_noreplace(staged, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        files = _tree(staged)
        if files is None:
            raise OutputExists(staged) from None
        publish_folder(files, parent=target.parent, name=target.name)
        shutil.rmtree(staged)
        return target
    if not moved:
        if _tree(target) != _tree(staged):
            raise OutputExists(target)
        shutil.rmtree(staged)
        return target
    fsync_dir(target.parent)
    fsync_dir(staged.parent)
    for folder in created:
        fsync_dir(folder.parent)
    return target


def publish_folder(files: Mapping[str, bytes], *, parent: Path, name: str) -> Path:
    """Publish ``files`` (by `/`-separated relative path) as ``parent/name``, whole; return it."""
    target = parent / name
    created = _make_parents(parent)
    tmp = _make_tmp(parent, name)
    try:
        for rel, data in files.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_file(path, data)
        # Deepest folders first, so each folder's entries are durable before it is renamed.
        inner = {
            folder
            for rel in files
            for folder in (tmp / rel).parents
            if folder != tmp and folder.is_relative_to(tmp)
        }
        for folder in sorted(inner, key=lambda p: (-len(p.parts), p)):
            fsync_dir(folder)
        fsync_dir(tmp)
        if not _rename_noreplace(tmp, target):
            if _tree(target) == dict(files):
                shutil.rmtree(tmp)
                return target  # the same run written before a crash: already done
            raise OutputExists(target)
        fsync_dir(parent)
        for folder in created:
            fsync_dir(folder.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _make_parents(parent: Path) -> list[Path]:
    """Create ``parent`` and its missing ancestors; return the ones created, outermost first."""
    missing = [p for p in (parent, *parent.parents) if not p.exists()]
    parent.mkdir(parents=True, exist_ok=True)
    return missing[::-1]


def _make_tmp(parent: Path, name: str) -> Path:
    while True:
        # Hidden, and beside the target so the rename stays on one file system.
        tmp = parent / f".tmp-{name}-{secrets.token_hex(4)}"
        try:
            tmp.mkdir(mode=0o755)
        except FileExistsError:
            continue
        return tmp


def _write_file(path: Path, data: bytes) -> None:
    with path.open("xb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _tree(folder: Path) -> dict[str, bytes] | None:
    """A folder's files by relative path, or None when it holds anything but files and folders."""
    found: dict[str, bytes] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            return None
        if path.is_file():
            found[path.relative_to(folder).as_posix()] = path.read_bytes()
        elif not path.is_dir():
            return None
    return found


_AT_FDCWD: Final = -100
_RENAME_NOREPLACE: Final = 1


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    """Linux renameat2(2), which refuses to replace the target atomically; None where absent."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function: Any = libc.renameat2
    except (OSError, AttributeError, TypeError):
        return None
    function.argtypes = (
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    )
    function.restype = ctypes.c_int
    native: Callable[..., int] = function
    return native


def _rename_noreplace(src: Path, dst: Path) -> bool:
    """Move ``src`` to ``dst`` unless ``dst`` exists: True when moved, False when it existed."""
    native = _renameat2()
    if native is not None:
        if native(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return True
        code = ctypes.get_errno()
        if code == errno.EEXIST:
            return False
        if code not in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
            raise OSError(code, os.strerror(code), str(dst))
    # Without renameat2 (another OS, or a file system without the flag): rename(2) never replaces
    # a non-empty folder, and the check below keeps it off an existing empty one too, save for a
    # race with a process creating an empty folder of this very name in between.
    if dst.exists() or dst.is_symlink():
        return False
    try:
        src.rename(dst)
    except OSError as exc:
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
            return False
        raise
    return True
