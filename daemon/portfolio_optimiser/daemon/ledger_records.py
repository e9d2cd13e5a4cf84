"""The ledger's records of what runs published, cost and experts decided: each candidate a run
published (its key and reasoning record ids), each project's latest run, every amount a job's
attempts were billed (keyed on workflow, step, attempt and call), and each verdict's history per
candidate (the last one recorded wins for readers). Part of :class:`Ledger`, on its
connection: one database, one writer."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from .db import Database

__all__ = ["CandidateInput", "CandidateRow", "LedgerRecords", "VerdictRow"]

_BUDGET_LOCK: Final = 7_153_110_002
"""The advisory lock every machine's budget decision takes on PostgreSQL."""


@dataclass(frozen=True, slots=True)
class VerdictRow:
    candidate_id: str
    digest: str
    name: str
    decision: str
    recorded_at: str


class CandidateInput(NamedTuple):
    """One candidate a run published: its id, its key (JSON) and its reasoning record ids."""

    candidate_id: str
    key_json: str
    assessment: str | None = None
    disagreement: str | None = None


@dataclass(frozen=True, slots=True)
class CandidateRow:
    candidate_id: str
    project_id: str
    run_id: str
    key_json: str
    assessment: str | None
    disagreement: str | None
    recorded_at: str | None


class LedgerRecords:
    """Candidates, project runs and verdicts; mixed into :class:`~.ledger.Ledger`."""

    _db: Database

    if TYPE_CHECKING:  # the ledger's own, which commits before it returns

        def _write(self, sql: str, params: tuple[Any, ...]) -> int: ...

    # -- verdicts -------------------------------------------------------------------------------

    def record_verdict(
        self, candidate_id: str, digest: str, name: str, decision: str, now: str
    ) -> bool:
        """Append a verdict to the candidate's history; False if it is already the latest.

        Re-recording the latest verdict (a crash between this and marking the item ``done``) adds
        nothing; an edit back to an earlier verdict is a new entry and wins again.
        """
        latest = self.latest_verdict(candidate_id)
        if latest is not None and latest.digest == digest:
            return False
        self._write(
            "INSERT INTO verdicts (candidate_id, digest, name, decision, recorded_at)"
            " VALUES (?, ?, ?, ?, ?)",
            (candidate_id, digest, name, decision, now),
        )
        return True

    def verdict_history(self, candidate_id: str) -> list[VerdictRow]:
        """Every verdict recorded for the candidate, oldest first."""
        # Ordered by insertion (seq), not recorded_at: a wall clock stepped back must not let an
        # older edit win over a newer one.
        rows = self._db.all(
            "SELECT candidate_id, digest, name, decision, recorded_at FROM verdicts"
            " WHERE candidate_id = ? ORDER BY seq",
            (candidate_id,),
        )
        return [VerdictRow(*row) for row in rows]

    def latest_verdicts(self) -> list[VerdictRow]:
        """Each candidate's current verdict (its last recorded one), in recording order."""
        rows = self._db.all(
            "SELECT candidate_id, digest, name, decision, recorded_at FROM verdicts v"
            " WHERE seq = (SELECT MAX(seq) FROM verdicts w WHERE w.candidate_id = v.candidate_id)"
            " ORDER BY seq"
        )
        return [VerdictRow(*row) for row in rows]

    def latest_verdict(self, candidate_id: str) -> VerdictRow | None:
        """The verdict recorded last for the candidate (last write wins); None if there is none."""
        row = self._db.one(
            "SELECT candidate_id, digest, name, decision, recorded_at FROM verdicts"
            " WHERE candidate_id = ? ORDER BY seq DESC LIMIT 1",
            (candidate_id,),
        )
        return None if row is None else VerdictRow(*row)

    # -- candidates -----------------------------------------------------------------------------

    def add_candidates(
        self,
        run_id: str,
        project_id: str,
        rows: Iterable[tuple[str, str, str | None, str | None]],
        *,
        now: str | None = None,
    ) -> int:
        """Record the candidates a run published, in one transaction; returns how many.

        Each row is a :class:`CandidateInput` or a plain tuple in its order. Candidate ids are
        minted from content, so an id seen again in a later run is the same candidate: its row is
        updated to point at the newest run. ``recorded_at`` is ``now`` when given, else NULL.
        """
        values = [
            (candidate_id, project_id, run_id, key_json, assessment, disagreement, now)
            for candidate_id, key_json, assessment, disagreement in rows
        ]
        self._db.write_many(
            "INSERT INTO candidates (candidate_id, project_id, run_id, key_json, assessment,"
            " disagreement, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (candidate_id) DO UPDATE SET project_id = excluded.project_id,"
            " run_id = excluded.run_id, key_json = excluded.key_json,"
            " assessment = excluded.assessment, disagreement = excluded.disagreement,"
            " recorded_at = excluded.recorded_at",
            values,
        )
        return len(values)

    # -- charges: what each attempt of a job's step was billed, kept as it was billed -------------

    def next_charge_attempt(self, workflow: str, step: str) -> int:
        """The number of a new attempt at ``step`` (attempts that charged nothing leave none)."""
        row = self._db.one(
            "SELECT MAX(attempt) FROM charges WHERE workflow = ? AND step = ?", (workflow, step)
        )
        return int(row[0] or 0) + 1 if row else 1

    def record_charge(
        self, workflow: str, step: str, attempt: int, seq: int, tokens: int, *, now: str
    ) -> bool:
        """Keep one billed amount; False when this (workflow, step, attempt, seq) is kept already,
        so a charge recorded twice counts once."""
        return (
            self._write(
                "INSERT INTO charges (workflow, step, attempt, seq, tokens, recorded_at)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (workflow, step, attempt, seq, tokens, now),
            )
            == 1
        )

    def charged_tokens(self, workflow: str) -> int:
        """Every token the job's attempts were billed, a killed attempt's included."""
        row = self._db.one(
            "SELECT COALESCE(SUM(tokens), 0) FROM charges WHERE workflow = ?", (workflow,)
        )
        return int(row[0]) if row else 0

    # -- reservations: the portfolio budget a job holds from its claim until it is charged ------

    def reserved_tokens(self) -> int:
        row = self._db.one("SELECT COALESCE(SUM(tokens), 0) FROM reservations")
        return int(row[0]) if row else 0

    def reserve(self, identity: str, tokens: int, *, cap: int, spent: int, now: str) -> bool:
        """Hold ``tokens`` of the portfolio's ``cap`` for the job, if what is ``spent`` and held
        by other jobs leaves them; True when held (already held counts). One decision at a time
        across every machine, so the cap holds however many workers ask at once."""
        with self._db.exclusive(_BUDGET_LOCK) as tx:
            if tx.one("SELECT 1 FROM reservations WHERE identity = ?", (identity,)):
                return True
            row = tx.one("SELECT COALESCE(SUM(tokens), 0) FROM reservations")
            held = int(row[0]) if row else 0
            if spent + held + tokens > cap:
                return False
            tx.write(
                "INSERT INTO reservations (identity, tokens, reserved_at) VALUES (?, ?, ?)",
                (identity, tokens, now),
            )
            return True

    def holders(self) -> list[str]:
        """The jobs that hold part of the budget now."""
        return [str(row[0]) for row in self._db.all("SELECT identity FROM reservations")]

    def release(self, identity: str) -> None:
        """The job was charged (its real spend replaces the hold) or set aside."""
        self._write("DELETE FROM reservations WHERE identity = ?", (identity,))

    def record_project_run(self, project_id: str, run_id: str, folder: str, *, now: str) -> None:
        """This run is now the project's latest: the one the portfolio report counts."""
        self._write(
            "INSERT INTO project_runs (project_id, run_id, folder, recorded_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (project_id) DO UPDATE SET run_id = excluded.run_id,"
            " folder = excluded.folder, recorded_at = excluded.recorded_at",
            (project_id, run_id, folder, now),
        )

    def project_runs(self) -> list[tuple[str, str, str]]:
        """Each project's latest run: (project id, run id, folder), by project."""
        rows = self._db.all(
            "SELECT project_id, run_id, folder FROM project_runs ORDER BY project_id"
        )
        return [(str(p), str(r), str(f)) for p, r, f in rows]

    def candidate(self, candidate_id: str) -> CandidateRow | None:
        """The candidate with this id, or None when no run published it."""
        row = self._db.one(
            "SELECT candidate_id, project_id, run_id, key_json, assessment, disagreement,"
            " recorded_at FROM candidates WHERE candidate_id = ?",
            (candidate_id,),
        )
        return None if row is None else CandidateRow(*row)
