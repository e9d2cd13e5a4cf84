"""The daemon's ledger: what happened to each input, keyed by the SHA-256 of its content.

Decides: the durable state of every input (``claimed``, ``done``, ``failed``, ``waiting``,
``retry``), each bundle job's checkpoint (the stage it passed and its state, ``job``), each
verdict's history per candidate (the last one recorded wins for readers), and which candidate ids
the daemon has published, so a verdict naming an unknown id can be told so. A re-drop
of identical content finds its existing row; "duplicate" is that finding, not a state. The items
and the run counts are the :class:`Ledger`'s own; the rest are its parts, each a class of its own
on the same connection: ``ledger.jobs`` (``ledger_jobs``), ``ledger.records``
(``ledger_records``), ``ledger.budget`` (``ledger_budget``), ``ledger.machines``
(``ledger_machines``) and ``ledger.ingested``, the portfolio's compact index (``ledger_ingested``).

Never reads the clock (every timestamp is an ISO string passed in), never touches the inbox or the
outbox, and never decides whether a transition is allowed or when to give up — the service does.
The database's own locking is enough for its rows (one daemon per workspace; on a shared
PostgreSQL, one intake and many workers, whose turns are ``ledger_machines``'s); on SQLite, WAL lets ``status`` read while the
daemon writes, and ``synchronous=FULL`` makes every commit durable before the input it describes
is removed (research/daemon.md §3 step 5). Every write commits before return. The tables and how
each database is made ready are ``ledger_schema``'s; the SQL both take goes through ``db``.
(Writes in a ``together`` block commit at its end, as one.)
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, get_args

from portfolio_optimiser.config import EX_CONFIG

from .db import Database
from .ledger_budget import LedgerBudget
from .ledger_fences import LedgerFences
from .ledger_ingested import LedgerIngested
from .ledger_jobs import LedgerJobs
from .ledger_machines import LedgerMachines
from .ledger_records import CandidateInput, CandidateRow, LedgerRecords, VerdictRow
from .ledger_schema import (
    LedgerError,
    prepare_postgresql,
    prepare_sqlite,
)

__all__ = [
    "STATES",
    "CandidateInput",
    "CandidateRow",
    "DatabaseRefused",
    "Item",
    "Kind",
    "Ledger",
    "LedgerError",
    "State",
    "VerdictRow",
    "next_backoff_s",
]

Kind = Literal["bundle", "verdict"]
State = Literal["claimed", "done", "failed", "waiting", "retry"]
STATES: Final[tuple[State, ...]] = get_args(State)


@dataclass(frozen=True, slots=True)
class Item:
    digest: str
    kind: Kind
    name: str
    state: State
    attempts: int
    next_attempt_at: str | None
    detail: str | None
    output: str | None
    error: str | None
    first_seen: str
    updated: str


def next_backoff_s(attempts: int, *, base_s: float, cap_s: float) -> float:
    """Seconds to wait after ``attempts`` failed tries: ``base_s`` doubling each time, capped.

    ``attempts`` ≤ 1 gives ``base_s``; the exponent is bounded so a huge count cannot overflow.
    """
    if base_s < 0 or cap_s < 0:
        raise ValueError(f"back-off needs non-negative seconds, not base_s={base_s} cap_s={cap_s}")
    exponent = min(max(attempts - 1, 0), 62)
    return float(min(cap_s, base_s * (2**exponent)))


def _parse_time(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    # Naive timestamps are taken as UTC so that they compare with aware ones instead of raising.
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


# Named, in Item's field order, so a column added later cannot shift the fields.
_ITEM_COLUMNS: Final = "digest, kind, name, state, attempts, next_attempt_at, detail, output, error, first_seen, updated"


def _item(row: tuple[Any, ...]) -> Item:
    return Item(*row)


class DatabaseRefused(LedgerError):
    """The shared database cannot be reached, or refuses this role a right it needs: a matter of
    configuration (exit 78, which systemd does not restart into a loop), never a defect."""

    exit_code = EX_CONFIG


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class Ledger:
    """The ledger: a SQLite file (:meth:`open`), or a PostgreSQL database many machines share
    (:meth:`connect`). Close with :meth:`close` or ``with``."""

    def __init__(self, path: Path, database: Database, url: str | None = None) -> None:
        self.path: Final = path
        """The file, or for PostgreSQL the server and database (never a password)."""
        self.where: Final = database.where
        """The same as text: a PostgreSQL URL keeps its ``//``, which a Path would fold."""
        self._db = database
        self._url = url
        self.shared: Final = url is not None
        """A PostgreSQL many machines share (its locks, fences and spend are everyone's)."""
        self.jobs: Final = LedgerJobs(database)
        self.records: Final = LedgerRecords(database)
        self.budget: Final = LedgerBudget(database)
        self.machines: Final = LedgerMachines(database, shared=url is not None)
        self.fences: Final = LedgerFences(database, shared=url is not None)
        self.ingested: Final = LedgerIngested(database)

    def reopen(self) -> Ledger:
        """Another connection to the same ledger (for another thread)."""
        return Ledger.open(self.path) if self._url is None else Ledger.connect(self._url)

    @classmethod
    def open(cls, path: Path) -> Ledger:
        """Open (and create if needed) the ledger at ``path``.

        Raises :class:`LedgerError` if the file is not a usable ledger database.
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            database = Database.sqlite(path)
        except sqlite3.Error as exc:
            raise LedgerError(
                f"cannot open the ledger {path} ({exc}); check the state directory's permissions"
            ) from None
        try:
            prepare_sqlite(database, path)
        except sqlite3.DatabaseError as exc:
            database.close()
            raise LedgerError(
                f"the ledger {path} is not a readable database ({exc}); stop the daemon and restore "
                "it from a backup — starting without it forgets which bundles ran and which "
                "candidates await verdicts, so verdicts for earlier runs would be refused"
            ) from None
        except LedgerError:
            database.close()
            raise
        return cls(path, database)

    @classmethod
    def connect(cls, url: str) -> Ledger:
        """The ledger in a PostgreSQL database (``[scale] database_url``), created if needed."""
        import psycopg

        try:
            database = Database.postgresql(url)
        except psycopg.Error as exc:
            raise DatabaseRefused(
                f"cannot reach the ledger's database ({_first_line(exc)}); check "
                "[scale] database_url (or PORTFOLIO_OPTIMISER_DATABASE_URL) and that PostgreSQL "
                "is running and lets this host in (pg_hba.conf)"
            ) from None
        try:
            prepare_postgresql(database)
        except psycopg.errors.InsufficientPrivilege as exc:
            database.close()
            info = psycopg.conninfo.conninfo_to_dict(url)
            role, name = info.get("user") or "this role", info.get("dbname") or "the database"
            raise DatabaseRefused(
                f"the database {name} refused the role {role} ({_first_line(exc)}); create the "
                f"database owned by the role (createdb -O {role} {name}) or grant it the schema "
                f"(GRANT USAGE, CREATE ON SCHEMA public TO {role}), then start again"
            ) from None
        except BaseException:
            database.close()
            raise
        return cls(Path(database.where), database, url)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        return self._db.write(sql, params)  # commits on return, rolls back on an exception

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        """Every write in the block is one transaction: all or none, and one flush."""
        with self._db.transaction():
            yield

    # -- items ----------------------------------------------------------------------------------

    def get(self, digest: str) -> Item | None:
        row = self._db.one(f"SELECT {_ITEM_COLUMNS} FROM items WHERE digest = ?", (digest,))
        return None if row is None else _item(row)

    def _require(self, digest: str) -> Item:
        item = self.get(digest)
        if item is None:
            raise LedgerError(f"the ledger {self.where} has no item {digest}; call begin() first")
        return item

    def begin(self, digest: str, *, kind: Kind, name: str, now: str) -> Item:
        """Record a newly claimed input; if its content is already known, return that row as is.

        The existing row is left untouched so a re-drop of identical content cannot undo a
        ``done`` or ``failed``: the caller reads ``state`` and decides (duplicate, or retry).
        """
        if kind not in get_args(Kind):
            raise ValueError(f"kind must be 'bundle' or 'verdict', not {kind!r}")
        self._write(
            "INSERT INTO items (digest, kind, name, state, attempts, first_seen, updated)"
            " VALUES (?, ?, ?, 'claimed', 0, ?, ?) ON CONFLICT (digest) DO NOTHING",
            (digest, kind, name, now, now),
        )
        return self._require(digest)

    def mark(
        self,
        digest: str,
        state: State,
        *,
        now: str,
        detail: str | None = None,
        output: str | None = None,
        error: str | None = None,
    ) -> Item:
        """Move an item to ``state``; ``detail``, ``output`` and ``error`` are replaced as given.

        The row describes the item's current state, not its history, so a ``done`` after a
        ``retry`` carries no stale error. Leaving a state clears ``next_attempt_at``; marking
        ``retry`` keeps it (:meth:`schedule_retry` sets it and counts the attempt; a ``retry``
        without a time is due at once — ``retry NAME`` after a quarantine).
        """
        if state not in STATES:
            raise ValueError(f"state must be one of {', '.join(STATES)}, not {state!r}")
        self._require(digest)
        self._write(
            "UPDATE items SET state = ?,"
            " next_attempt_at = CASE WHEN ? = 'retry' THEN next_attempt_at END,"
            " detail = ?, output = ?, error = ?, updated = ? WHERE digest = ?",
            (state, state, detail, output, error, now, digest),
        )
        return self._require(digest)

    def schedule_retry(self, digest: str, *, now: str, at: str, error: str | None = None) -> Item:
        """Count one more failed attempt and schedule the next try at ``at`` (a transient failure)."""
        self._require(digest)
        _parse_time(at)  # a malformed time would make the item never (or always) due
        self._write(
            "UPDATE items SET state = 'retry', attempts = attempts + 1, next_attempt_at = ?,"
            " error = ?, updated = ? WHERE digest = ?",
            (at, error, now, digest),
        )
        return self._require(digest)

    def start_run(self, digest: str) -> int:
        """Count a run of ``digest`` as started (durably, before it starts); returns the count.

        A run that ends, well or badly, calls :meth:`finish_run`; one that took the process down
        stays counted, so a count of two at the next start means it crashed the daemon twice.
        """
        self._write(
            "INSERT INTO unfinished_runs (digest, starts) VALUES (?, 1)"
            " ON CONFLICT (digest) DO UPDATE SET starts = unfinished_runs.starts + 1",
            (digest,),
        )
        return self.unfinished_starts(digest)

    def finish_run(self, digest: str) -> None:
        self._write("DELETE FROM unfinished_runs WHERE digest = ?", (digest,))

    def unfinished_starts(self, digest: str) -> int:
        row = self._db.one("SELECT starts FROM unfinished_runs WHERE digest = ?", (digest,))
        return int(row[0]) if row else 0

    def items(self, state: State | None = None, *, of: Iterable[str] | None = None) -> list[Item]:
        """Items in the order they were first recorded, optionally only those in ``state``; or
        the items of the digests ``of`` that the ledger holds, in no order, read a few hundred
        at a time (a look at ten thousand projects' runs asked for each one alone)."""
        if of is not None:
            wanted, found = list(dict.fromkeys(of)), []
            for at in range(0, len(wanted), 500):
                chunk = wanted[at : at + 500]
                marks = ", ".join("?" * len(chunk))
                sql = f"SELECT {_ITEM_COLUMNS} FROM items WHERE digest IN ({marks})"
                found += [_item(row) for row in self._db.all(sql, tuple(chunk))]
            return [item for item in found if state is None or item.state == state]
        if state is None:
            rows = self._db.all(f"SELECT {_ITEM_COLUMNS} FROM items ORDER BY {self._db.seq}")
        else:
            rows = self._db.all(
                f"SELECT {_ITEM_COLUMNS} FROM items WHERE state = ? ORDER BY {self._db.seq}",
                (state,),
            )
        return [_item(row) for row in rows]

    def due_retries(self, *, now: str) -> list[Item]:
        """Items in ``retry`` whose next try is at or before ``now``, compared as instants."""
        instant = _parse_time(now)
        return [
            item
            for item in self.items("retry")
            if item.next_attempt_at is None or _parse_time(item.next_attempt_at) <= instant
        ]

    def counts(self) -> dict[str, int]:
        """How many items are in each state; every state is present, zero if empty."""
        counts: dict[str, int] = dict.fromkeys(STATES, 0)
        for state, n in self._db.all("SELECT state, COUNT(*) FROM items GROUP BY state"):
            counts[state] = int(n)
        return counts
