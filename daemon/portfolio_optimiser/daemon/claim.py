"""Taking an entry out of the inbox: content digests, claim by atomic rename, recovery, release.

Decides: an input's identity (:func:`content_digest`, SHA-256 over a file's bytes, or over a tree's
sorted relative paths and bytes, so the folder's own name does not count); how a bundle leaves the
inbox (:func:`claim`: one ``rename`` into a daemon-owned folder on the same file system, so a
second claimer finds nothing — research/daemon.md §3, F8); what a restart must finish
(:func:`recover`); where a claimed entry goes next without overwriting anything (:func:`release`);
and which Maildir-style ``.tmp-*`` leftovers are stale (:func:`sweep_stale`).

Never follows a symlink (a digest refuses one), never renames onto an existing path (``rename``
silently replaces a file or an EMPTY folder — F15), never copies across file systems (it refuses
with a sentence instead), and never decides whether an entry is ready or what to do with it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import os
import secrets
import shutil
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from portfolio_optimiser._atomic import fsync_dir
from portfolio_optimiser.errors import UserError

__all__ = [
    "STALE_TEMPORARY_S",
    "TMP_PREFIX",
    "ClaimError",
    "claim",
    "content_digest",
    "digest_bytes",
    "original_name",
    "recover",
    "release",
    "same_filesystem",
    "sweep_stale",
]

# Work folders built beside their destination and renamed into place when complete (Maildir tmp/).
TMP_PREFIX: Final = ".tmp-"
STALE_TEMPORARY_S: Final = 3600.0
"""How old a temporary file or folder is before a start takes it for a killed process's (Maildir
waits 36 h for a whole message; a file here is renamed within seconds of being written)."""

_CHUNK_BYTES: Final = 1 << 20
_NAME_MAX_BYTES: Final = 255  # NAME_MAX on Linux, macOS and the BSDs
_MAX_NAME_TRIES: Final = 1000
# A tree digest starts with this so that it can never be read as some other scheme's digest.
_TREE_TAG: Final = b"portfolio-optimiser tree v1\0"
_O_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK: Final = getattr(os, "O_NONBLOCK", 0)


class ClaimError(UserError):
    """An entry cannot be digested, claimed or released; the message says why and what to do."""


def digest_bytes(data: bytes) -> str:
    """The digest of a file holding ``data``: plain SHA-256, so ``sha256sum`` gives the same."""
    return hashlib.sha256(data).hexdigest()


def _file_sha256(path: Path) -> bytes:
    # O_NOFOLLOW closes the gap between the lstat that saw a file and this open; O_NONBLOCK keeps
    # a FIFO swapped in meanwhile from hanging the daemon until the fstat below refuses it.
    try:
        fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ClaimError(f"{path} is a symbolic link; replace it with a real file") from None
        raise
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ClaimError(f"{path} is not a regular file; remove it from the inbox")
        digest = hashlib.sha256()
        while chunk := handle.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.digest()


def _refuse_special(path: Path, mode: int) -> None:
    if stat.S_ISLNK(mode):
        raise ClaimError(
            f"{path} is a symbolic link, which an input may not contain; replace it with the "
            "file or folder it points to"
        )
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise ClaimError(f"{path} is a device, pipe or socket, which an input may not contain")


def _tree(root: Path) -> list[tuple[bytes, Path, bool]]:
    found: list[tuple[bytes, Path, bool]] = []
    pending = [(root, "")]
    while pending:
        folder, prefix = pending.pop()
        with os.scandir(folder) as listing:
            for child in listing:
                relpath = f"{prefix}{child.name}"
                mode = child.stat(follow_symlinks=False).st_mode
                _refuse_special(Path(child.path), mode)
                is_dir = stat.S_ISDIR(mode)
                found.append((os.fsencode(relpath), Path(child.path), is_dir))
                if is_dir:
                    pending.append((Path(child.path), f"{relpath}/"))
    # Sorted by encoded path so the digest does not depend on the order the disk lists names in.
    found.sort()
    return found


def content_digest(path: Path) -> str:
    """SHA-256 hex of a file's bytes, or of a folder tree's sorted relative paths and bytes.

    Deterministic, and blind to the folder's own name (a claimed bundle hashes like the dropped
    one). Empty sub-folders count. Raises :class:`ClaimError` for a symlink or special file.
    """
    mode = path.lstat().st_mode
    _refuse_special(path, mode)
    if stat.S_ISREG(mode):
        return _file_sha256(path).hex()
    digest = hashlib.sha256(_TREE_TAG)
    for encoded, child, is_dir in _tree(path):
        # Length-prefixed, so no path or content can be read as part of its neighbour.
        digest.update(b"D" if is_dir else b"F")
        digest.update(len(encoded).to_bytes(8, "big"))
        digest.update(encoded)
        if not is_dir:
            digest.update(_file_sha256(child))
    return digest.hexdigest()


def _existing_ancestor(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return path


def same_filesystem(a: Path, b: Path) -> bool:
    """True when ``a`` and ``b`` (or their nearest existing folders) share one file system."""
    return _existing_ancestor(a).stat().st_dev == _existing_ancestor(b).stat().st_dev


def _unique_token() -> str:
    # Maildir's time.pid.random: hex time first so a listing sorts in claim order; never a "-",
    # which separates the token from the original name.
    return f"{time.time_ns():016x}.{os.getpid()}.{secrets.token_hex(3)}"


def _fit(name: str, budget: int) -> str:
    while len(os.fsencode(name)) > budget:
        name = name[:-1]
    return name


def claim(
    entry: Path, claimed_dir: Path, *, token: Callable[[], str] = _unique_token
) -> Path | None:
    """Rename ``entry`` to ``claimed_dir/<token>-<name>``; None if it vanished (claimed elsewhere).

    The target never exists beforehand: ``rename`` onto an existing EMPTY folder replaces it
    without a word, so an existing name means "draw another token", never "go ahead".
    Raises :class:`ClaimError` if ``claimed_dir`` is on another file system.
    """
    try:
        source_dev = entry.lstat().st_dev
    except FileNotFoundError:
        return None
    claimed_dir.mkdir(parents=True, exist_ok=True)
    if source_dev != claimed_dir.stat().st_dev:
        raise ClaimError(
            f"cannot claim {entry}: the claim folder {claimed_dir} is on another file system, so "
            "the move would be a copy, not an atomic rename; put the state directory on the "
            "inbox's file system"
        )
    for _ in range(_MAX_NAME_TRIES):
        prefix = f"{token()}-"
        target = claimed_dir / f"{prefix}{_fit(entry.name, _NAME_MAX_BYTES - len(prefix))}"
        if os.path.lexists(target):
            continue
        try:
            entry.rename(target)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            # Bind mounts of one file system share st_dev yet refuse renames between them
            # (systemd's ReadWritePaths= makes such mounts).
            raise ClaimError(
                f"cannot claim {entry.name}: {claimed_dir} is on another mount than the inbox, so the "
                "move would not be an atomic rename; keep the workspace and its state on one mount"
            ) from None
        # Durable at once: after a power cut the entry is in claimed/ (recover() finds it) and
        # not also back in the inbox.
        fsync_dir(claimed_dir)
        fsync_dir(entry.parent)
        return target
    raise ClaimError(
        f"cannot claim {entry}: no free name in {claimed_dir} after {_MAX_NAME_TRIES} tries; "
        "clear out old entries there"
    )


def original_name(claimed: Path) -> str:
    """The name an entry had in the inbox, from its claimed name ``<token>-<name>``."""
    token, separator, name = claimed.name.partition("-")
    return name if separator and token else claimed.name


def recover(claimed_dir: Path) -> list[Path]:
    """Everything claimed but not finished (a crash or kill mid-item), oldest claim first."""
    try:
        children = sorted(claimed_dir.iterdir())
    except FileNotFoundError:
        return []
    # Hidden names are work folders of our own (TMP_PREFIX), never a claimed input.
    return [child for child in children if not child.name.startswith(".")]


def _numbered(dest: Path, number: int, *, is_dir: bool) -> Path:
    name = dest.name
    if is_dir:
        stem, suffix = name, ""
    elif name.lower().endswith(".tar.gz") and len(name) > len(".tar.gz"):
        stem, suffix = name[: -len(".tar.gz")], name[-len(".tar.gz") :]
    else:
        suffix = Path(name).suffix
        stem = name[: len(name) - len(suffix)]
    return dest.with_name(f"{stem}-{number}{suffix}")


def release(claimed: Path, dest: Path) -> Path:
    """Move ``claimed`` to ``dest``, or ``dest-2``, ``dest-3``… if taken; returns where it went.

    Files go by ``link`` + ``unlink`` (the link fails atomically if the name is taken); folders
    cannot be hard-linked, so a folder goes by ``rename`` to a name checked free just before.
    """
    is_dir = stat.S_ISDIR(claimed.lstat().st_mode)
    dest.parent.mkdir(parents=True, exist_ok=True)
    for number in itertools.count(1):
        if number > _MAX_NAME_TRIES:
            break
        target = dest if number == 1 else _numbered(dest, number, is_dir=is_dir)
        try:
            if is_dir:
                if os.path.lexists(target):
                    continue
                claimed.rename(target)
            else:
                os.link(claimed, target, follow_symlinks=False)
                claimed.unlink()
        except FileExistsError:
            continue
        except OSError as exc:
            if exc.errno == errno.ENOTEMPTY:
                continue  # a folder appeared at the name between the check and the rename
            if exc.errno == errno.EXDEV:
                raise ClaimError(
                    f"cannot move {claimed} to {dest}: they are on different file systems; keep "
                    "the state directory and the outbox on the inbox's file system"
                ) from None
            raise
        fsync_dir(target.parent)
        fsync_dir(claimed.parent)
        return target
    raise ClaimError(
        f"cannot move {claimed}: {dest} and {_MAX_NAME_TRIES} numbered names are taken"
    )


def _newest_mtime_s(path: Path) -> float:
    info = path.lstat()
    newest = info.st_mtime
    if stat.S_ISDIR(info.st_mode):
        for folder, dirnames, filenames in os.walk(path):  # never follows symlinks
            for name in (*dirnames, *filenames):
                with contextlib.suppress(FileNotFoundError):
                    newest = max(newest, (Path(folder) / name).lstat().st_mtime)
    return newest


def sweep_stale(tmp_dir: Path, *, older_than_s: float, now: float) -> list[Path]:
    """Remove ``.tmp-*`` entries in ``tmp_dir`` untouched for ``older_than_s``; returns them.

    ``now`` is wall-clock seconds since the epoch, because it is compared with mtimes. "Untouched"
    means nothing anywhere in the tree changed: a long job still writing deep inside keeps its
    work folder (Maildir sweeps after 36 hours).
    """
    try:
        with os.scandir(tmp_dir) as listing:
            children = [Path(child.path) for child in listing if child.name.startswith(TMP_PREFIX)]
    except FileNotFoundError:
        return []
    removed: list[Path] = []
    for child in sorted(children):
        try:
            if now - _newest_mtime_s(child) < older_than_s:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        except FileNotFoundError:
            continue
        removed.append(child)
    return removed
