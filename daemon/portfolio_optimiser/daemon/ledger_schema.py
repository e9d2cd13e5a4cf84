"""The ledger's tables, in the one SQL both databases take, and how each is made ready: a SQLite
file checked and migrated at open, a shared PostgreSQL created once however many machines start
at once."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Final

from portfolio_optimiser.errors import UserError

from .db import Database

__all__ = [
    "SCHEMA_VERSION",
    "LedgerError",
    "prepare_postgresql",
    "prepare_sqlite",
]


class LedgerError(UserError):
    """The ledger database cannot be used; the message names the file and what to do."""


# Bumped when the tables change shape; a ledger from a newer daemon is refused, not guessed at.
# A table added beside the others (``intake``) is not a change of shape: an older daemon never
# reads it, and refusing its ledger for it would stop an upgrade machine by machine.
SCHEMA_VERSION: Final = 8

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS items (
    digest TEXT PRIMARY KEY,{seq_column}
    kind TEXT NOT NULL CHECK (kind IN ('bundle', 'verdict')),
    name TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('claimed', 'done', 'failed', 'waiting', 'retry')),
    attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TEXT,
    detail TEXT,
    output TEXT,
    error TEXT,
    first_seen TEXT NOT NULL,
    updated TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS verdicts (
    seq {seq_key},
    candidate_id TEXT NOT NULL,
    digest TEXT NOT NULL,
    name TEXT NOT NULL,
    decision TEXT NOT NULL,
    recorded_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS verdicts_by_candidate ON verdicts (candidate_id, seq);
CREATE TABLE IF NOT EXISTS signatures (
    digest TEXT PRIMARY KEY,
    principal TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    key_type TEXT NOT NULL,
    namespace TEXT NOT NULL,
    recorded_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS unfinished_runs (
    digest TEXT PRIMARY KEY,
    starts INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS claims (
    claimed TEXT PRIMARY KEY,
    identity TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS project_runs (
    project_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    folder TEXT NOT NULL,
    recorded_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS ingested (
    folder TEXT PRIMARY KEY,
    seen TEXT NOT NULL,
    content TEXT NOT NULL,
    project_id TEXT NOT NULL,
    category TEXT,
    prices TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS versions (
    folder TEXT PRIMARY KEY,
    inputs TEXT NOT NULL,
    own TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS anchors (
    folder TEXT PRIMARY KEY,
    content TEXT NOT NULL,
    keys TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS reference_versions (
    id TEXT PRIMARY KEY,
    projects INTEGER NOT NULL,
    fitted_at TEXT NOT NULL,
    published BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS reference_members (
    folder TEXT PRIMARY KEY,
    content TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS project_pages (
    project_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    candidates TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
    identity TEXT PRIMARY KEY,{seq_column}
    stage TEXT NOT NULL,
    state_json TEXT NOT NULL,
    updated TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS charges (
    workflow TEXT NOT NULL,
    step TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    recorded_at TEXT NOT NULL,
    PRIMARY KEY (workflow, step, attempt, seq)
);
CREATE TABLE IF NOT EXISTS fences (
    workflow TEXT PRIMARY KEY,
    token BIGINT NOT NULL,
    holder TEXT
);
CREATE TABLE IF NOT EXISTS spent (
    run_id TEXT PRIMARY KEY,{seq_column}
    project_id TEXT NOT NULL,
    tokens BIGINT NOT NULL,
    budget_stop TEXT,
    recorded_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS reservations (
    identity TEXT PRIMARY KEY,
    tokens INTEGER NOT NULL,
    reserved_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS intake (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    workspace TEXT NOT NULL,
    since TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS machines (
    executor TEXT PRIMARY KEY,
    role TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started TEXT NOT NULL,
    seen TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS candidates (
    candidate_id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    key_json TEXT NOT NULL,
    assessment TEXT,
    disagreement TEXT,
    recorded_at TEXT
);
"""
# What differs between the two: SQLite orders rows by its rowid, PostgreSQL by an identity.
_DIALECT: Final = {
    "sqlite": {"seq_key": "INTEGER PRIMARY KEY AUTOINCREMENT", "seq_column": ""},
    "postgresql": {
        "seq_key": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
        "seq_column": "\n    seq BIGINT GENERATED ALWAYS AS IDENTITY,",
    },
}
_PG_SCHEMA_LOCK: Final = 7_153_110_001
"""An advisory lock key: two machines starting at once create the tables once."""


def _statements(dialect: str) -> list[str]:
    script = _SCHEMA.format(**_DIALECT[dialect])
    return [part.strip() for part in script.split(";") if part.strip()]


def prepare_postgresql(database: Database) -> None:
    """Create the tables once, under an advisory lock; a newer schema is refused."""
    with database.transaction() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", (_PG_SCHEMA_LOCK,))
        cursor.execute("CREATE TABLE IF NOT EXISTS ledger_schema (version INTEGER NOT NULL)")
        cursor.execute("SELECT MAX(version) FROM ledger_schema")
        (version,) = cursor.fetchone()
        if version is not None and version > SCHEMA_VERSION:
            raise LedgerError(
                f"the ledger in {database.where} was written by a newer "
                f"portfolio-optimiser (schema {version}, this one knows "
                f"{SCHEMA_VERSION}); upgrade this machine first"
            )
        for statement in _statements("postgresql"):
            cursor.execute(statement)
        if version != SCHEMA_VERSION:
            cursor.execute("DELETE FROM ledger_schema")
            cursor.execute("INSERT INTO ledger_schema (version) VALUES (%s)", (SCHEMA_VERSION,))


def prepare_sqlite(database: Database, path: Path) -> None:
    # quick_check reads every page header: a damaged file fails here, at start-up, with a
    # sentence — not later, halfway through an item.
    (check,) = database.one("PRAGMA quick_check") or ("no answer",)
    if check != "ok":
        raise sqlite3.DatabaseError(f"quick_check: {check}")
    (version,) = database.one("PRAGMA user_version") or (0,)
    if version > SCHEMA_VERSION:
        raise LedgerError(
            f"the ledger {path} was written by a newer portfolio-optimiser (schema {version}, "
            f"this one knows {SCHEMA_VERSION}); upgrade, or point --workspace elsewhere"
        )
    database.one("PRAGMA journal_mode=WAL")
    database.one("PRAGMA synchronous=FULL")
    database.script([*_statements("sqlite"), f"PRAGMA user_version = {SCHEMA_VERSION}"])
