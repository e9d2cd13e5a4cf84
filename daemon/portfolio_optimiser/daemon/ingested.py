"""The ingested projects as a process knows them: ``bundles/projects/``, looked at cheaply.

Decides: when a project's folder is read. A folder is known by its identity (inode and mtime: a
project settles by a rename into place, which gives its folder a new one); while that holds, its
content hash and what the reference classes take of it are trusted — from this process's own
look, or from the ledger's compact index (``ledger.ingested``), so a start reads one table and
a stat per folder, not every bundle. A project's full IR is read only when it is asked for (a
rerun's look, a run's learned candidates). The processor keeps the index: it writes the folders
it read again and drops those gone (``keep``); any other process only reads it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

from portfolio_optimiser.context.errors import BundleError
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.models import Project
from portfolio_optimiser.context.reference import ProjectPrices

from .claim import ClaimError, content_digest
from .ledger import Ledger
from .ledger_ingested import Ingested
from .workspace import Workspace

__all__ = ["IngestedProjects"]


@dataclass
class _Known:
    folder: Path
    row: Ingested
    project: Project | None = None
    """The full IR, read when first asked for."""


@dataclass
class IngestedProjects:
    workspace: Workspace
    ledger: Ledger
    log: Any
    _known: dict[str, _Known] = field(default_factory=dict)
    _indexed: dict[str, Ingested] | None = None
    """The ledger's index as this process last read or kept it."""
    _fresh: dict[str, Ingested] = field(default_factory=dict)
    """Folders read from disk since the index was last kept."""
    pause: Callable[[], None] = field(default=lambda: None, repr=False)
    """Called at each folder of a look, each project of the look at the reruns and each class
    page written: a verdict taken in meanwhile goes first (set by ``Processor``)."""

    def look(self, *, ir: bool) -> dict[str, tuple[Path, str, ProjectPrices, Project | None]]:
        """Every ingested project that loads, by folder name: (folder, content hash, its
        prices, and its IR when ``ir``)."""
        found: dict[str, tuple[Path, str, ProjectPrices, Project | None]] = {}
        known: dict[str, _Known] = {}
        root = self.workspace.bundles_projects
        for name, seen in self._folders():
            self.pause()
            # A folder known as it was is taken as it is: ten thousand of them at each look.
            entry = self._known.get(name)
            folder = entry.folder if entry is not None else root / name
            if entry is None or entry.row.seen != seen or (ir and entry.project is None):
                try:
                    entry = self._entry(folder, seen)
                    if ir and entry.project is None:
                        entry.project = load_ir_projections(folder)
                except (BundleError, ClaimError, OSError) as exc:
                    self.log.warning(
                        "ingested project left out of the portfolio", project=name, problem=str(exc)
                    )
                    continue
            known[name] = entry
            row = entry.row
            found[name] = (folder, row.content, row.prices, entry.project)
        self._known = known
        return found

    def project(self, name: str) -> Project | None:
        """The full IR of a folder the last look found: kept when that look read it, else read
        now and not kept (a look at ten thousand projects must not hold them all)."""
        entry = self._known.get(name)
        if entry is None:
            return None
        if entry.project is not None:
            return entry.project
        try:
            return load_ir_projections(entry.folder)
        except (BundleError, OSError) as exc:
            self.log.warning(
                "ingested project left out of the portfolio", project=name, problem=str(exc)
            )
            return None

    def ids(self) -> list[str]:
        """The project ids as last looked at (no look of its own: any thread may ask)."""
        return sorted({entry.row.prices.project_id for entry in self._known.values()})

    def keep(self) -> None:
        """The ledger's index brought to the last look (the processor's job alone)."""
        indexed = self._index()
        gone = sorted(set(indexed) - set(self._known))
        fresh = sorted((name, row) for name, row in self._fresh.items() if name in self._known)
        self.ledger.ingested.keep(fresh, gone)
        for name in gone:
            del indexed[name]
        indexed.update(fresh)
        self._fresh.clear()

    def _folders(self) -> list[tuple[str, str]]:
        """Each folder's name and identity (inode and mtime), by name."""
        try:
            with os.scandir(self.workspace.bundles_projects) as listing:
                # .superseded/ and other bookkeeping start with a dot.
                entries = [(entry.name, entry) for entry in listing if entry.name[0] != "."]
        except FileNotFoundError:
            return []
        entries.sort(key=itemgetter(0))
        folders = []
        for name, entry in entries:
            try:  # one stat a folder, not two: ten thousand of them
                if not entry.is_dir():
                    continue
                stat = entry.stat()
            except OSError:
                continue  # gone between the listing and its look
            folders.append((name, f"{stat.st_ino}:{stat.st_mtime_ns}"))
        return folders

    def _entry(self, folder: Path, seen: str) -> _Known:
        entry = self._known.get(folder.name)
        if entry is not None and entry.row.seen == seen:
            return entry
        row = self._index().get(folder.name)
        if row is not None and row.seen == seen:
            return _Known(folder, row)
        project = load_ir_projections(folder)
        row = Ingested(seen, content_digest(folder), ProjectPrices.of(project))
        self._fresh[folder.name] = row
        return _Known(folder, row, project)

    def _index(self) -> dict[str, Ingested]:
        if self._indexed is None:
            self._indexed = self.ledger.ingested.all()
        return self._indexed
