"""One connection to the ledger's database: a SQLite file on one machine, PostgreSQL when many
machines share a portfolio (``[scale] database_url``).

Decides: the few ways the two differ, so the ledger writes one SQL for both (``?`` placeholders,
``ON CONFLICT``): the placeholder style, how a transaction starts, and the column that orders
rows as they were recorded (SQLite's ``rowid``, PostgreSQL's ``seq`` identity). Reads run outside
a transaction; each write is its own transaction, committed before it returns.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, Literal, Protocol

__all__ = ["Database", "Dialect", "database_unavailable"]

Dialect = Literal["sqlite", "postgresql"]
Row = tuple[Any, ...]


def database_unavailable(exc: BaseException) -> bool:
    """A database that is busy, full or unreachable for now: worth a retry, not a quarantine."""
    if isinstance(exc, sqlite3.OperationalError):
        return True  # locked, busy, disk full, I/O error
    try:
        import psycopg
    except ImportError:  # pragma: no cover - a dependency
        return False
    # DBOS's errors come through SQLAlchemy, which keeps the driver's as ``orig``.
    return isinstance(exc, psycopg.OperationalError) or isinstance(
        getattr(exc, "orig", None), psycopg.OperationalError
    )


class _Cursor(Protocol):
    rowcount: int

    def execute(self, sql: str, params: Any = ..., /) -> Any: ...
    def executemany(self, sql: str, params: Any, /) -> Any: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def close(self) -> None: ...


class Database:
    """The connection and its dialect; see the module's docstring."""

    def __init__(self, raw: Any, dialect: Dialect, where: str) -> None:
        self._raw = raw
        self.dialect: Final = dialect
        self.where: Final = where
        """The file or the server, for messages (never a password)."""
        self.seq: Final = "rowid" if dialect == "sqlite" else "seq"
        self._open: _Cursor | None = None
        """The transaction open on this connection, which a transaction inside it joins."""

    @classmethod
    def sqlite(cls, path: Path) -> Database:
        # The service hands the ledger to its worker thread while the loop waits; never both at
        # once, so the connection may cross threads. Autocommit: transactions are explicit.
        raw = sqlite3.connect(path, timeout=30.0, check_same_thread=False, isolation_level=None)
        return cls(raw, "sqlite", str(path))

    @classmethod
    def postgresql(cls, url: str) -> Database:
        import psycopg

        # Keepalives on both ends: a machine that lost power loses its session (and with it the
        # locks that say it works) within about 40 s, not the kernel's two hours; and a machine
        # cut off learns it as soon, from a query that fails instead of hanging.
        raw = psycopg.connect(
            url,
            autocommit=True,
            connect_timeout=10,
            keepalives=1,
            keepalives_idle=20,
            keepalives_interval=5,
            keepalives_count=4,
            tcp_user_timeout=40_000,
            options="-c tcp_keepalives_idle=20 -c tcp_keepalives_interval=5"
            " -c tcp_keepalives_count=4 -c tcp_user_timeout=40000",
        )
        info = raw.info
        return cls(raw, "postgresql", f"postgresql://{info.host}:{info.port}/{info.dbname}")

    def _sql(self, sql: str) -> str:
        return sql if self.dialect == "sqlite" else sql.replace("?", "%s")

    def _cursor(self) -> _Cursor:
        cursor: _Cursor = self._raw.cursor()
        return cursor

    def one(self, sql: str, params: tuple[Any, ...] = ()) -> Row | None:
        cursor = self._cursor()
        try:
            cursor.execute(self._sql(sql), params)
            row = cursor.fetchone()
        finally:
            cursor.close()
        return None if row is None else tuple(row)

    def all(self, sql: str, params: tuple[Any, ...] = ()) -> list[Row]:
        cursor = self._cursor()
        try:
            cursor.execute(self._sql(sql), params)
            return [tuple(row) for row in cursor.fetchall()]
        finally:
            cursor.close()

    @contextmanager
    def transaction(self) -> Iterator[_Cursor]:
        """A cursor whose statements commit together, or not at all. Inside another on this
        connection, it is that one's: its statements commit with the outer ones (one flush)."""
        if self._open is not None:
            yield self._open
            return
        if self.dialect == "postgresql":
            with self._raw.transaction(), self._raw.cursor() as cursor:
                self._open = cursor
                try:
                    yield cursor
                finally:
                    self._open = None
            return
        cursor = self._cursor()
        cursor.execute("BEGIN IMMEDIATE")  # the write lock now, not halfway through
        self._open = cursor
        try:
            yield cursor
            cursor.execute("COMMIT")
        except BaseException:
            if self._raw.in_transaction:  # a failed COMMIT too: never leave it open
                cursor.execute("ROLLBACK")
            raise
        finally:
            self._open = None
            cursor.close()

    @contextmanager
    def exclusive(self, key: int) -> Iterator[_Exclusive]:
        """A transaction no other writer runs beside: SQLite's write lock, or a PostgreSQL
        advisory lock on ``key`` (every machine's decision on one budget, one at a time)."""
        with self.transaction() as cursor:
            if self.dialect == "postgresql":
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
            yield _Exclusive(self, cursor)

    def write(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        with self.transaction() as cursor:
            cursor.execute(self._sql(sql), params)
            return int(cursor.rowcount)

    def write_all(self, statements: Iterable[tuple[str, tuple[Any, ...]]]) -> None:
        """Several statements that commit together, or not at all."""
        with self.transaction() as cursor:
            for sql, params in statements:
                cursor.execute(self._sql(sql), params)

    def write_many(self, sql: str, rows: Iterable[tuple[Any, ...]]) -> None:
        with self.transaction() as cursor:
            cursor.executemany(self._sql(sql), list(rows))

    def script(self, statements: Iterable[str]) -> None:
        with self.transaction() as cursor:
            for statement in statements:
                cursor.execute(statement)

    def close(self) -> None:
        self._raw.close()


class _Exclusive:
    """Statements inside :meth:`Database.exclusive`, in the ledger's one SQL."""

    def __init__(self, database: Database, cursor: _Cursor) -> None:
        self._database, self._cursor = database, cursor

    def one(self, sql: str, params: tuple[Any, ...] = ()) -> Row | None:
        self._cursor.execute(self._database._sql(sql), params)
        row = self._cursor.fetchone()
        return None if row is None else tuple(row)

    def write(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        self._cursor.execute(self._database._sql(sql), params)
        return int(self._cursor.rowcount)
