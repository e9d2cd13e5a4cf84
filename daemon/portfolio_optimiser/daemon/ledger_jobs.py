"""Bundle jobs in the ledger (``ledger.jobs``): each run identity's job, the one record of the
stage it has passed (``job``), and the run identity each claim was given, so recovery and
retries reuse it. On the ledger's connection."""

from __future__ import annotations

from .db import Database

__all__ = ["LedgerJobs"]


class LedgerJobs:
    def __init__(self, db: Database) -> None:
        self._db = db

    def save(self, identity: str, stage: str, state_json: str, *, now: str) -> None:
        """A bundle job's checkpoint: the stage it has passed and its state (``daemon.job``)."""
        self._db.write(
            "INSERT INTO jobs (identity, stage, state_json, updated) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (identity) DO UPDATE SET stage = excluded.stage,"
            " state_json = excluded.state_json, updated = excluded.updated",
            (identity, stage, state_json, now),
        )

    def get(self, identity: str) -> str | None:
        row = self._db.one("SELECT state_json FROM jobs WHERE identity = ?", (identity,))
        return None if row is None else str(row[0])

    def drop(self, identity: str) -> None:
        """The job ended without a run (quarantined): a later drop of it starts afresh."""
        self._db.write("DELETE FROM jobs WHERE identity = ?", (identity,))

    def all(self, *, unfinished: bool = False) -> list[str]:
        """Jobs' states in the order they began; ``unfinished``: only those not yet settled."""
        where = " WHERE stage != 'settled'" if unfinished else ""
        rows = self._db.all(f"SELECT state_json FROM jobs{where} ORDER BY {self._db.seq}")
        return [str(row[0]) for row in rows]

    def remember_claim(self, claimed: str, identity: str) -> None:
        """The run identity a claim was given, so recovery and retries reuse it."""
        self._db.write(
            "INSERT INTO claims (claimed, identity) VALUES (?, ?) ON CONFLICT (claimed) DO NOTHING",
            (claimed, identity),
        )

    def forget_claim(self, claimed: str) -> None:
        self._db.write("DELETE FROM claims WHERE claimed = ?", (claimed,))

    def claim_identity(self, claimed: str) -> str | None:
        row = self._db.one("SELECT identity FROM claims WHERE claimed = ?", (claimed,))
        return None if row is None else str(row[0])
