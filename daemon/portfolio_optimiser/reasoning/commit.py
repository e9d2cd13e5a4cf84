"""Group commit of reasoning records: one flush makes a batch durable, not two fsyncs a record.

A record is staged: its bytes written to a temporary file beside its final name, nothing flushed
(a tenth of a millisecond). ``commit`` then makes every record staged so far durable at once:

1. one flush of the file system (``syncfs``): every staged file's bytes are on disk;
2. each temporary file linked to its final name, never replacing one;
3. one fsync of each folder a name was added to: the names are on disk.

A name reaches the disk only after its bytes have (step 1 before 3), so a power cut leaves each
record whole or absent, never a torn or empty file at a record's name. A process that dies before
its commit leaves only temporary files, which no reader takes for records. Each record used to
cost two fsyncs of its own (2 ms here), about 48 ms of a run's own time on the model calls' path.

``Disk`` is the file system as the commit uses it: ``tests/test_record_commit.py`` puts a model
of what a power cut keeps in its place, and cuts the power after each step.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from portfolio_optimiser._atomic import flush_file_system, fsync_dir, stage_bytes
from portfolio_optimiser.errors import UserError

__all__ = ["Disk", "NameTaken", "Staging", "SystemDisk"]


class NameTaken(UserError):
    """Another writer published a different record under a staged record's name."""


class Disk(Protocol):
    def stage(self, path: Path, data: bytes) -> Path:
        """Write ``data`` to a new temporary file beside ``path``; nothing flushed."""
        ...

    def flush(self, folder: Path) -> None:
        """Every file written so far on ``folder``'s file system, on disk."""
        ...

    def link(self, tmp: Path, path: Path) -> None:
        """``tmp`` under the name ``path`` too; ``FileExistsError`` if the name is taken."""
        ...

    def flush_names(self, folder: Path) -> None:
        """The names added to ``folder``, on disk."""
        ...

    def remove(self, tmp: Path) -> None: ...


class SystemDisk:
    """The real file system: ``syncfs`` where the C library has it (Linux), else ``sync``."""

    def stage(self, path: Path, data: bytes) -> Path:
        return stage_bytes(path, data)

    def flush(self, folder: Path) -> None:
        flush_file_system(folder)

    def link(self, tmp: Path, path: Path) -> None:
        os.link(tmp, path)

    def flush_names(self, folder: Path) -> None:
        fsync_dir(folder)

    def remove(self, tmp: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


@dataclass(frozen=True)
class _Staged:
    tmp: Path
    path: Path
    data: bytes


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

    def stage(self, path: Path, data: bytes) -> None:
        tmp = self.disk.stage(path, data)
        with self._lock:
            self._staged.append(_Staged(tmp, path, data))

    def seqs(self, folder: Path) -> set[int]:
        """The numbers staged in ``folder`` and not yet published."""
        return {int(s.path.name[:4]) for s in self._pending() if s.path.parent == folder}

    def temporaries(self) -> set[Path]:
        """The temporary files of the records staged and not yet published."""
        return {s.tmp for s in self._pending()}

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
                self._committing_now = batch  # still pending to a writer counting numbers
            try:
                published = self._publish(batch)
            except OSError:
                with self._lock:
                    self._staged[:0] = batch
                raise
            finally:
                with self._lock:
                    self._committing_now = []
            for staged in batch:
                self.disk.remove(staged.tmp)
            if report and self._taken:
                taken, self._taken = self._taken, []
                raise NameTaken(
                    f"{taken[0]}: another writer published a different record under this name; "
                    "it was left as it is and this record was not written (one writer per task: "
                    "check that no two processes run the same task)"
                )
        return published

    def _publish(self, batch: list[_Staged]) -> list[Path]:
        if not batch:
            return []
        self.disk.flush(self.root)
        published: list[Path] = []
        for staged in batch:
            try:
                self.disk.link(staged.tmp, staged.path)
                published.append(staged.path)
            except FileExistsError:
                if staged.path.read_bytes() != staged.data:
                    self._taken.append(staged.path)
        for folder in dict.fromkeys(p.parent for p in published):
            self.disk.flush_names(folder)
        return published
