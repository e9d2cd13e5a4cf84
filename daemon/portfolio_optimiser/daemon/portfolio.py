"""The ingested portfolio as the daemon sees it: its projects, the reference fit they are measured
against (``reference_fit``), and which of them are due (DESIGN §3, "Run identity"; what an
identity is: ``versions``).

Decides which ingested projects are due: those whose identity now is not their latest published
run's — because the reference classes or the approved verdicts moved under them, including back
to candidates an earlier run of theirs already gave (then that run stands again, run for
nothing). A project's reference candidates are held to those its identity was last computed
from while their savings move within ``[reference] rerun_band`` (``within_band``; on by default
at 5 %, never less than half the materiality floor; 0 turns it off, and then no anchors are
kept), and a run of such an identity measures its savings afresh:
within the band of those its identity holds, not equal to them. Offline a rerun costs nothing;
with a model its unchanged candidates reuse the checker's standing conclusions, but the proposer
is asked again (a proposal is a run's own).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from portfolio_optimiser._collector import uncollected
from portfolio_optimiser.config import Config
from portfolio_optimiser.context.errors import BundleError
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.models import Project
from portfolio_optimiser.context.reference import (
    ProjectPrices,
    ProjectReferences,
    ReferenceIndex,
    reference_candidates,
)
from portfolio_optimiser.context.reference_sweep import ReferenceKey, ReferenceSweep, within_band
from portfolio_optimiser.learning import VerdictStore

from .ingested import IngestedProjects
from .job import Job, run_id_for
from .ledger import Item, Ledger
from .ledger_ingested import Anchor
from .reference_fit import Looked, ReferenceFit
from .runner import learning_store
from .teaching import Teaching
from .versions import (
    own_inputs,
    own_part,
    reference_keys,
    reference_part,
    run_identity,
    version_of,
)
from .workspace import Workspace

__all__ = ["Due", "Portfolio"]

MAX_GENERATIONS: Final = 8
"""How many times a version's run may be lost from the outbox and run anew."""


@dataclass(frozen=True)
class Due:
    """An ingested project whose latest run is not what the portfolio gives it now."""

    folder: Path
    identity: str
    prices: ProjectPrices
    index: ReferenceIndex
    """The classes its identity was computed against: its run is handed the same snapshot."""
    restore: bool = False
    """An earlier run of this identity stands: it is the project's latest again, run for nothing."""

    def snapshot(self) -> ProjectReferences:
        """Its lines measured as its identity measured them (taken when its rerun starts: a
        look that finds thousands due measures none of them)."""
        return self.index.assess_prices(self.prices)


@dataclass
class Portfolio:
    workspace: Workspace
    config: Config
    log: Any
    ledger: Ledger
    """The connection the learning store reads the verdicts through, unless given another."""
    ingested: IngestedProjects = field(init=False)
    fit: ReferenceFit = field(init=False)

    def __post_init__(self) -> None:
        self.ingested = IngestedProjects(self.workspace, self.ledger, self.log)
        self.fit = ReferenceFit(self.workspace, self.config, self.ledger, self.log, self.ingested)
        self._sweep = ReferenceSweep()
        self._own: dict[str, tuple[str, list[str], frozenset[str] | None]] | None = None
        """Each folder's own part of its version, the digest of what it was computed from, and
        the project's cost codes (None: kept by an earlier version) (``ledger.ingested.versions``)."""
        self._anchors: dict[str, Anchor] | None = None
        """Each folder's reference candidates as its identity holds them: taken again only when
        they moved beyond the band (``within_band``) or its content changed."""
        self._memo: dict[str, tuple[str, str, tuple[ReferenceKey, ...], str]] = {}
        """Each folder's run identity, with what it was computed from: its content, the teaching
        that reaches it (``Teaching.digest_for``) and its reference candidates."""
        self._sources: dict[str, tuple[str, Project]] = {}
        """The projects approvals were judged in, by folder: (content hash, IR)."""
        self._rebuilt_from: Looked | None = None
        """The look the classes were last rebuilt from, taken by the next look at the reruns (a
        settle's two steps look once at ten thousand folders, and see the same ones)."""

    @classmethod
    def of(cls, workspace: Workspace, config: Config, ledger: Ledger, log: Any) -> Portfolio:
        """A process's one portfolio, whose learning store reads the verdicts through ``ledger``."""
        return cls(workspace, config, log, ledger)

    def verdicts(self, ledger: Ledger | None = None) -> VerdictStore:
        """The learning store as a run would see it now (the wiki and the ledger's verdicts),
        read through ``ledger`` (another thread's connection) or the portfolio's own."""
        return learning_store(self.workspace, ledger or self.ledger, self.log)

    def sources(
        self, ids: Iterable[str], looked: Looked | None = None
    ) -> tuple[dict[str, Project], list[tuple[str, str]]]:
        """The ingested projects of these ids (of two folders, the last), read from their
        bundles, and the (id, content hash) of each: what an approval is carried from. From
        ``looked`` when the caller has just looked, else from a look of its own."""
        wanted = set(ids)
        folders = {
            prices.project_id: (name, content)
            for name, (_folder, content, prices, _ir) in (
                looked if looked is not None else self.ingested.look(ir=False)
            ).items()
            if prices.project_id in wanted
        }
        found: dict[str, Project] = {}
        for project_id, (name, content) in sorted(folders.items()):
            kept = self._sources.get(name)
            if kept is None or kept[0] != content:
                project = self.ingested.project(name)
                if project is None:
                    continue
                kept = self._sources[name] = (content, project)
            found[project_id] = kept[1]
        return found, sorted((pid, content) for pid, (_name, content) in folders.items())

    def teaching(self, ledger: Ledger | None = None, looked: Looked | None = None) -> Teaching:
        return Teaching.of(self.verdicts(ledger), self, looked)

    def start(self, now: float) -> ReferenceIndex:
        """The reference fit at a start (``ReferenceFit.start``)."""
        self._rebuilt_from = self.fit.start(now)
        return self.fit.references()

    def rebuild(self, now: float) -> ReferenceIndex:
        """The next version of the reference fit (``ReferenceFit.rebuild``)."""
        self._rebuilt_from = self.fit.rebuild(now)
        return self.fit.references()

    def arrived(self, job: Job, at: float) -> None:
        """A new bundle's job settled at ``at`` (the processor's clock): it was scored against
        the current version; the next one takes it in (``ReferenceFit.refit_in``). Under a
        band, what its identity was computed from becomes its anchor, as for every project a
        look has seen: the refit holds it to them while they move within the band."""
        assert job.summary is not None
        project_id = job.summary.project_id
        self.fit.arrived(project_id, at)
        self._rebuilt_from = None  # the next look at the reruns sees the arrival's folder
        if self.config.reference.rerun_band and job.references:
            self._anchor(project_id, job)

    def _anchor(self, name: str, job: Job) -> None:
        try:
            project = load_ir_projections(self.workspace.bundles_projects / name)
        except (BundleError, OSError):
            return  # gone or changed since: the next look takes it as it finds it
        snapshot = ProjectReferences.from_dict(json.loads(job.references))
        anchor = Anchor(job.content, reference_keys(reference_candidates(project, snapshot)))
        self._anchored(self.ledger)[name] = anchor
        self.ledger.ingested.keep_anchors([(name, anchor)])

    def identity(self, bundle: Path, content: str) -> tuple[str, ProjectReferences]:
        """The run identity of a bundle about to run, and the snapshot it was computed against
        (raises ``BundleError`` for a bad one)."""
        project = load_ir_projections(bundle)
        snapshot = self.fit.references().assess(project)
        keys = reference_keys(reference_candidates(project, snapshot))
        # Settled, a bundle is its project's folder: the same bundle dropped again is held as a
        # look holds that folder (a claim only reads the anchors: it may never settle).
        held = self._held(self.ledger, project.id, content, keys, None)
        version = version_of(own_part(project, self.teaching()), reference_part(project.id, held))
        return run_identity(content, version), snapshot

    def _held(
        self,
        ledger: Ledger,
        name: str,
        content: str,
        keys: tuple[ReferenceKey, ...],
        moved: list[tuple[str, Anchor]] | None,
    ) -> tuple[ReferenceKey, ...]:
        """The reference candidates a folder's identity is computed from: those its anchor holds
        while ``keys`` stay within the band of them and its content is the anchor's, else
        ``keys``, which become its anchor when ``moved`` takes them. With no band, ``keys``
        (and no anchors are kept: a band set later starts from none)."""
        band = self.config.reference.rerun_band
        anchors = self._anchored(ledger)
        if not band:
            return keys
        held = anchors.get(name)
        floor = self.config.reference.min_saving_nok
        if (
            held is not None
            and held.content == content
            and within_band(held.keys, keys, band, floor)
        ):
            return held.keys
        if moved is not None:
            anchor = anchors[name] = Anchor(content, keys)
            moved.append((name, anchor))
        return keys

    def _anchored(self, ledger: Ledger) -> dict[str, Anchor]:
        """The anchors, read from the ledger once; with no band none are kept."""
        if self._anchors is None:
            self._anchors = ledger.ingested.anchors()
            if self._anchors and not self.config.reference.rerun_band:
                ledger.ingested.clear_anchors()
                self._anchors = {}
        return self._anchors

    def due(self, ledger: Ledger) -> list[Due]:
        """Ingested projects whose identity now is not their latest run's, by folder name.

        A project's version has two parts. Its reference candidates are found for every project
        at once from the compact index (``ReferenceSweep``). Its own part (the kuttliste, the
        experts' approvals) is kept in the ledger with the digest of its content and of the
        teaching that can reach it (``Teaching.digest_for``), and computed again only when either
        moved. So only a project whose own part moved, or that the sweep cannot tell, is read from
        its bundle; and a due project's lines are measured when its rerun starts, not here."""
        with uncollected():
            return self._due(ledger)

    def _due(self, ledger: Ledger) -> list[Due]:
        looked, self._rebuilt_from = self._rebuilt_from or self.ingested.look(ir=False), None
        references = self.fit.references()
        teaching = self.teaching(ledger, looked)
        keys = self._sweep.keys(
            references.fit,
            {name: prices for name, (_f, _c, prices, _ir) in looked.items()},
            self.ingested.pause,
        )
        if self._own is None:
            self._own = ledger.ingested.versions()
        latest = ledger.records.latest_runs()
        moved: list[tuple[str, Anchor]] = []
        if self._anchors:
            for gone in self._anchors.keys() - looked.keys():
                del self._anchors[gone]  # its ledger row went with it
        computed: list[tuple[str, str, list[str], frozenset[str]]] = []
        identities = []
        for name, (folder, content, prices, _ir) in looked.items():
            self.ingested.pause()  # a verdict taken in meanwhile goes first
            own = self._own.get(name)
            codes = own[2] if own is not None else None
            taught = teaching.digest if codes is None else teaching.digest_for(codes)
            key = keys.get(name)
            memo = self._memo.get(name)
            if memo is not None and key is not None and memo[:3] == (content, taught, key):
                identities.append((folder, prices, memo[3]))
                continue
            inputs = own_inputs(content, taught)
            project = None
            if own is None or own[0] != inputs:
                project = self.ingested.project(name)
                if project is None:
                    continue
                codes = project.codes
                taught = teaching.digest_for(codes)
                inputs = own_inputs(content, taught)
                own = self._own[name] = (inputs, own_part(project, teaching), codes)
                computed.append((name, inputs, own[1], codes))
            if key is None:  # the sweep cannot tell: the project's own snapshot does
                project = project or self.ingested.project(name)
                if project is None:
                    continue
                key = reference_keys(reference_candidates(project, references.assess(project)))
            held = self._held(ledger, name, content, key, moved)
            identity = run_identity(
                content, version_of(own[1], reference_part(prices.project_id, held))
            )
            self._memo[name] = (content, taught, key, identity)
            identities.append((folder, prices, identity))
        ledger.ingested.keep_versions(computed)
        ledger.ingested.keep_anchors(moved)
        known = {
            i.digest: i for i in ledger.items(of=(identity for _f, _p, identity in identities))
        }
        due = []
        for folder, prices, identity in identities:
            standing = self._standing(ledger, prices.project_id, identity, latest, known)
            if standing is not None:
                due.append(Due(folder, standing[0], prices, references, standing[1]))
        return due

    def _standing(
        self,
        ledger: Ledger,
        project_id: str,
        identity: str,
        latest: Mapping[str, str],
        items: Mapping[str, Item],
    ) -> tuple[str, bool] | None:
        """What is due for this identity: (identity, False) to run it, (identity, True) to let
        its earlier run stand again, None when its run is the latest (or failed). ``items`` are
        the ledger's items of every identity the look asks about, read at once. An earlier run
        whose folder is gone from the outbox cannot stand again: it is run anew, under an
        identity of its own."""
        for generation in range(MAX_GENERATIONS):
            known = items.get(identity) if generation == 0 else ledger.get(identity)
            if known is None or known.state not in {"done", "failed"}:
                return identity, False
            run_id = run_id_for(known.first_seen, identity)
            if known.state == "failed" or latest.get(project_id) in {None, run_id}:
                return None
            if (self.workspace.outbox / "runs" / project_id / run_id / "proposals.json").is_file():
                return identity, True
            identity = run_identity(identity, "run again")
        return None
