"""The portfolio's budget in the ledger (``ledger.budget``): every amount a job's attempts were
billed, kept as it was billed (keyed on workflow, step, attempt and call), and the part of the
budget each job in flight holds from its start until it is charged. On the ledger's connection;
on a shared database one budget decision at a time across every machine."""

from __future__ import annotations

from typing import Final

from .db import Database

__all__ = ["LedgerBudget"]

_BUDGET_LOCK: Final = 7_153_110_002
"""The advisory lock every machine's budget decision takes on PostgreSQL."""


class LedgerBudget:
    def __init__(self, db: Database) -> None:
        self._db = db

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
            self._db.write(
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

    # -- spent: each run's charge, on a shared database the one record spend.json is made from ----

    def record_spent(
        self, run_id: str, project_id: str, tokens: int, budget_stop: str | None, *, now: str
    ) -> bool:
        """A run's charge, once; False when that run was charged already."""
        return (
            self._db.write(
                "INSERT INTO spent (run_id, project_id, tokens, budget_stop, recorded_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING",
                (run_id, project_id, tokens, budget_stop, now),
            )
            == 1
        )

    def spent_total(self) -> int | None:
        """Every run's charge together; None when no run was charged through the ledger yet."""
        row = self._db.one("SELECT COUNT(*), COALESCE(SUM(tokens), 0) FROM spent")
        return int(row[1]) if row and row[0] else None

    def spent_runs(self) -> list[tuple[str, str, int, str | None]]:
        """Every run's charge, in the order they were charged: run, project, tokens, stop."""
        rows = self._db.all(
            f"SELECT run_id, project_id, tokens, budget_stop FROM spent ORDER BY {self._db.seq}"
        )
        return [(str(r), str(p), int(t), None if s is None else str(s)) for r, p, t, s in rows]

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
        self._db.write("DELETE FROM reservations WHERE identity = ?", (identity,))
