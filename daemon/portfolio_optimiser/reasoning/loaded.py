"""The records of a store as read back, with the lookups admission asks for at any size.

Admission asks, for every record it admits, for a record by id, the records that cite one (a
plan's consultations, a disagreement's resolutions) and the conclusion standing on a subject. As
scans over every record, those made a store of 87 000 records (a few thousand runs) take six
minutes to admit one plan. Here each is a dictionary lookup.

The lookups are kept in one append-only ``_Index`` that every ``Loaded`` extending the newest
shares: a record the writer adds joins it in constant time. Each entry carries its place in the
order (its serial), and a ``Loaded`` answers only from the first ``size`` places, so one read
before a record was added still answers as it did.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from .records import AssessmentInput, StoredRecord

__all__ = ["Loaded", "normalise_subject", "order"]

_CITES: Final = {
    "plan": "assessment",
    "consultation": "plan",
    "disagreement": "assessment",
    "resolution": "disagreement",
    "conclusion": "assessment",
    "validation": "conclusion",
}
"""The one record each kind is about, by the field that names it."""

_Entry = tuple[int, StoredRecord]


def normalise_subject(subject: str) -> str:
    return " ".join(subject.split()).casefold()


def order(record: StoredRecord) -> tuple[datetime, str, int]:
    """A record's place in a store's order: when it was recorded, then its task and number."""
    return record.recorded_at, record.task, record.seq


def _upto(entries: list[_Entry], size: int) -> list[_Entry]:
    """The entries among a read's first ``size`` places: a copy, taken at one length, so a
    record another thread adds meanwhile is not among them."""
    end = len(entries)
    if end and entries[end - 1][0] >= size:
        end = bisect_left(entries, size, hi=end, key=lambda e: e[0])
    return entries[:end]


class _Index:
    """Lookups over records in their order, grown one record at a time."""

    def __init__(self) -> None:
        self.length = 0
        self.by_id: dict[str, _Entry] = {}
        self.by_kind: dict[str, list[_Entry]] = {}
        self.by_task: dict[str, list[_Entry]] = {}
        self.citing: dict[tuple[str, str], list[_Entry]] = {}
        """(kind, the id cited) → the records of that kind about it."""
        self.superseded: dict[str, int] = {}
        """A conclusion's id → the first place a later conclusion superseded it."""
        self.by_subject: dict[str, list[tuple[int, int, StoredRecord]]] = {}
        """A normalised subject → its conclusions: (place, its assessment's place, record)."""

    @classmethod
    def of(cls, records: tuple[StoredRecord, ...]) -> _Index:
        index = cls()
        for record in records:
            index.add(record)
        return index

    def add(self, record: StoredRecord) -> None:
        entry = (self.length, record)
        self.length += 1
        self.by_id.setdefault(record.id, entry)
        self.by_kind.setdefault(record.kind, []).append(entry)
        self.by_task.setdefault(record.task, []).append(entry)
        cited = getattr(record.body, _CITES.get(record.kind, ""), None)
        if isinstance(cited, str):
            self.citing.setdefault((record.kind, cited), []).append(entry)
        if record.kind == "conclusion":
            supersedes = getattr(record.body, "supersedes", None)
            if supersedes:
                self.superseded.setdefault(supersedes, entry[0])
            assessment = self.by_id.get(cited) if isinstance(cited, str) else None
            if assessment is not None:
                self._file(entry, assessment)
        elif record.kind == "assessment":
            # A conclusion read before its assessment (clocks of two machines): filed now.
            for waiting in self.citing.get(("conclusion", record.id), ()):
                self._file(waiting, entry)

    def _file(self, conclusion: _Entry, assessment: _Entry) -> None:
        """A conclusion under its assessment's subject, if that assessment is the one its id
        names (the first record of that id)."""
        body = assessment[1].body
        if not isinstance(body, AssessmentInput) or self.by_id[assessment[1].id] is not assessment:
            return
        listed = self.by_subject.setdefault(normalise_subject(body.subject), [])
        item = (conclusion[0], assessment[0], conclusion[1])
        place = bisect_left(listed, conclusion[0], key=lambda e: e[0])
        listed.insert(place, item)


@dataclass(frozen=True)
class Loaded:
    """Every readable record of the store, in order, and the files that are not readable."""

    records: tuple[StoredRecord, ...] = ()
    unreadable: tuple[tuple[str, str], ...] = ()
    _index: _Index | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._index is None:
            object.__setattr__(self, "_index", _Index.of(self.records))

    @property
    def _at(self) -> _Index:
        assert self._index is not None
        return self._index

    def plus(self, record: StoredRecord) -> Loaded:
        """These records and one more: in constant time when it comes last and this is the
        newest read of the index; otherwise the lookups are built again."""
        last = self.records[-1] if self.records else None
        if self._at.length == len(self.records) and (last is None or order(last) <= order(record)):
            self._at.add(record)
            return Loaded((*self.records, record), self.unreadable, self._at)
        ordered = sorted((*self.records, record), key=order)
        return Loaded(tuple(ordered), self.unreadable)

    def reporting(self, unreadable: tuple[tuple[str, str], ...]) -> Loaded:
        """These records, with these files reported unreadable."""
        return Loaded(self.records, unreadable, self._index)

    def by_id(self, record_id: str) -> StoredRecord | None:
        entry = self._at.by_id.get(record_id)
        return entry[1] if entry is not None and entry[0] < len(self.records) else None

    def of_task(self, task: str) -> list[StoredRecord]:
        return [r for _, r in _upto(self._at.by_task.get(task, []), len(self.records))]

    def of_kind(self, kind: str) -> list[StoredRecord]:
        return [r for _, r in _upto(self._at.by_kind.get(kind, []), len(self.records))]

    def citing(self, kind: str, record_id: str) -> list[StoredRecord]:
        """The records of ``kind`` about ``record_id`` (a plan's consultations, …), in order."""
        return self.citing_any(kind, (record_id,))

    def citing_any(self, kind: str, record_ids: Iterable[str]) -> list[StoredRecord]:
        """The records of ``kind`` about any of ``record_ids``, in order."""
        size = len(self.records)
        found = [
            entry
            for record_id in dict.fromkeys(record_ids)
            for entry in _upto(self._at.citing.get((kind, record_id), []), size)
        ]
        return [r for _, r in sorted(found, key=lambda e: e[0])]

    def standing_conclusion(self, subject: str) -> StoredRecord | None:
        """The newest conclusion on this subject that no later conclusion supersedes."""
        size = len(self.records)
        for place, assessed_at, record in reversed(
            self._at.by_subject.get(normalise_subject(subject), [])
        ):
            if place >= size or assessed_at >= size:
                continue
            if self._at.superseded.get(record.id, size) >= size:
                return record
        return None
