"""The one writer of reasoning records: ``load`` → ``admit`` → redact → mint an id → ``write``.

Decides: whether a record may join the store, and what the writer computes into it. ``admit`` is
pure (it reads what ``load`` returned and never writes); each refusal is one sentence naming the
rule and the field. ``write`` publishes one JSON file per record under
``<state>/reasoning/<task>/``, atomically, and refuses to overwrite: a record, once written, is
never changed. A later correction is a new record (``supersedes``).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from bisect import insort
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from portfolio_optimiser._atomic import publish_atomic

from .admission import admit, parse_input
from .queries import (
    Admission,
    Loaded,
    Refusal,
    availability_now,
    consultations_of,
    history,
    normalise_subject,
    open_disagreements,
    refuse,
    standing_conclusion,
)
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
    "history",
    "normalise_subject",
    "open_disagreements",
    "parse_input",
    "standing_conclusion",
]

_RECORD_BODY: TypeAdapter[Any] = TypeAdapter(RecordBody)


class Store:
    """The record store of one state directory. The only code that writes reasoning records."""

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / "reasoning"
        # Records are never overwritten, so a file once parsed never needs parsing again; kept by
        # its name under the root (``task/file``), as listed, with no path built to look it up.
        self._parsed: dict[str, StoredRecord | str] = {}
        self._last: tuple[list[str], Loaded] | None = None
        self._lock = threading.Lock()

    def load(self) -> Loaded:
        if not self.root.is_dir():
            return Loaded()
        # Names as strings, listed with scandir: every load lists the folders (another process may
        # have written), but a listing that has not changed returns the answer already built.
        names: list[str] = []
        with os.scandir(self.root) as tasks:
            for task in tasks:
                if task.is_dir(follow_symlinks=False):
                    with os.scandir(task.path) as files:
                        names.extend(
                            f"{task.name}/{f.name}" for f in files if f.name.endswith(".json")
                        )
        names.sort()
        if self._last is not None and names == self._last[0]:
            return self._last[1]
        records: list[StoredRecord] = []
        unreadable: list[tuple[str, str]] = []
        for name in names:
            parsed = self._parsed.get(name)
            if parsed is None or isinstance(parsed, str):
                try:
                    parsed = StoredRecord.model_validate_json((self.root / name).read_bytes())
                except (OSError, ValueError) as exc:
                    parsed = str(exc).splitlines()[0]
                self._parsed[name] = parsed
            if isinstance(parsed, str):
                unreadable.append((name, parsed))
            else:
                records.append(parsed)
        records.sort(key=lambda r: (r.recorded_at, r.task, r.seq))
        loaded = Loaded(tuple(records), tuple(unreadable))
        # An unreadable file may be mid-write by someone else: only a clean listing is kept.
        self._last = (names, loaded) if not unreadable else None
        return loaded

    def record(self, task: str, draft: Any, ctx: Admission) -> StoredRecord:
        """Admit, redact, mint and write one record. Raises :class:`Refusal`."""
        with self._lock:  # one writer: concurrent runs of one process take turns
            return self._record(task, draft, ctx)

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
        taken = (
            [int(p.name[:4]) for p in folder.glob("[0-9][0-9][0-9][0-9]-*.json")]
            if folder.is_dir()
            else []
        )
        seq = max(taken, default=0) + 1
        now = ctx.current()
        while True:
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
            try:
                publish_atomic(
                    path,
                    (record.model_dump_json(by_alias=True, indent=2) + "\n").encode(),
                    exclusive=True,
                )
            except FileExistsError:
                seq += 1
                continue
            name = f"{task}/{path.name}"
            self._parsed[name] = record
            self._known(loaded, name, record)
            return record

    def _known(self, loaded: Loaded, name: str, record: StoredRecord) -> None:
        """The load this record was admitted against, with the record in it: the next load, if
        nobody else wrote meanwhile, finds its listing unchanged and parses nothing again."""
        if self._last is None or self._last[1] is not loaded:
            return
        names = list(self._last[0])
        insort(names, name)
        self._last = (names, loaded.plus(record))
