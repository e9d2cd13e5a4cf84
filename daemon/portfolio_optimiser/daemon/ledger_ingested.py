"""The portfolio's compact index in the ledger (``ledger.ingested``): for each ingested project's
folder, the folder's identity when it was read (inode and mtime: a project settles by a rename
into place, which gives its folder a new one), its content hash, and what the reference classes
take of it (with its priced posts and size, which its reference candidates are found from). A
start reads this, not every bundle; a folder whose identity moved is read again, as is one an
earlier version indexed (its classes alone).
And each folder's own part of its portfolio version with the digest of what it was computed
from, so a look at the reruns reads a bundle only when that moved; and, under a rerun band, the
reference candidates its identity holds (its anchor). And the reference fit's versions: each
version published, and the current one's set (its folders, with their content then), so a
restart takes it up again (``reference_fit``). Written by the processor alone
(it rebuilds the classes and looks at the reruns), on the ledger's connection."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from sys import intern
from typing import Any, NamedTuple

from portfolio_optimiser.context.reference import Posts, ProjectPrices
from portfolio_optimiser.context.reference_sweep import ReferenceKey
from portfolio_optimiser.context.reference_version import ReferenceVersion

from .db import Database

__all__ = ["Anchor", "Ingested", "LedgerIngested"]


class Ingested(NamedTuple):
    """One ingested project as the index keeps it."""

    seen: str
    """The folder's inode and mtime when it was read (``ino:mtime_ns``)."""
    content: str
    prices: ProjectPrices


class Anchor(NamedTuple):
    """The reference candidates a folder's identity was last computed from, and its content then."""

    content: str
    keys: tuple[ReferenceKey, ...]


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
                found[str(folder)] = Ingested(
                    str(seen), str(content), _prices(str(project_id), category, prices)
                )
            except (ValueError, TypeError, KeyError):
                continue  # written by an earlier version (classes alone), or damaged
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
                    json.dumps(
                        {
                            "classes": [list(c) for c in row.prices.classes],
                            "posts": [list(p) for p in row.prices.posts],
                            "size": row.prices.size,
                        }
                    ),
                ),
            )
            for folder, row in changed
        ]
        for folder in gone:
            statements.append(("DELETE FROM ingested WHERE folder = ?", (folder,)))
            statements.append(("DELETE FROM versions WHERE folder = ?", (folder,)))
            statements.append(("DELETE FROM anchors WHERE folder = ?", (folder,)))
        if statements:
            self._db.write_all(statements)

    def versions(self) -> dict[str, tuple[str, list[str], frozenset[str] | None]]:
        """Each folder's own part of its portfolio version (what its kuttliste and the experts'
        approvals add, ``versions.own_part``), with the digest of what it was computed from (its
        content and the teaching that can reach it) and the project's cost codes (None in a row
        an earlier version kept: its own part alone). A row that does not read is left out:
        computed again."""
        found: dict[str, tuple[str, list[str], frozenset[str] | None]] = {}
        for folder, inputs, own in self._db.all("SELECT folder, inputs, own FROM versions"):
            try:
                said = json.loads(own)
            except ValueError:
                continue
            codes: frozenset[str] | None = None
            if isinstance(said, dict):
                listed = said.get("codes")
                if not isinstance(listed, list) or not all(isinstance(c, str) for c in listed):
                    continue
                codes, said = frozenset(listed), said.get("own")
            if isinstance(said, list) and all(isinstance(s, str) for s in said):
                found[str(folder)] = (str(inputs), said, codes)
        return found

    def keep_versions(self, computed: Iterable[tuple[str, str, list[str], frozenset[str]]]) -> None:
        """Own parts computed since: (folder, inputs, own part, cost codes) each, in one
        transaction."""
        statements: list[tuple[str, tuple[object, ...]]] = [
            (
                "INSERT INTO versions (folder, inputs, own) VALUES (?, ?, ?)"
                " ON CONFLICT (folder) DO UPDATE SET"
                " inputs = excluded.inputs, own = excluded.own",
                (folder, inputs, json.dumps({"own": own, "codes": sorted(codes)})),
            )
            for folder, inputs, own, codes in computed
        ]
        if statements:
            self._db.write_all(statements)

    def anchors(self) -> dict[str, Anchor]:
        """Each folder's reference candidates as its identity was last computed from them, with
        its content then (``Portfolio``: what a look holds a project's identity to while its
        savings move within the band). A row that does not read is left out: taken afresh."""
        found: dict[str, Anchor] = {}
        for folder, content, keys in self._db.all("SELECT folder, content, keys FROM anchors"):
            try:
                held = tuple(
                    (str(code), str(unit), str(grade), int(saving))
                    for code, unit, grade, saving in json.loads(keys)
                )
            except (ValueError, TypeError):
                continue
            found[str(folder)] = Anchor(str(content), held)
        return found

    def keep_anchors(self, moved: Iterable[tuple[str, Anchor]]) -> None:
        """Anchors taken since: (folder, anchor) each, in one transaction."""
        statements: list[tuple[str, tuple[object, ...]]] = [
            (
                "INSERT INTO anchors (folder, content, keys) VALUES (?, ?, ?)"
                " ON CONFLICT (folder) DO UPDATE SET"
                " content = excluded.content, keys = excluded.keys",
                (folder, anchor.content, json.dumps([list(k) for k in anchor.keys])),
            )
            for folder, anchor in moved
        ]
        if statements:
            self._db.write_all(statements)

    def clear_anchors(self) -> None:
        """Every anchor gone (a band turned off: one set later starts from none)."""
        self._db.write_all([("DELETE FROM anchors", ())])

    def reference_version(self) -> ReferenceVersion | None:
        """The version of the reference fit published last (None before the first)."""
        row = self._db.one(
            "SELECT id, projects, fitted_at FROM reference_versions ORDER BY published DESC LIMIT 1"
        )
        return None if row is None else ReferenceVersion(str(row[0]), int(row[1]), str(row[2]))

    def reference_members(self) -> dict[str, str]:
        """The current version's set: each folder it was fitted from, with its content then."""
        return {
            str(f): str(c) for f, c in self._db.all("SELECT folder, content FROM reference_members")
        }

    def publish_reference_version(
        self,
        version: str,
        members: Mapping[str, str],
        now: str,
        *,
        joined: Iterable[tuple[str, str]],
        left: Iterable[str],
    ) -> ReferenceVersion:
        """``version``, fitted from ``members`` (folder: content), is the current one from
        ``now``; fitted then unless it was fitted before (a restart, or the set back to what it
        was): its first fitting is kept, as is its age. Its set is kept as what ``joined``
        (folder, content) and ``left`` changed of the last one's, in the same transaction."""
        members_moved: list[tuple[str, tuple[object, ...]]] = [
            (
                "INSERT INTO reference_members (folder, content) VALUES (?, ?)"
                " ON CONFLICT (folder) DO UPDATE SET content = excluded.content",
                (folder, content),
            )
            for folder, content in joined
        ]
        members_moved += [
            ("DELETE FROM reference_members WHERE folder = ?", (folder,)) for folder in left
        ]
        self._db.write_all(
            [
                *members_moved,
                (
                    # Each publication numbered after the last: the current is the highest.
                    "INSERT INTO reference_versions (id, projects, fitted_at, published)"
                    " VALUES (?, ?, ?, (SELECT COALESCE(MAX(published), 0) + 1"
                    " FROM reference_versions)) ON CONFLICT (id) DO UPDATE SET"
                    " published = excluded.published",
                    (version, len(members), now),
                ),
            ]
        )
        published = self.reference_version()
        assert published is not None and published.id == version, "the row just written"
        return published


def _prices(project_id: str, category: str | None, kept: str) -> ProjectPrices:
    """A project's prices as ``keep`` wrote them (rows of classes and of posts), taken a column
    at a time: a start reads ten thousand projects' 1.3 million words and figures. Raises
    ``ValueError``, ``TypeError`` or ``KeyError`` for a row that does not read (a word that is
    not a string, a figure that is not a number, a row of another width)."""
    read = json.loads(kept)
    a, u, p, s = _columns(read["classes"], 4)
    return ProjectPrices(
        project_id,
        category,
        tuple(zip(map(intern, a), map(intern, u), map(float, p), map(intern, s), strict=True)),
        Posts.columns(*_columns(read["posts"], 5)),
        float(read["size"]),
    )


def _columns(rows: list[list[object]], width: int) -> list[tuple[Any, ...]]:
    """Rows as columns (unpacked by the caller: a row of another width does not read)."""
    return list(zip(*rows, strict=True)) if rows else [()] * width
