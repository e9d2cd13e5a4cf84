"""The watcher: file-system events as hints, never as truth (DESIGN §6, research/daemon.md §0).

Decides: nothing about readiness. Its handler maps every event to the top-level inbox entry it
concerns and puts a hint on a queue; it never raises and never processes (a handler that raises
kills watchdog's observer thread while the process looks healthy). A folder that arrives by
rename is marked so (``moved_in``): it is complete at once. Native inotify by default; polling
when configured, or when the inbox lives on a network file system that inotify cannot see.
"""

from __future__ import annotations

import logging
import os
import queue
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from watchdog import events
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers.polling import PollingObserver

from .filters import top_level_entry

__all__ = ["NETWORK_FILESYSTEMS", "Hint", "InboxWatcher", "filesystem_type"]

_log = logging.getLogger(__name__)

# inotify(7) does not see writes made by other machines on these (research/daemon.md F6).
NETWORK_FILESYSTEMS: Final = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "9p",
        "drvfs",
        "afs",
        "ceph",
        "glusterfs",
        "sshfs",
        "davfs",
    }
)


_IGNORED_EVENTS: Final = frozenset({"opened", "closed_no_write"})
MOVE_PAIRING_S: Final = 0.02
# Asked of the kernel, so reads never even become events (a scan of 10,000 files would make 20,000).
_WANTED: Final[list[type[FileSystemEvent]]] = [
    events.FileCreatedEvent,
    events.DirCreatedEvent,
    events.FileModifiedEvent,
    events.DirModifiedEvent,
    events.FileAttribEvent,
    events.DirAttribEvent,
    events.FileMovedEvent,
    events.DirMovedEvent,
    events.FileDeletedEvent,
    events.DirDeletedEvent,
    events.FileClosedEvent,
]


@dataclass(frozen=True)
class Hint:
    inbox: Path
    entry: Path
    moved_in: bool = False


def filesystem_type(path: Path) -> str:
    """The file-system type of ``path`` from /proc/self/mountinfo (``unknown`` elsewhere)."""
    try:
        target = os.path.realpath(path)
        best, kind = "", "unknown"
        with Path("/proc/self/mountinfo").open(encoding="utf-8") as mounts:
            for line in mounts:
                left, _, right = line.partition(" - ")
                mount_point = left.split()[4].encode().decode("unicode_escape")
                fstype = right.split()[0] if right else "unknown"
                if (
                    target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
                ) and len(mount_point) >= len(best):
                    best, kind = mount_point, fstype
        return kind
    except (OSError, IndexError, UnicodeDecodeError):
        return "unknown"


class _Handler(FileSystemEventHandler):
    def __init__(self, inbox: Path, hints: queue.SimpleQueue[Hint | None]) -> None:
        self.inbox = inbox
        self.hints = hints

    def on_any_event(self, event: FileSystemEvent) -> None:
        # Opening or closing a file without writing changes nothing; the daemon's own reads make
        # exactly these events, and hinting on them would feed the loop its own echo.
        try:
            if getattr(event, "event_type", "") in _IGNORED_EVENTS:
                return
            for raw, moved in ((event.src_path, False), (getattr(event, "dest_path", ""), True)):
                path = os.fsdecode(raw) if raw else ""
                if not path:
                    continue
                entry = top_level_entry(self.inbox, path)
                if entry is not None:
                    is_move_target = moved and event.event_type == "moved"
                    self.hints.put(
                        Hint(self.inbox, entry, moved_in=is_move_target and Path(path) == entry)
                    )
        except Exception:  # the handler never raises: a raise kills the observer thread
            _log.exception("watcher hint dropped; the periodic rescan will find it")


class InboxWatcher:
    """Watches the inbox folders, top level only; restartable when its observer dies."""

    def __init__(
        self,
        inboxes: list[Path],
        hints: queue.SimpleQueue[Hint | None],
        *,
        polling: bool,
        poll_interval_s: float = 1.0,
    ) -> None:
        self.inboxes = inboxes
        self.hints = hints
        self.polling = polling
        self.poll_interval_s = poll_interval_s
        self._observer: Any = None
        self.method = "polling" if polling else "inotify"

    def start(self) -> None:
        observer: Any
        if self.polling:
            observer = PollingObserver(timeout=self.poll_interval_s)
        else:
            try:
                from watchdog.observers.inotify import InotifyObserver
                from watchdog.observers.inotify_move_event_grouper import InotifyMoveEventGrouper

                # watchdog holds a rename out of the watched folder for 0.5 s, hoping to pair it,
                # and every later event waits behind it. Our own claims are such renames, so a
                # bundle arriving just after one would wait half a second. The kernel writes a
                # pair's two halves together, so a short wait pairs every real pair. Process-wide,
                # and this process has one observer.
                InotifyMoveEventGrouper.delay = MOVE_PAIRING_S
                observer = InotifyObserver(generate_full_events=True)
            except (ImportError, OSError):
                observer, self.method = PollingObserver(timeout=self.poll_interval_s), "polling"
        for inbox in self.inboxes:
            observer.schedule(
                _Handler(inbox, self.hints), str(inbox), recursive=False, event_filter=_WANTED
            )
        try:
            observer.start()
        except OSError as exc:
            # inotify limits (max_user_watches / max_user_instances): fall back rather than stop.
            _log.warning("inotify could not start (%s); polling instead", exc)
            observer = PollingObserver(timeout=self.poll_interval_s)
            for inbox in self.inboxes:
                observer.schedule(
                    _Handler(inbox, self.hints), str(inbox), recursive=False, event_filter=_WANTED
                )
            observer.start()
            self.method = "polling"
        self._observer = observer

    def alive(self) -> bool:
        return self._observer is not None and bool(self._observer.is_alive())

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None

    def restart(self) -> None:
        self.stop()
        self.start()
