"""The ingested portfolio as the daemon sees it: its projects, their reference classes, and the
identity of a run (DESIGN §3, "Run identity").

Decides: what a run's identity is — the bundle's content hash, and the version of the portfolio
inputs that shaped its candidates offline (the reference-price and learned candidates the local
rules give it now: their ids, savings and grades). A bundle nothing in the portfolio shapes keeps
its content hash as its identity. The identity is computed against one snapshot of the reference
fit (the project's lines measured against the portfolio), and the run is handed that snapshot,
so its reference prices are the ones it was identified by.

And which ingested projects are due: those whose identity now is not their latest published run's
— because the reference classes or the approved verdicts moved under them, including back to
candidates an earlier run of theirs already gave (then that run stands again, run for nothing).
Offline a rerun costs nothing; with a model its unchanged candidates reuse the checker's standing
conclusions, but the proposer is asked again (a proposal is a run's own).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from portfolio_optimiser.config import Config
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.models import Project
from portfolio_optimiser.context.reference import (
    ProjectReferences,
    ReferenceClasses,
    ReferenceIndex,
)
from portfolio_optimiser.learning import LearnedVerdict, VerdictStore
from portfolio_optimiser.pipeline.local import local_candidates
from portfolio_optimiser.pipeline.precedent import Precedents, precedents

from .ingested import IngestedProjects
from .job import run_id_for
from .ledger import Ledger
from .references import publish_reference_classes, read_reference_classes
from .runner import learning_store
from .workspace import Workspace

__all__ = ["Due", "Portfolio", "Teaching", "portfolio_version", "run_identity"]

MAX_GENERATIONS: Final = 8
"""How many times a version's run may be lost from the outbox and run anew."""


@dataclass(frozen=True)
class Teaching:
    """What the experts' verdicts give every project's version at one moment: the approvals to
    carry, and the precedents that gate them (taken once for a look at the whole portfolio)."""

    approved: list[LearnedVerdict]
    precedents: Precedents

    @classmethod
    def of(cls, verdicts: VerdictStore) -> Teaching:
        return cls(verdicts.approved(), precedents(verdicts.verdicts()))


def portfolio_version(
    project: Project,
    references: ProjectReferences,
    teaching: Teaching,
    portfolio: Mapping[str, Project],
) -> str:
    """The candidates the portfolio adds to the project's own list — each id with its saving and
    grade, which move under a standing id — as one digest; "" when it adds none."""
    added = sorted(
        f"{c.id}\x00{c.saving_literal}\x00{c.grade or ''}"
        for c in local_candidates(project, teaching.approved, references, portfolio)
        if not c.origin.startswith("measure-option:")
        and not (c.origin.startswith("verdict:") and teaching.precedents.of(c))  # as the run will
    )
    if not added:
        return ""
    return hashlib.sha256("\n".join(added).encode()).hexdigest()[:16]


def run_identity(content: str, version: str) -> str:
    """The ledger's key for a run: the content hash alone while nothing in the portfolio shapes
    the bundle, else a hash of both (so a moved portfolio is a new run, never a duplicate)."""
    if not version:
        return content
    return hashlib.sha256(f"{content}\x00{version}".encode()).hexdigest()


@dataclass(frozen=True)
class Due:
    """An ingested project whose latest run is not what the portfolio gives it now."""

    folder: Path
    identity: str
    references: ProjectReferences
    """The snapshot its identity was computed against: the run is handed the same."""
    restore: bool = False
    """An earlier run of this identity stands: it is the project's latest again, run for nothing."""


@dataclass
class Portfolio:
    workspace: Workspace
    config: Config
    log: Any
    ledger: Ledger
    """The connection the learning store reads the verdicts through, unless given another."""
    ingested: IngestedProjects = field(init=False)
    _published: ReferenceIndex | None = None
    _published_here: bool = False
    _read_from: tuple[tuple[str, int, int], ...] | None = None
    """The pages (name, mtime, size) the classes were last read back from."""

    def __post_init__(self) -> None:
        self.ingested = IngestedProjects(self.workspace, self.ledger, self.log)
        self._classes = ReferenceClasses(self.config.reference.rule())
        self._moved: set[tuple[str, str]] = set()
        """Classes moved since the pages were last published whole (a publish cut off by an
        error leaves them to the next)."""
        self._pages: str | None = None
        """What this process last published to the pages (``ReferenceClasses.digest``)."""

    @classmethod
    def of(cls, workspace: Workspace, config: Config, ledger: Ledger, log: Any) -> Portfolio:
        """A process's one portfolio, whose learning store reads the verdicts through ``ledger``."""
        return cls(workspace, config, log, ledger)

    def verdicts(self, ledger: Ledger | None = None) -> VerdictStore:
        """The learning store as a run would see it now (the wiki and the ledger's verdicts),
        read through ``ledger`` (another thread's connection) or the portfolio's own."""
        return learning_store(self.workspace, ledger or self.ledger, self.log)

    def projects(self) -> dict[str, tuple[Path, str, Project]]:
        """Every ingested project that loads: folder name → (folder, content hash, IR)."""
        return {
            name: (folder, content, project)
            for name, (folder, content, _prices, project) in self.ingested.look(ir=True).items()
            if project is not None
        }

    def by_id(self) -> dict[str, Project]:
        return {project.id: project for _f, _c, project in self.projects().values()}

    def rebuild(self) -> ReferenceIndex:
        """Publish the reference classes of every ingested project, and keep the portfolio's
        compact index (the processor's job alone)."""
        looked = self.ingested.look(ir=False)
        self.ingested.keep()
        self._moved |= self._classes.update(
            {name: prices for name, (_folder, _content, prices, _ir) in looked.items()}
        )
        self._published = publish_reference_classes(
            self.workspace.references, self._classes, self._moved, self._pages
        )
        self._moved, self._pages = set(), self._classes.digest()
        self._published_here = True
        return self._published

    def references(self) -> ReferenceIndex:
        """The classes as last published: kept by the one writer that published them; read
        back from their pages by any other process (a job's host, a worker) whenever the pages
        changed since it last read them."""
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

    def identity(self, bundle: Path, content: str) -> tuple[str, ProjectReferences]:
        """The run identity of a bundle about to run, and the snapshot it was computed against
        (raises ``BundleError`` for a bad one)."""
        project = load_ir_projections(bundle)
        snapshot = self.references().assess(project)
        version = portfolio_version(project, snapshot, Teaching.of(self.verdicts()), self.by_id())
        return run_identity(content, version), snapshot

    def due(self, ledger: Ledger) -> list[Due]:
        """Ingested projects whose identity now is not their latest run's, by folder name."""
        references, teaching = self.references(), Teaching.of(self.verdicts())
        ingested = self.projects()
        by_id = {project.id: project for _f, _c, project in ingested.values()}
        latest = {
            project_id: run_id for project_id, run_id, _folder in ledger.records.project_runs()
        }
        due = []
        for folder, content, project in ingested.values():
            snapshot = references.assess(project)
            version = portfolio_version(project, snapshot, teaching, by_id)
            standing = self._standing(ledger, project.id, run_identity(content, version), latest)
            if standing is not None:
                identity, restore = standing
                due.append(Due(folder, identity, snapshot, restore))
        return due

    def _standing(
        self, ledger: Ledger, project_id: str, identity: str, latest: Mapping[str, str]
    ) -> tuple[str, bool] | None:
        """What is due for this identity: (identity, False) to run it, (identity, True) to let
        its earlier run stand again, None when its run is the latest (or failed). An earlier run
        whose folder is gone from the outbox cannot stand again: it is run anew, under an
        identity of its own."""
        for _generation in range(MAX_GENERATIONS):
            known = ledger.get(identity)
            if known is None or known.state not in {"done", "failed"}:
                return identity, False
            run_id = run_id_for(known.first_seen, identity)
            if known.state == "failed" or latest.get(project_id) in {None, run_id}:
                return None
            if (self.workspace.outbox / "runs" / project_id / run_id / "proposals.json").is_file():
                return identity, True
            identity = run_identity(identity, "run again")
        return None
