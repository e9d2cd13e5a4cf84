"""The records of a store as read back, with the lookups admission asks for at any size.

Admission asks, for every record it admits, for a record by id, the records that cite one (a
plan's consultations, a disagreement's resolutions) and the conclusion standing on a subject. As
scans over every record, those made a store of 87 000 records (a few thousand runs) take six
minutes to admit one plan. Here each is a dictionary lookup.

The lookups are kept in one append-only ``_Index`` that every ``Loaded`` extending the newest
shares: a record the writer adds joins it in constant time. Each entry carries its place in the
order (its serial), and a ``Loaded`` answers only from the first ``size`` places, so one read
before a record was added still answers as it did.

Every plan asks, besides, for each advisor's state (its circuit breaker's outcomes) and every run
for what each advisor refused: as scans over every consultation, they cost a plan 110 ms and a
run 55 ms an advisor in a store of 48 000 records. The index keeps each advisor's counting
outcomes in the breaker's order, its consultations that refused a request form and those that
named the server's build; a plan replays only what followed the advisor's newest answer.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import islice
from typing import Any, Final

from .availability import ConsultationStatus, Outcome
from .records import AssessmentInput, ConsultationInput, StoredRecord

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


def _end(entries: list[_Entry], size: int) -> int:
    """How many of ``entries`` lie among a read's first ``size`` places (taken at one length,
    so a record another thread adds meanwhile is not counted)."""
    end = len(entries)
    if end and entries[end - 1][0] >= size:
        end = bisect_left(entries, size, hi=end, key=lambda e: e[0])
    return end


def _upto(entries: list[_Entry], size: int) -> list[_Entry]:
    """The entries among a read's first ``size`` places: a copy."""
    return entries[: _end(entries, size)]


class _Index:
    """Lookups over records in their order, grown one record at a time."""

    def __init__(self) -> None:
        self.length = 0
        self.records: list[StoredRecord] = []
        """Every record the index holds, in its order: the reads that share it take the first
        ``length`` of their time (``_Records``)."""
        self.by_id: dict[str, _Entry] = {}
        self.by_kind: dict[str, list[_Entry]] = {}
        self.by_task: dict[str, list[_Entry]] = {}
        self.top_number: dict[str, list[int]] = {}
        """A task → beside each of its entries, the highest record number up to it (a task's
        next number without a look at each of its records)."""
        self.citing: dict[tuple[str, str], list[_Entry]] = {}
        """(kind, the id cited) → the records of that kind about it."""
        self.superseded: dict[str, int] = {}
        """A conclusion's id → the first place a later conclusion superseded it."""
        self.by_subject: dict[str, list[tuple[int, int, StoredRecord]]] = {}
        """A normalised subject → its conclusions: (place, its assessment's place, record)."""
        self.counting: dict[str, list[Outcome]] = {}
        """An advisor → its consultations' outcomes that count against it, in order (their
        ``order`` is their place)."""
        self.refusing: dict[str, list[_Entry]] = {}
        """An advisor → its consultations that refused a request form."""
        self.served: dict[str, list[_Entry]] = {}
        """An advisor → its consultations that named the server's build."""

    @classmethod
    def of(cls, records: Sequence[StoredRecord]) -> _Index:
        index = cls()
        for record in records:
            index.add(record)
        return index

    def add(self, record: StoredRecord) -> None:
        entry = (self.length, record)
        self.records.append(record)
        self.length += 1
        self.by_id.setdefault(record.id, entry)
        self.by_kind.setdefault(record.kind, []).append(entry)
        # Its top number first: a read on another thread that counts the entry finds it.
        tops = self.top_number.setdefault(record.task, [])
        tops.append(max(tops[-1], record.seq) if tops else record.seq)
        self.by_task.setdefault(record.task, []).append(entry)
        # Only a kind that cites has the field: a missing one is pydantic's slow path (40 µs).
        field_name = _CITES.get(record.kind)
        cited = getattr(record.body, field_name, None) if field_name else None
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
        elif isinstance(record.body, ConsultationInput):
            self._consulted(entry, record.body)

    def _consulted(self, entry: _Entry, body: ConsultationInput) -> None:
        place, record = entry
        if body.status.counts_against_advisor:
            outcome = Outcome(
                body.advisor, body.status, record.recorded_at, body.retry_after_seconds, place
            )
            # Records join in the store's order, which is by time first: the breaker's order.
            self.counting.setdefault(body.advisor, []).append(outcome)
        if body.refused:
            self.refusing.setdefault(body.advisor, []).append(entry)
        if body.server:
            self.served.setdefault(body.advisor, []).append(entry)

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


class _Records(Sequence[StoredRecord]):
    """A read's records: the first ``size`` of its index's, shared with the reads that extend it
    and never copied (a copy of 48 000 records for each one added cost a record 1 ms)."""

    __slots__ = ("_all", "_size")

    def __init__(self, records: list[StoredRecord], size: int) -> None:
        self._all, self._size = records, size

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[StoredRecord]:
        return islice(self._all, self._size)

    def __getitem__(self, place: Any) -> Any:
        if isinstance(place, slice):
            return tuple(self)[place]
        at = place + self._size if place < 0 else place
        if not 0 <= at < self._size:
            raise IndexError("record place out of range")
        return self._all[at]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == self._size and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"_Records({self._size} records)"


@dataclass(frozen=True)
class Loaded:
    """Every readable record of the store, in order, and the files that are not readable."""

    records: Sequence[StoredRecord] = ()
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
            return Loaded(_Records(self._at.records, self._at.length), self.unreadable, self._at)
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

    def top_number(self, task: str) -> int:
        """The highest record number of ``task`` this read holds (0: none)."""
        end = _end(self._at.by_task.get(task, []), len(self.records))
        return self._at.top_number[task][end - 1] if end else 0

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

    def breaker_history(self) -> list[Outcome]:
        """What each advisor's circuit breaker replays: its counting outcomes from its newest
        completed one on, in the breaker's order. A completed answer closes the circuit whatever
        came before it, so the replay from there ends where a replay of all would."""
        size = len(self.records)
        history: list[Outcome] = []
        for counted in self._at.counting.values():
            tail: list[Outcome] = []
            for outcome in reversed(counted):
                if outcome.order >= size:
                    continue
                tail.append(outcome)
                if outcome.status is ConsultationStatus.COMPLETED:
                    break
            history.extend(reversed(tail))
        return history

    def refusal_evidence(self, advisor: str) -> list[StoredRecord]:
        """All that ``negotiation.refused_by`` reads of an advisor, in order: its consultations
        that refused a request form, and its newest that named the server's build."""
        size = len(self.records)
        found = dict(_upto(self._at.refusing.get(advisor, []), size))
        served = self._at.served.get(advisor, [])
        newest = bisect_left(served, size, key=lambda e: e[0])
        if newest:
            found.setdefault(*served[newest - 1])
        return [found[place] for place in sorted(found)]

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
