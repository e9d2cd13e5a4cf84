"""Reading the record store back, in proportion to what was written since the last read.

Every record file is the truth; ``records.log`` beside the task folders is a hint. Each writer
appends a record's name to it once the record is published (one short ``O_APPEND`` write), so a
read looks at the log's size and reads only the names added since: nothing else to do when
nothing was written. Listing every task folder instead cost 190 ms a read at 87 000 records, and
the writer reads before every record it admits.

What the log cannot say is read by a full listing: at the first read, when the log was replaced
or cut short, and at least every ``FULL_LISTING_S`` (a writer that died between publishing and
logging, a file put there by hand, an append lost on a network file system). The log's size is
taken before a listing: a record published after it is logged after it, so it is read from the
log next time if the listing missed it.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from portfolio_optimiser._collector import uncollected

from .loaded import Loaded, order
from .records import StoredRecord

__all__ = ["FULL_LISTING_S", "LOG_NAME", "Reader", "log_written"]

LOG_NAME: Final = "records.log"
_NAME: Final = re.compile(r"[^/.][^/]*/[^/.][^/]*\.json")
FULL_LISTING_S: Final = 60.0


def log_written(root: Path, name: str) -> None:
    """Say that ``name`` (``task/file``) was published: one append, read by every reader."""
    fd = os.open(root / LOG_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{name}\n".encode())
    finally:
        os.close(fd)


class Reader:
    """One process's view of the store, brought up to date by each ``load``."""

    def __init__(self, root: Path, *, staged: Callable[[], set[str]] = set) -> None:
        self.root = root
        self._staged = staged
        """The names this process's writer staged and has not published yet: a listing does not
        find them, but this view holds them."""
        # Records are never overwritten, so a file once parsed never needs parsing again; kept by
        # its name under the root (``task/file``).
        self._parsed: dict[str, StoredRecord] = {}
        self._failed: dict[str, str] = {}
        """Files that did not parse, by name, with why: read again at every load."""
        self._names: set[str] = set()
        self._loaded: Loaded | None = None
        self._log: tuple[int, int] = (0, 0)
        """The log's (inode, bytes read): inode 0 while there is none."""
        self._listed_at = float("-inf")
        # Runs read from threads of their own (a record is written off the event loop).
        self._lock = threading.Lock()

    def load(self) -> Loaded:
        with self._lock:
            return self._load()

    def current(self) -> bool:
        """Whether a load now reads only what the log added: no listing of every folder is due
        (the first load, then one every ``FULL_LISTING_S``)."""
        return self._loaded is not None and time.monotonic() - self._listed_at < FULL_LISTING_S

    def _load(self) -> Loaded:
        now = time.monotonic()
        loaded = self._loaded
        listing = loaded is None or now - self._listed_at >= FULL_LISTING_S
        added = None if listing else self._logged()
        if loaded is None or added is None:
            return self._list(now) if self.root.is_dir() else Loaded()
        fresh = [n for n in added if n not in self._names and n not in self._failed]
        if not fresh and not self._failed:
            return loaded
        for name in [*self._failed, *fresh]:
            record = self._parse(name)
            if record is not None:
                loaded = loaded.plus(record)
        self._names.update(fresh)
        self._loaded = loaded.reporting(self._unreadable())
        return self._loaded

    def wrote(self, name: str, record: StoredRecord) -> None:
        """The writer's own record joins the newest read at once, whatever was read since it
        was admitted (the committer reads after each batch): staged, it may be in no folder and
        no log yet, and a record citing it is admitted against this view."""
        with self._lock:
            self._parsed[name] = record
            if self._loaded is not None and name not in self._names:
                self._names.add(name)
                self._loaded = self._loaded.plus(record)

    # -- the two ways of reading -----------------------------------------------------------------

    def _list(self, now: float) -> Loaded:
        self._log = self._position()
        # The staged names before the folders: a record leaves them only once it is published,
        # so it is in one or the other. Taken after, a record the committer published between
        # the two was in neither (an empty store read while its first record was committed).
        staged = self._staged()
        names: list[str] = []
        with os.scandir(self.root) as tasks:
            for task in tasks:
                if task.is_dir(follow_symlinks=False):
                    with os.scandir(task.path) as files:
                        names.extend(
                            f"{task.name}/{f.name}" for f in files if f.name.endswith(".json")
                        )
        # A staged record its writer has not handed over yet (``wrote``) is not read from the
        # disk, where it is not yet: it joins the view when it is handed over.
        listed = set(names) | {name for name in staged if name in self._parsed}
        if self._loaded is not None and listed == self._names and not self._failed:
            self._listed_at = now
            return self._loaded
        self._failed = {}
        with uncollected():  # every record read, and its index, stays alive: nothing to find
            records = sorted((r for r in map(self._parse, listed) if r is not None), key=order)
            self._loaded = Loaded(tuple(records), self._unreadable())
        self._names, self._listed_at = listed, now
        return self._loaded

    def _logged(self) -> list[str] | None:
        """The names logged since the last read; None when the log cannot say (replaced, cut)."""
        inode, offset = self._log
        current, size = self._position()
        if current != inode:
            if inode != 0:
                return None
            offset = 0  # the log was made since: read it from its start
        if size < offset:
            return None
        if size == offset:
            return []
        with (self.root / LOG_NAME).open("rb") as log:
            log.seek(offset)
            data = log.read(size - offset)
        whole = data.rfind(b"\n") + 1  # a line still being appended is read next time
        self._log = (current, offset + whole)
        lines = data[:whole].decode("utf-8", "replace").splitlines()
        return [line for line in lines if _NAME.fullmatch(line)]  # a torn or foreign line: none

    # -- helpers ---------------------------------------------------------------------------------

    def _position(self) -> tuple[int, int]:
        try:
            stat = (self.root / LOG_NAME).stat()
        except FileNotFoundError:
            return 0, 0
        return stat.st_ino, stat.st_size

    def _parse(self, name: str) -> StoredRecord | None:
        known = self._parsed.get(name)
        if known is not None:
            return known
        try:
            # A string path: a ``Path`` made for each of tens of thousands of records cost a
            # fifth of a store's first read.
            with open(os.path.join(self.root, name), "rb") as file:  # noqa: PTH118, PTH123
                record = StoredRecord.model_validate_json(file.read())
        except (OSError, ValueError) as exc:
            self._failed[name] = str(exc).splitlines()[0]
            return None
        self._failed.pop(name, None)
        self._parsed[name] = record
        return record

    def _unreadable(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(self._failed.items()))
