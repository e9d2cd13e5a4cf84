"""The machines that share one ledger: which process takes in the inbox, which executors are
alive, and the stores only one of them may write at a time (``ledger.machines``).

On a shared PostgreSQL each of these is a session advisory lock, held on the process's ledger
connection, so it ends with the process however it ends (a SIGKILLed machine's lock is gone when
PostgreSQL notices its connection is). On one machine's SQLite file there is one process, and the
workspace lock (``lock``) is all of it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from .db import Database
from .ledger_schema import LedgerError

__all__ = ["INTAKE_LOCK", "SPEND_LOCK", "LedgerMachines", "Machine"]

INTAKE_LOCK: Final = 7_153_110_003
"""Held by the one daemon that takes in the inbox and the verdicts, and writes the wiki and the
portfolio report."""
SPEND_LOCK: Final = 7_153_110_004
"""Held by whichever job is writing ``outbox/spend.json``."""
_EXECUTOR_LOCKS: Final = 7_153_111
"""The namespace of the per-executor locks (the second key is the executor id's hash)."""


@dataclass(frozen=True, slots=True)
class Machine:
    """A daemon or worker that worked on this ledger, and whether it is working now."""

    executor: str
    role: str
    host: str
    pid: int
    started: str
    seen: str
    alive: bool


class LedgerMachines:
    """``ledger.machines``, on the ledger's connection (its session holds the locks)."""

    def __init__(self, db: Database, *, shared: bool) -> None:
        self._db = db
        self._shared = shared

    def hold_intake(self, workspace: str, *, now: str) -> None:
        """This daemon takes in ``workspace``'s inbox; a second daemon on the same database is
        refused, told whether it is on the same workspace (its machine adds a worker instead) or
        on another one (which needs a database of its own: one database is one portfolio)."""
        if not self._shared:
            return
        row = self._db.one("SELECT pg_try_advisory_lock(?)", (INTAKE_LOCK,))
        if not (row and row[0]):
            intake = [m for m in self.all() if m.role == "daemon" and m.alive]
            who = f" (on {intake[0].host}, pid {intake[0].pid})" if intake else ""
            served = self._db.one("SELECT workspace FROM intake WHERE one = 1")
            if served is not None and served[0] != workspace:
                raise LedgerError(
                    f"the database {self._db.where} is the ledger of the workspace {served[0]}, "
                    f"whose daemon runs{who}; this workspace ({workspace}) needs a database of "
                    "its own (one database holds one portfolio): create one and point this "
                    "daemon's PORTFOLIO_OPTIMISER_DATABASE_URL at it"
                )
            raise LedgerError(
                f"another daemon already takes in this workspace's inbox{who} through the "
                f"shared ledger; on this machine start `portfolio-optimiser worker` "
                "instead, which shares its jobs"
            )
        self._db.write(
            "INSERT INTO intake (one, workspace, since) VALUES (1, ?, ?) ON CONFLICT (one) DO "
            "UPDATE SET workspace = excluded.workspace, since = excluded.since",
            (workspace, now),
        )

    def hold_executor(self, executor: str, *, role: str, host: str, pid: int, now: str) -> None:
        """This process is ``executor`` until it ends: DBOS recovers that executor's jobs here,
        so two processes under one name would run them twice. Refused with the holder's name."""
        if not self._shared:
            return
        row = self._db.one(
            "SELECT pg_try_advisory_lock(?, hashtext(?))", (_EXECUTOR_LOCKS, executor)
        )
        if not (row and row[0]):
            held = next((m for m in self.all() if m.executor == executor), None)
            who = f" by a {held.role} on {held.host} (pid {held.pid})" if held else ""
            raise LedgerError(
                f"the executor {executor!r} is already working{who}; give this one its own "
                "name with --executor NAME (or PORTFOLIO_OPTIMISER_EXECUTOR)"
            )
        self._db.write(
            "INSERT INTO machines (executor, role, host, pid, started, seen)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (executor) DO UPDATE SET role = excluded.role,"
            " host = excluded.host, pid = excluded.pid, started = excluded.started,"
            " seen = excluded.seen",
            (executor, role, host, pid, now, now),
        )

    def seen(self, executor: str, *, now: str) -> None:
        """A heartbeat: when this executor last said it works (shown by ``status``)."""
        self._db.write("UPDATE machines SET seen = ? WHERE executor = ?", (now, executor))

    def executor_alive(self, executor: str) -> bool:
        """Whether a process holds ``executor`` now (its lock, read from ``pg_locks``, never
        taken: a look must not refuse a worker starting at that moment)."""
        if not self._shared:
            return False
        row = self._db.one(
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND classid = ?::oid AND objid = (hashtext(?)::bigint & 4294967295)::oid"
            " AND objsubid = 2 AND database = (SELECT oid FROM pg_database"
            " WHERE datname = current_database())",
            (_EXECUTOR_LOCKS, executor),
        )
        return row is not None

    @contextlib.contextmanager
    def taken_over(self, executor: str) -> Iterator[bool]:
        """``executor``'s lock, held for the block when no process holds it (True: that machine
        is gone, and cannot come back under its name until the block ends), else False."""
        if not self._shared:
            yield False
            return
        row = self._db.one(
            "SELECT pg_try_advisory_lock(?, hashtext(?))", (_EXECUTOR_LOCKS, executor)
        )
        if not (row and row[0]):
            yield False
            return
        try:
            yield True
        finally:
            self._db.one("SELECT pg_advisory_unlock(?, hashtext(?))", (_EXECUTOR_LOCKS, executor))

    def all(self) -> list[Machine]:
        rows = self._db.all(
            "SELECT executor, role, host, pid, started, seen FROM machines ORDER BY executor"
        )
        return [
            Machine(str(e), str(r), str(h), int(p), str(s), str(n), self.executor_alive(str(e)))
            for e, r, h, p, s, n in rows
        ]

    @contextlib.contextmanager
    def one_writer(self, key: int) -> Iterator[None]:
        """The block runs while no other machine runs one under ``key`` (a file many machines
        publish, such as ``spend.json``: read, changed and written by one at a time)."""
        if not self._shared:  # one machine: one process runs jobs
            yield
            return
        self._db.one("SELECT pg_advisory_lock(?)", (key,))
        try:
            yield
        finally:
            self._db.one("SELECT pg_advisory_unlock(?)", (key,))
