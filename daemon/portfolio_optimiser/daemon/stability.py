"""Has an inbox entry stopped changing? Snapshots of a file or a whole folder tree, and a tracker.

Decides: what an entry looks like on disk right now (:class:`TreeSnapshot`: every relative path
with its size, ``mtime_ns`` and kind) and when an entry is ready (:class:`StabilityTracker`: its
snapshot has been unchanged for ``quiet_s``, or it arrived whole by rename). This is paperless-ngx's
``FileStabilityTracker`` stretched over a bundle's tree (research/daemon.md F1, F2, F5).

Never reads the clock (``now`` is passed in, so tests step a fake clock and never sleep), never
follows a symlink, never reads file contents, never decides whether an entry is an input
(``filters``) and never moves anything (``claim``).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["SnapshotEntry", "StabilityTracker", "TreeSnapshot", "snapshot"]

# (relative path in POSIX form, "." for the entry itself; size in bytes, 0 for folders;
#  mtime in nanoseconds; is a folder)
SnapshotEntry = tuple[str, int, int, bool]

_ROOT: Final = "."


@dataclass(frozen=True, slots=True)
class TreeSnapshot:
    """What an entry looks like on disk: equal snapshots mean nothing observable changed."""

    entries: tuple[SnapshotEntry, ...]

    @property
    def total_bytes(self) -> int:
        return sum(entry[1] for entry in self.entries if not entry[3])


def _entry(relpath: str, info: os.stat_result) -> SnapshotEntry:
    is_dir = stat.S_ISDIR(info.st_mode)
    # A folder's st_size is a file-system detail; its names and mtime already show every change.
    return (relpath, 0 if is_dir else info.st_size, info.st_mtime_ns, is_dir)


def _walk(folder: Path, prefix: str, out: list[SnapshotEntry]) -> None:
    try:
        with os.scandir(folder) as listing:
            children = list(listing)
    except (FileNotFoundError, NotADirectoryError):
        # Removed or replaced while we looked: the next snapshot differs, which is all we need.
        return
    for child in children:
        relpath = f"{prefix}{child.name}"
        try:
            info = child.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        out.append(_entry(relpath, info))
        if stat.S_ISDIR(info.st_mode):
            _walk(Path(child.path), f"{relpath}/", out)


def snapshot(path: Path) -> TreeSnapshot | None:
    """The snapshot of a file, or of a folder and everything under it; None if ``path`` is gone.

    Symlinks are recorded as themselves (``lstat``) and never followed. An ``OSError`` other than
    "gone" (a permission problem) propagates: the caller reports it, guessing would hide it.
    """
    try:
        info = path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    entries = [_entry(_ROOT, info)]
    if stat.S_ISDIR(info.st_mode):
        _walk(path, "", entries)
    return TreeSnapshot(tuple(sorted(entries)))


@dataclass(slots=True)
class _Tracked:
    snapshot: TreeSnapshot | None
    since: float
    arrived_whole: bool


class StabilityTracker:
    """Which entries have been quiet for ``quiet_s`` seconds (or arrived whole by rename)."""

    def __init__(self, quiet_s: float) -> None:
        if quiet_s < 0:
            raise ValueError(f"quiet_s must be zero or more seconds, not {quiet_s}")
        self._quiet_s: Final = quiet_s
        self._tracked: dict[Path, _Tracked] = {}

    @property
    def quiet_s(self) -> float:
        return self._quiet_s

    @property
    def pending_count(self) -> int:
        return len(self._tracked)

    def tracking(self) -> list[Path]:
        """The entries waiting to become ready, in no particular order (for ``status``)."""
        return list(self._tracked)

    def observe(self, entry: Path, snapshot: TreeSnapshot | None, *, now: float) -> None:
        """Record what ``entry`` looks like at ``now``; any difference restarts its quiet period.

        An identical snapshot does not restart it: events are hints and the disk is the truth, so
        a burst of attribute events over unchanged bytes must not hold an entry back for ever.
        ``None`` (the entry is gone) forgets it.
        """
        if snapshot is None:
            self.forget(entry)
            return
        tracked = self._tracked.get(entry)
        if tracked is None:
            self._tracked[entry] = _Tracked(snapshot, now, arrived_whole=False)
        elif tracked.snapshot is None:
            # First look at an entry that was moved in: that is its complete state.
            tracked.snapshot = snapshot
        elif tracked.snapshot != snapshot:
            # Still being written (F1) or rewritten after a truncate (F2): start the wait again,
            # and a rename-in no longer vouches for the contents.
            tracked.snapshot = snapshot
            tracked.since = now
            tracked.arrived_whole = False

    def moved_in(self, entry: Path, *, now: float, snapshot: TreeSnapshot | None = None) -> None:
        """Mark ``entry`` ready at once: a rename within one file system delivers it whole (F3)."""
        tracked = self._tracked.get(entry)
        if tracked is None:
            self._tracked[entry] = _Tracked(snapshot, now, arrived_whole=True)
        else:
            tracked.arrived_whole = True
            if snapshot is not None:
                tracked.snapshot = snapshot

    def forget(self, entry: Path) -> None:
        self._tracked.pop(entry, None)

    def _is_ready(self, tracked: _Tracked, now: float) -> bool:
        return tracked.arrived_whole or now - tracked.since >= self._quiet_s

    def ready(self, *, now: float) -> list[Path]:
        """Entries ready at ``now``, longest-waiting first; they are forgotten as they are returned.

        Forgetting hands each entry over exactly once; a later event starts tracking it afresh.
        """
        due = [
            (tracked.since, str(entry), entry)
            for entry, tracked in self._tracked.items()
            if self._is_ready(tracked, now)
        ]
        due.sort()
        for _, _, entry in due:
            del self._tracked[entry]
        return [entry for _, _, entry in due]

    def seconds_until_next(self, *, now: float) -> float | None:
        """How long the service loop may wait before an entry can become ready; None if none."""
        if not self._tracked:
            return None
        return max(
            0.0,
            min(
                0.0 if t.arrived_whole else t.since + self._quiet_s - now
                for t in self._tracked.values()
            ),
        )
