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
import threading
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
        self._reader = Reader(self.root)
        self._lock = threading.Lock()

    def load(self) -> Loaded:
        """Every record as it stands, read in proportion to what was written since the last load."""
        return self._reader.load()

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
            log_written(self.root, name)
            self._reader.wrote(loaded, name, record)
            return record
