"""Group commit of reasoning records: one flush makes a batch durable, not two fsyncs a record.

A record is staged: its bytes held in memory, nothing written (the writer's own path never waits
on the file system; a file made while another batch's flush held the journal waited 0.15 ms).
``commit`` then makes every record staged so far durable at once:

1. each record's bytes written to a temporary file beside its final name;
2. those files' bytes flushed: each with ``fdatasync`` when they are few (a verdict's), with one
   flush of the file system (``syncfs``) when they are many (a run's);
3. each temporary file linked to its final name, never replacing one;
4. one fsync of each folder a name was added to: the names are on disk.

A name reaches the disk only after its bytes have (step 2 before 4), so a power cut leaves each
record whole or absent, never a torn or empty file at a record's name. A process that dies before
its commit leaves nothing of the records it staged, and one that dies during it only temporary
files, which no reader takes for records. Each record used to cost two fsyncs of its own (2 ms
here), about 48 ms of a run's own time on the model calls' path.

``Disk`` is the file system as the commit uses it: ``tests/test_record_commit.py`` puts a model
of what a power cut keeps in its place, and cuts the power after each step.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from portfolio_optimiser._atomic import flush_files, fsync_dir, stage_bytes
from portfolio_optimiser.errors import UserError

__all__ = ["Disk", "NameTaken", "Staging", "SystemDisk"]


class NameTaken(UserError):
    """Another writer published a different record under a staged record's name."""


class Disk(Protocol):
    def stage(self, path: Path, data: bytes) -> Path:
        """Write ``data`` to a new temporary file beside ``path``; nothing flushed."""
        ...

    def flush(self, folder: Path, files: list[Path]) -> None:
        """``files``, written on ``folder``'s file system, on disk."""
        ...

    def link(self, tmp: Path, path: Path) -> None:
        """``tmp`` under the name ``path`` too; ``FileExistsError`` if the name is taken."""
        ...

    def flush_names(self, folder: Path) -> None:
        """The names added to ``folder``, on disk."""
        ...

    def remove(self, tmp: Path) -> None: ...


class SystemDisk:
    """The real file system (``flush_files``: an fdatasync a file when they are few, else one
    ``syncfs`` where the C library has it, ``sync`` elsewhere)."""

    def stage(self, path: Path, data: bytes) -> Path:
        return stage_bytes(path, data)

    def flush(self, folder: Path, files: list[Path]) -> None:
        flush_files(files, folder)

    def link(self, tmp: Path, path: Path) -> None:
        os.link(tmp, path)

    def flush_names(self, folder: Path) -> None:
        fsync_dir(folder)

    def remove(self, tmp: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


class _Staged:
    """A record's name, and its bytes, rendered when the commit first needs them."""

    def __init__(self, path: Path, data: bytes | Callable[[], bytes]) -> None:
        self.path = path
        self._data = data

    @functools.cached_property
    def data(self) -> bytes:
        return self._data if isinstance(self._data, bytes) else self._data()


class Staging:
    """The records written and not yet durable, and the commit that makes them so."""

    def __init__(self, root: Path, disk: Disk | None = None) -> None:
        self.root = root
        self.disk: Disk = disk or SystemDisk()
        self._staged: list[_Staged] = []
        self._lock = threading.Lock()  # staged by runs' threads, committed by any of them
        self._committing = threading.Lock()  # one batch at a time, in order
        self._taken: list[Path] = []
        self._committing_now: list[_Staged] = []
        self._written: set[Path] = set()
        """The temporary files of the batch committing now."""
        self._folders: set[Path] = set()
        """The folders made for a record (a folder is never removed under a store)."""

    def stage(self, path: Path, data: bytes | Callable[[], bytes]) -> None:
        """Held in memory until the commit writes it: the caller's path does not wait on the
        file system (a file made while another batch's flush held the journal waited for it).
        Bytes given as a function are rendered by the commit (in the background for a record
        committed soon, while a run waits on its model). Its folder is made at once: a reader
        takes a store without one for an empty store."""
        if path.parent not in self._folders:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._folders.add(path.parent)
        with self._lock:
            self._staged.append(_Staged(path, data))

    def temporaries(self) -> set[Path]:
        """The temporary files of the batch being committed (a staged record has none yet)."""
        with self._lock:
            return set(self._written)

    def names(self) -> set[str]:
        """The staged records' names under the root (``task/file``), not yet published."""
        return {f"{s.path.parent.name}/{s.path.name}" for s in self._pending()}

    def _pending(self) -> list[_Staged]:
        """The records staged and not yet published: the batch committing now and the next."""
        with self._lock:
            return [*self._committing_now, *self._staged]

    def commit(self, *, report: bool = True) -> list[Path]:
        """Every record staged so far, durable: the paths published by this batch, in order.
        A record staged while a batch commits joins the next one; a batch the disk refused is
        staged again, and the error raised.

        ``report``: raise :class:`NameTaken` for a name another writer took since the last
        commit that reported (the committer in the background leaves it to the caller's own).
        """
        with self._committing:
            with self._lock:
                batch, self._staged = self._staged, []
                self._committing_now = batch  # still pending to a reader listing the store
            written: list[Path] = []
            try:
                published = self._publish(batch, written)
            except BaseException:  # staged again whatever stopped it: never dropped unsaid
                with self._lock:
                    self._staged[:0] = batch
                raise
            finally:
                for tmp in written:
                    self.disk.remove(tmp)
                with self._lock:
                    self._committing_now = []
                    self._written = set()
            if report and self._taken:
                taken, self._taken = self._taken, []
                raise NameTaken(
                    f"{taken[0]}: another writer published a different record under this name; "
                    "it was left as it is and this record was not written (one writer per task: "
                    "check that no two processes run the same task)"
                )
        return published

    def _publish(self, batch: list[_Staged], written: list[Path]) -> list[Path]:
        if not batch:
            return []
        for staged in batch:
            written.append(self.disk.stage(staged.path, staged.data))
            with self._lock:
                self._written.add(written[-1])
        self.disk.flush(self.root, written)
        published: list[Path] = []
        for staged, tmp in zip(batch, written, strict=True):
            try:
                self.disk.link(tmp, staged.path)
            except FileExistsError:
                if staged.path.read_bytes() != staged.data:
                    self._taken.append(staged.path)
                    continue
                # Its own, linked by an attempt at this batch that failed after it: published
                # all the same (its folder flushed, its name logged).
            published.append(staged.path)
        for folder in dict.fromkeys(p.parent for p in published):
            self.disk.flush_names(folder)
        return published
