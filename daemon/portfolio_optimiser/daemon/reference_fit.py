"""The reference fit's current version as the processor holds it (DESIGN §12; what a version is:
``context.reference_version``): the reference classes of the ingested projects, their compact
index, the version they are and its set, the projects that arrived since, and the class pages.

Decides which version is current: at a start the last one again, where its set is as it was;
else, and when arrivals call for it (``refit_in``), the next — the exact global fit of every
ingested project, published in the ledger. Any other process (a worker) reads the classes back
from their pages.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from portfolio_optimiser._collector import uncollected
from portfolio_optimiser.config import Config
from portfolio_optimiser.context.models import Project
from portfolio_optimiser.context.reference import ProjectPrices, ReferenceIndex
from portfolio_optimiser.context.reference_classes import ReferenceClasses
from portfolio_optimiser.context.reference_version import ReferenceVersion

from .fit_process import FitProcess
from .ingested import IngestedProjects
from .ledger import Ledger
from .references import ReferencePages, page_lines, read_reference_classes
from .stamps import iso
from .workspace import Workspace

__all__ = ["Looked", "ReferenceFit"]

Looked = Mapping[str, tuple[Path, str, ProjectPrices, Project | None]]
"""A look at the ingested projects, by folder (``IngestedProjects.look``)."""


@dataclass
class ReferenceFit:
    workspace: Workspace
    config: Config
    ledger: Ledger
    log: Any
    ingested: IngestedProjects
    version: ReferenceVersion | None = None
    """The version the classes are, as published (``start``, ``rebuild``)."""
    _published: ReferenceIndex | None = None
    _published_here: bool = False
    """Whether this process rebuilt the classes (it keeps them; any other reads the pages)."""
    _read_from: tuple[tuple[str, int, int], ...] | None = None
    """The pages (name, mtime, size) the classes were last read back from."""
    _moved: set[tuple[str, str]] = field(default_factory=set)
    """Classes moved since the pages were last written (kept when a write fails)."""
    pages_behind: bool = False
    """Whether the classes were rebuilt since their pages were last written."""
    _pages_failed: bool = False
    """The last write failed: tried at the next rebuild or stop, not each step (disk full)."""
    _arrivals: int = 0
    """Projects settled since ``version`` was fitted: scored against it, not yet in it."""
    _last_arrival: float = float("-inf")
    _arrived: set[str] = field(default_factory=set)
    """The ids of the projects settled since the last look."""
    _members: dict[str, str] = field(default_factory=dict)
    """The current version's set: each folder it was fitted from, with its content then
    (``ledger.ingested.reference_members``)."""

    def __post_init__(self) -> None:
        self._classes = ReferenceClasses(self.config.reference.rule(), page_lines)
        self._pages = ReferencePages(self.workspace.references)
        self._process = FitProcess(self.log)

    def arrived(self, project_id: str, at: float) -> None:
        """A project settled at ``at`` (the processor's clock), scored against the current
        version: the next one takes it in."""
        self._arrivals += 1
        self._last_arrival = at
        self._arrived.add(project_id)

    def start(self, now: float) -> Looked:
        """The reference fit at a start: the current version again, fitted from its own set,
        where every folder of that set is still as it was — the projects that arrived since
        stay arrivals, scored against it until the refit they call for — so a restart at any
        moment reaches the same figures at the same version. Else (a member revised or gone,
        another rule, a first start) the next version (``rebuild``). Returns the look taken."""
        current = self.ledger.ingested.reference_version()
        self._members = self.ledger.ingested.reference_members()
        if current is None or not self._members:
            return self.rebuild(now)
        with uncollected():
            looked = self.ingested.look(ir=False)
            if any(
                (seen := looked.get(folder)) is None or seen[1] != content
                for folder, content in self._members.items()
            ):
                return self.rebuild(now)
            self.ingested.keep()
            self._moved |= self._classes.update(
                {folder: looked[folder][2] for folder in self._members}
            )
            index = self._classes.index()
        if index.version != current.id:  # fitted under another rule: not this version
            return self.rebuild(now)
        self._published, self.version = self._process.fitted(index), current
        self._arrivals = len(looked.keys() - self._members.keys())
        self._last_arrival = now
        self._fitted()
        return looked

    def rebuild(self, now: float) -> Looked:
        """The next version of the reference fit: the classes of every ingested project, kept
        up to date, and the portfolio's compact index (the processor's job alone), published in
        the ledger as the current version with its set (a version fitted before keeps its first
        fitting). When arrivals call for it (``refit_in``), and at a start that cannot take the
        current one again (``start``). Their pages wait for ``publish_pages`` (once the
        portfolio is quiet): a page holds every member of its class, and at ten thousand
        projects each project moved about 100 MB of them. Returns the look taken."""
        with uncollected():
            looked = self.ingested.look(ir=False)
            self.ingested.keep()
            self._moved |= self._classes.update(
                {name: prices for name, (_folder, _content, prices, _ir) in looked.items()}
            )
            self._published = self._process.fitted(self._classes.index())
        members = {name: content for name, (_folder, content, _p, _ir) in looked.items()}
        if (
            self.version is None
            or self.version.id != self._published.version
            or (members != self._members)
        ):
            self.version = self.ledger.ingested.publish_reference_version(
                self._published.version,
                members,
                iso(now),
                joined=[(f, c) for f, c in members.items() if self._members.get(f) != c],
                left=[f for f in self._members if f not in members],
            )
        self._members = members
        self._arrivals, self._last_arrival = 0, float("-inf")
        self._fitted()
        return looked

    def _fitted(self) -> None:
        self._arrived = set()
        self._published_here = True
        self.pages_behind, self._pages_failed = True, False

    def refit_in(self, now: float, pending: int = 0, *, at_once: bool = False) -> float | None:
        """Seconds until the next version is due (0.0: now); None while nothing arrived since
        the current one, or while ``pending`` bundles wait in the inbox (they arrive next).
        ``at_once``: now, if anything arrived (``once``: nothing more is coming)."""
        if pending:
            return None
        wait = self.config.reference.refit().due_in(self._arrivals, self._last_arrival, now)
        return 0.0 if at_once and wait is not None else wait

    def refit_due_at(self, now: float) -> float | None:
        """When the next version is due (the processor's clock; ``now`` when it is due already),
        None while nothing arrived since the current one."""
        wait = self.refit_in(now)
        return None if wait is None else now + wait

    def project_ids(self) -> list[str]:
        """The project ids of the last look and those settled since (any thread may ask)."""
        return sorted(set(self.ingested.ids()) | self._arrived)

    @property
    def arrivals(self) -> int:
        """Projects settled since the current version, scored against it."""
        return self._arrivals

    @property
    def pages_due(self) -> bool:
        """Whether the pages are behind the classes, and not since a failed write."""
        return self.pages_behind and not self._pages_failed

    def close(self) -> None:
        """The fit's own process stopped (``FitProcess``)."""
        self._process.close()

    def publish_pages(self) -> None:
        """The class pages brought to the classes last rebuilt, once the portfolio is quiet
        (``Processor.step``) and at a stop. Nothing is written where they hold them already; a
        failure is logged, and the classes that moved are kept for the next try (at the next
        rebuild or stop)."""
        try:
            with uncollected():
                self._pages.publish(self._classes, self._moved, self.ingested.pause)
        except OSError as exc:
            self.log.warning("reference class pages not written", problem=str(exc))
            self._pages_failed = True
            return
        self._moved = set()
        self.pages_behind = False

    def references(self) -> ReferenceIndex:
        """The classes as last rebuilt: kept by the one process that rebuilds them; read back
        from their pages by any other process (a worker) whenever the pages changed since it
        last read them."""
        if self._published_here and self._published is not None:
            return self._published
        root = self.workspace.references
        pages = []
        for page in sorted(root.glob("*.md")) if root.is_dir() else []:
            with contextlib.suppress(OSError):  # gone between the listing and its look
                stat = page.stat()
                pages.append((page.name, stat.st_mtime_ns, stat.st_size))
        if self._published is None or tuple(pages) != self._read_from:
            self._published = read_reference_classes(
                root, self.config.reference.rule(), log=self.log
            )
            self._read_from = tuple(pages)
        return self._published
