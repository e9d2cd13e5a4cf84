"""Fencing tokens (``ledger.fences``): a job attempt writes only while its token is current.

A machine cut off from a shared PostgreSQL loses its locks on the server within about 40 s, but
learns of it only when it next asks; meanwhile the daemon may hand its jobs to a live worker. So
each job's workflow has a counter, raised when it is handed over (:meth:`LedgerFences.hand_over`)
and when another process takes it up (:meth:`take`, at the first step a process runs of it:
after a hand-over, a crash, or the engine's own recovery). Every write of a step — the staging
folder, the publication, a charge, the checkpoint — runs inside :meth:`guard`, which holds the
workflow's row ``FOR SHARE`` and refuses with :class:`Fenced` when the token moved on. A hand-over waits for a
write under way to end (its ``UPDATE`` needs that row), so a write either lands before the
hand-over or not at all. On one machine's SQLite there is one process and no hand-over: the
guard is empty.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .db import Database

__all__ = ["Fenced", "LedgerFences"]


class Fenced(Exception):
    """The job was handed to another machine: this attempt writes nothing more."""

    def __init__(self, workflow: str, holder: str | None) -> None:
        super().__init__(workflow, holder)  # its arguments only: DBOS keeps a step's error pickled
        self.workflow, self.holder = workflow, holder

    def __str__(self) -> str:
        now = f"executor {self.holder!r}" if self.holder else "the queue"
        return (
            f"the job {self.workflow[:12]} was handed over to {now} while this process was cut "
            "off or stopped; this attempt writes nothing more"
        )


class LedgerFences:
    def __init__(self, db: Database, *, shared: bool) -> None:
        self._db = db
        self._shared = shared

    def take(self, workflow: str, executor: str, *, held: int | None, assigned: bool) -> int:
        """The token for a step of ``workflow`` starting in this process, as ``executor``.

        ``held``: the token this process took for it at an earlier step (None: this is the
        process's first). A process's first step takes a new token — only if the engine gave
        the workflow to this executor (``assigned``) — so that any earlier execution of it, on a
        machine cut off or frozen, is fenced off; a later step keeps the token it took, unless
        the workflow was handed over meanwhile."""
        if not self._shared:
            return 0
        with self._db.transaction() as cursor:
            cursor.execute(
                "INSERT INTO fences (workflow, token, holder) VALUES (%s, 0, NULL)"
                " ON CONFLICT (workflow) DO NOTHING",
                (workflow,),
            )
            cursor.execute(
                "SELECT token, holder FROM fences WHERE workflow = %s FOR UPDATE", (workflow,)
            )
            token, holder = cursor.fetchone()
            if held is not None:
                if held != token or holder != executor:
                    raise Fenced(workflow, holder)
                return held
            if not assigned:
                raise Fenced(workflow, holder)
            cursor.execute(
                "UPDATE fences SET token = token + 1, holder = %s WHERE workflow = %s"
                " RETURNING token",
                (executor, workflow),
            )
            (taken,) = cursor.fetchone()
            return int(taken)

    def hand_over(self, workflow: str) -> int:
        """The workflow leaves the machine that ran it: its token moves on at once, before any
        other machine takes it (so the one it left writes nothing more from now on)."""
        if not self._shared:
            return 0
        with self._db.transaction() as cursor:
            # A write under way holds the row: wait for it a while, not for a machine frozen
            # mid-write whose session the server has not dropped yet.
            cursor.execute("SET LOCAL lock_timeout = '5s'")
            cursor.execute(
                "INSERT INTO fences (workflow, token, holder) VALUES (%s, 1, NULL)"
                " ON CONFLICT (workflow) DO UPDATE SET token = fences.token + 1, holder = NULL"
                " RETURNING token",
                (workflow,),
            )
            (token,) = cursor.fetchone()
            return int(token)

    @contextlib.contextmanager
    def guard(self, workflow: str, executor: str, token: int) -> Iterator[None]:
        """The block's writes (and the ledger's inside it, one transaction) happen only while
        ``token`` is the workflow's; a hand-over waits for the block to end."""
        if not self._shared:
            yield
            return
        with self._db.transaction() as cursor:
            cursor.execute(
                "SELECT token, holder FROM fences WHERE workflow = %s FOR SHARE", (workflow,)
            )
            row = cursor.fetchone()
            if row is None or int(row[0]) != token or row[1] != executor:
                raise Fenced(workflow, None if row is None else row[1])
            yield
