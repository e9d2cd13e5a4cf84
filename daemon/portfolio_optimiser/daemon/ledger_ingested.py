"""The portfolio's compact index in the ledger (``ledger.ingested``): for each ingested project's
folder, the folder's identity when it was read (inode and mtime: a project settles by a rename
into place, which gives its folder a new one), its content hash, and what the reference classes
take of it. A start reads this, not every bundle; a folder whose identity moved is read again.
Written by the processor alone (it rebuilds the classes), on the ledger's connection."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import NamedTuple

from portfolio_optimiser.context.reference import ProjectPrices

from .db import Database

__all__ = ["Ingested", "LedgerIngested"]


class Ingested(NamedTuple):
    """One ingested project as the index keeps it."""

    seen: str
    """The folder's inode and mtime when it was read (``ino:mtime_ns``)."""
    content: str
    prices: ProjectPrices


class LedgerIngested:
    def __init__(self, db: Database) -> None:
        self._db = db

    def all(self) -> dict[str, Ingested]:
        """Every project the index keeps, by folder name (a row that does not read is left
        out: its folder is read again)."""
        found: dict[str, Ingested] = {}
        rows = self._db.all(
            "SELECT folder, seen, content, project_id, category, prices FROM ingested"
        )
        for folder, seen, content, project_id, category, prices in rows:
            try:
                classes = tuple(
                    (str(a), str(u), float(p), str(s)) for a, u, p, s in json.loads(prices)
                )
            except (ValueError, TypeError):
                continue
            found[str(folder)] = Ingested(
                str(seen), str(content), ProjectPrices(str(project_id), category, classes)
            )
        return found

    def keep(self, changed: Iterable[tuple[str, Ingested]], gone: Iterable[str]) -> None:
        """The folders read again since the index was last kept, and those gone, in one
        transaction."""
        statements: list[tuple[str, tuple[object, ...]]] = [
            (
                "INSERT INTO ingested (folder, seen, content, project_id, category, prices)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (folder) DO UPDATE SET"
                " seen = excluded.seen, content = excluded.content,"
                " project_id = excluded.project_id, category = excluded.category,"
                " prices = excluded.prices",
                (
                    folder,
                    row.seen,
                    row.content,
                    row.prices.project_id,
                    row.prices.category,
                    json.dumps([list(c) for c in row.prices.classes]),
                ),
            )
            for folder, row in changed
        ]
        statements += [("DELETE FROM ingested WHERE folder = ?", (folder,)) for folder in gone]
        if statements:
            self._db.write_all(statements)
