"""The one writer of reasoning records: ``load`` → ``admit`` → redact → mint an id → ``write``.

Decides: whether a record may join the store, and what the writer computes into it. ``admit`` is
pure (it reads what ``load`` returned and never writes); each refusal is one sentence naming the
rule and the field. A record is one JSON file under ``<state>/reasoning/<task>/``, staged and
then published by a group commit (``commit.py``: one flush for a batch, whole or absent after a
crash), never overwritten: a record, once written, is never changed. A later correction is a new
record (``supersedes``). Reads cost what was written since the last one (``reading.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

from pydantic import TypeAdapter, ValidationError

from portfolio_optimiser._atomic import sweep_temporaries

from .admission import admit, parse_input
from .commit import Disk, Staging
from .queries import (
    Admission,
    Loaded,
    Refusal,
    availability_now,
    consultations_of,
    normalise_subject,
    open_disagreements,
    refuse,
    standing_conclusion,
)
from .reading import Reader, log_written
from .records import KIND_PREFIX, RecordBody, StoredRecord
from .redaction import RedactionRefused, scrub_value

# The store is the public face of the records layer: its queries and admission are re-exported.
__all__ = [
    "Admission",
    "Loaded",
    "Refusal",
    "Store",
    "admit",
    "availability_now",
    "consultations_of",
    "normalise_subject",
    "open_disagreements",
    "parse_input",
    "standing_conclusion",
]

_RECORD_BODY: TypeAdapter[Any] = TypeAdapter(RecordBody)
_COMMITTER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="record-commit")
"""One thread commits every store's batches, off the threads that stage them."""
COMMIT_WINDOW_S: Final = 0.02
"""How long a batch waits for more records before the committer takes it. A run stages a
candidate's records within a few milliseconds, then waits on its model: the batch is committed
while it waits, not beside the run's own work, for which the committer's thread contended (the
interpreter's lock; 6–8 ms a run)."""


class Store:
    """The record store of one state directory. The only code that writes reasoning records."""

    def __init__(self, state_dir: Path, disk: Disk | None = None) -> None:
        self.root = state_dir / "reasoning"
        self._staging = Staging(self.root, disk)
        self._reader = Reader(self.root, staged=self._staging.names)
        self._lock = threading.Lock()
        self._soon = threading.Lock()
        self._commit_queued = False
        self._numbers: dict[str, int] = {}
        """The last number this store gave a record of each task it wrote to."""

    def load(self) -> Loaded:
        """Every record as it stands, read in proportion to what was written since the last load."""
        return self._reader.load()

    def record(
        self, task: str, draft: Any, ctx: Admission, *, durable: bool = True
    ) -> StoredRecord:
        """Admit, redact, mint and write one record. Raises :class:`Refusal`.

        ``durable``: returned once on disk. Without it the record is staged (this store reads it
        at once; other processes once committed) and committed soon, with whatever else is
        staged then: the caller calls :meth:`commit` before anything it publishes cites it.
        """
        with self._lock:  # one writer: concurrent runs of one process take turns
            record = self._record(task, draft, ctx)
        if durable:
            self.commit()
        else:
            self._commit_soon()
        return record

    async def arecord(self, task: str, draft: Any, ctx: Admission) -> StoredRecord:
        """``record``, staged, for a caller on an event loop: made on the loop when no other
        writer holds the store and no listing of every record is due, else on a thread, so that
        other runs on the loop do not wait for either (a listing at tens of thousands of records
        takes a fifth of a second). A record (about a quarter of a millisecond since its bytes
        are rendered by the commit) costs less than handing it to a thread and back would."""
        if self._reader.current() and self._lock.acquire(blocking=False):
            try:
                record = self._record(task, draft, ctx)
            finally:
                self._lock.release()
            self._commit_soon()
            return record
        return await asyncio.to_thread(self.record, task, draft, ctx, durable=False)

    def commit(self) -> None:
        """Every record staged so far, durable and readable by other processes: one flush for
        the batch. Raises :class:`NameTaken` if another writer broke the one-writer rule."""
        self._publish(report=True)

    def sweep_temporaries(self, *, older_than_s: float, now: float) -> list[Path]:
        """The temporary files a killed writer left in the task folders (``sweep_temporaries``),
        but those of the batch this store is committing."""
        keep = self._staging.temporaries()
        try:
            with os.scandir(self.root) as listing:
                folders = sorted(Path(e.path) for e in listing if e.is_dir())
        except FileNotFoundError:
            return []
        removed: list[Path] = []
        for folder in folders:
            removed += sweep_temporaries(folder, older_than_s=older_than_s, now=now, keep=keep)
        return removed

    def _publish(self, *, report: bool) -> None:
        for path in self._staging.commit(report=report):
            log_written(self.root, f"{path.parent.name}/{path.name}")

    def _commit_soon(self) -> None:
        """A commit off the caller's path: records staged meanwhile join the same batch."""
        with self._soon:
            if self._commit_queued:
                return
            self._commit_queued = True
        _COMMITTER.submit(self._background_commit, time.monotonic() + COMMIT_WINDOW_S)

    def _background_commit(self, at: float) -> None:
        time.sleep(max(at - time.monotonic(), 0.0))
        with self._soon:
            self._commit_queued = False
        # A batch the disk refused stays staged: the caller's own commit, before it publishes
        # anything, tries it again and raises what it meets, where there is someone to tell.
        # The names just logged are read here too, while the run waits on its model: its own
        # next read then finds the log as this one left it (one stat, not a read of the log).
        with contextlib.suppress(OSError):
            self._publish(report=False)
            self._reader.load()

    def _record(self, task: str, draft: Any, ctx: Admission) -> StoredRecord:
        loaded = self.load()
        body = admit(draft, task, loaded, ctx)
        kinds: set[str] = set()
        try:
            clean = scrub_value(body.model_dump(mode="json"), kinds)
        except RedactionRefused as exc:
            raise refuse(str(exc)) from None
        try:
            redacted_body: RecordBody = _RECORD_BODY.validate_python(clean)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(p) for p in error["loc"][1:]) or body.kind
            raise refuse(
                f"`{where}` of the {body.kind} is empty once control characters are removed; write text"
            ) from None
        folder = self.root / task
        seq = self._next_number(task, loaded)
        now = ctx.current()
        digest = hashlib.sha256(
            json.dumps([task, seq, now.isoformat(), clean], sort_keys=True).encode()
        ).hexdigest()
        record = StoredRecord(
            id=f"{KIND_PREFIX[body.kind]}-{digest[:10]}",
            task=task,
            seq=seq,
            recorded_at=now,
            redacted=tuple(sorted(kinds)),
            body=redacted_body,
        )
        path = folder / f"{seq:04d}-{record.id}.json"
        self._staging.stage(path, functools.partial(_file_bytes, record))
        self._numbers[task] = seq
        self._reader.wrote(f"{task}/{path.name}", record)
        return record

    def _next_number(self, task: str, loaded: Loaded) -> int:
        """The task's next record number: past every record of it the read holds (this
        store's own included, ``Reader.wrote``), readable or not, and past the last number this
        store gave it. The first time this store writes to a task its folder is listed: another
        process may have published a record there and died before it logged it (a run's task
        gets its verdicts' records from the processor, its own from a worker). After that the
        folder is not listed again (80 µs a record)."""
        last = self._numbers.get(task)
        if last is None:
            last = max(_published_numbers(self.root / task), default=0)
        numbers = [last, loaded.top_number(task)]
        for name, _why in loaded.unreadable:
            folder, _, file = name.partition("/")
            if folder == task and _RECORD_NAME.fullmatch(file):
                numbers.append(int(file[:4]))
        return max(numbers) + 1


def _published_numbers(folder: Path) -> set[int]:
    """The numbers of the records published in ``folder`` (one listing, no stat of each)."""
    try:
        with os.scandir(folder) as entries:
            return {int(e.name[:4]) for e in entries if _RECORD_NAME.fullmatch(e.name)}
    except (FileNotFoundError, NotADirectoryError):
        return set()


def _file_bytes(record: StoredRecord) -> bytes:
    return (record.model_dump_json(by_alias=True, indent=2) + "\n").encode()


_RECORD_NAME: Final = re.compile(r"[0-9]{4}-.*\.json")
