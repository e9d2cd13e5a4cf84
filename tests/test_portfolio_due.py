"""The look at the reruns (``Portfolio.due``) at scale: a project's reference candidates are
found for every project at once from the compact index, the own part of its version is read
from its bundle only when its content or the experts' teaching moved, and the projects the look
finds due are the ones a look computing every version afresh finds."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import structlog

from portfolio_optimiser.config import Config, load_config
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.reference import reference_candidates
from portfolio_optimiser.daemon.ingested import IngestedProjects
from portfolio_optimiser.daemon.ledger import Ledger
from portfolio_optimiser.daemon.once import run_once
from portfolio_optimiser.daemon.portfolio import Due, Portfolio
from portfolio_optimiser.daemon.processor import Processor
from portfolio_optimiser.daemon.versions import (
    own_part,
    reference_keys,
    reference_part,
    version_of,
)
from portfolio_optimiser.daemon.workspace import Workspace
from portfolio_optimiser.pipeline.local import local_candidates

from .synthetic import SyntheticProject, generate
from .synthetic_ns3451 import generate_ns3451
from .test_portfolio_index import Reads

NOW = 1_796_601_600.0
"""When the tests' reference fits are published (2026-12-07, UTC)."""

ENV = {"PORTFOLIO_OPTIMISER_REASONING_MODE": "ci"}
LOG = structlog.get_logger("test")


def _due(ws: Workspace, ledger: Ledger) -> tuple[Portfolio, list[tuple[str, str, bool]]]:
    """A new process's look: its classes rebuilt, then the reruns decided."""
    portfolio = Portfolio.of(ws, load_config(), ledger, LOG)
    portfolio.rebuild(NOW)
    return portfolio, _said(portfolio.due(ledger))


def _said(due: list[Due]) -> list[tuple[str, str, bool]]:
    return sorted((d.folder.name, d.identity, d.restore) for d in due)


def settled(
    root: Path, projects: Sequence[SyntheticProject], config: Config | None = None
) -> Workspace:
    """A workspace whose inbox took ``projects``, each run and settled by the daemon."""
    ws = Workspace.at(root, environ={})
    ws.ensure()
    for project in projects:
        project.write(ws.inbox_projects / project.project_id)
    run_once(ws, config or load_config(), log=LOG, environ=ENV)
    return ws


def _forget_versions(ws: Workspace) -> None:
    with sqlite3.connect(ws.ledger_file) as db:
        db.execute("DELETE FROM versions")


@pytest.mark.loadbearing
def test_the_look_reads_only_new_projects_and_finds_what_afresh_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    generated = generate_ns3451(11, 14).projects
    ws = settled(tmp_path / "ws", generated[:12])
    reads = Reads(monkeypatch)
    with Ledger.open(ws.ledger_file) as ledger:
        portfolio, due = _due(ws, ledger)
        assert due == [] and reads.folders == [], "a settled portfolio read its bundles again"
        for project in generated[12:]:  # two more settle, as a planner's bundles do
            project.write(ws.bundles_projects / project.project_id)
        reads.folders.clear()
        _new_process, due = _due(ws, ledger)
        portfolio.rebuild(NOW)  # and the daemon's own portfolio, which remembers its last look
        assert _said(portfolio.due(ledger)) == due
        read = set(reads.folders)
        _forget_versions(ws)
        _afresh, afresh = _due(ws, ledger)
    assert due == afresh
    new = {p.project_id for p in generated[12:]}
    assert read == new, "a bundle was read whose own part of its version was known"
    assert any(name not in new for name, *_ in due), "the portfolio moved under no project"


def test_a_version_from_its_two_parts_is_the_version_of_every_candidate_at_once(
    tmp_path: Path,
) -> None:
    """The version kept as its own part and its reference part is the digest of every candidate
    the portfolio adds, as the runs recorded so far were identified by: no identity moves."""
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    for project in generate_ns3451(5, 16, parts=3).projects:
        project.write(ws.bundles_projects / project.project_id)
    with Ledger.open(ws.ledger_file) as ledger:
        portfolio = Portfolio.of(ws, load_config(), ledger, LOG)
        index, teaching = portfolio.rebuild(NOW), portfolio.teaching()
        versions = 0
        for folder in sorted(ws.bundles_projects.iterdir()):
            project = load_ir_projections(folder)
            snapshot = index.assess(project)
            added = sorted(
                f"{c.id}\x00{c.saving_literal}\x00{c.grade or ''}"
                for c in local_candidates(project, teaching.approved, snapshot, teaching.sources)
                if not c.origin.startswith("measure-option:")
            )
            expected = hashlib.sha256("\n".join(added).encode()).hexdigest()[:16] if added else ""
            keys = reference_keys(reference_candidates(project, snapshot))
            version = version_of(own_part(project, teaching), reference_part(project.id, keys))
            assert version == expected, folder.name
            versions += bool(expected)
        assert versions > 0


@pytest.mark.loadbearing
def test_an_approval_that_carries_moves_the_versions_it_reaches_in_the_same_look(
    tmp_path: Path,
) -> None:
    """The daemon's one portfolio, across a verdict: an approved kuttliste measure carried to
    the projects that have its code changes their own part of their version, and the look
    finds them due as a look computing every version afresh does."""
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    for project in generate(7, n_projects=10).projects:
        project.write(ws.inbox_projects / project.project_id)
    run_once(ws, load_config(), log=LOG, environ=ENV)
    with Ledger.open(ws.ledger_file) as ledger:
        processor = Processor(ws, load_config(), ledger, time.time, LOG, environ=ENV)
        portfolio = processor.portfolio
        assert portfolio.due(ledger) == []
        template = next(
            path
            for path in sorted(ws.outbox.glob("runs/*/*/verdicts/*.json"))
            if any(
                e.startswith("kuttliste/")
                for e in json.loads(path.read_text("utf-8"))["candidate"]["evidence"]
            )
        )
        verdict = json.loads(template.read_text("utf-8"))
        verdict |= {"decision": "approved", "rationale": "Carries.", "reviewer": "KE"}
        verdict.pop("$schema", None)
        staged = tmp_path / template.name
        staged.write_text(json.dumps(verdict), "utf-8")
        processor.observe(staged.rename(ws.inbox_verdicts / template.name))
        due = _said(portfolio.due(ledger))
        processor.close()
        _forget_versions(ws)
        _afresh, afresh = _due(ws, ledger)
    assert due == afresh
    assert len(due) > 0, "the approval reached no other project"


@pytest.mark.loadbearing
def test_an_approval_reads_again_only_the_projects_with_its_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An approval is carried only to projects with all of its codes, so only their own parts
    are computed again (their bundles read); the others keep theirs, and the look finds what a
    look computing every version afresh finds. (Every project read again took 210 s at 10 000.)"""
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    folders = [
        project.write(ws.inbox_projects / project.project_id)
        for project in generate(7, n_projects=10).projects
    ]
    for folder in folders[1::2]:  # every kuttliste is on codes all have: half lose one
        _without_code(folder, "09")
    run_once(ws, load_config(), log=LOG, environ=ENV)
    codes = {f.name: load_ir_projections(f).codes for f in ws.bundles_projects.iterdir()}
    with Ledger.open(ws.ledger_file) as ledger:
        processor = Processor(ws, load_config(), ledger, time.time, LOG, environ=ENV)
        portfolio = processor.portfolio
        assert portfolio.due(ledger) == []
        templates = sorted(ws.outbox.glob("runs/*/*/verdicts/*.json"))
        chosen = [
            json.loads(path.read_text("utf-8"))
            for path in templates
            if not all(
                set(json.loads(path.read_text("utf-8"))["candidate"]["affected_codes"]) <= c
                for c in codes.values()
            )
        ]
        assert chosen, "every measure's codes are in every project: nothing to tell apart"
        verdict = chosen[0] | {"decision": "approved", "rationale": "Carries.", "reviewer": "KE"}
        verdict.pop("$schema", None)
        staged = tmp_path / f"{verdict['id']}.json"
        staged.write_text(json.dumps(verdict), "utf-8")
        processor.observe(staged.rename(ws.inbox_verdicts / staged.name))
        reads = Reads(monkeypatch)
        due = _said(portfolio.due(ledger))
        read = set(reads.folders)
        processor.close()
        _forget_versions(ws)
        _afresh, afresh = _due(ws, ledger)
    reached = {n for n, c in codes.items() if set(verdict["candidate"]["affected_codes"]) <= c}
    assert read == reached
    assert reached != set(codes)
    assert due == afresh


def _without_code(folder: Path, code: str) -> None:
    """The project without its cost line ``code`` and the kuttliste items on it (its base
    estimate less the line's amount, as the bundle check wants)."""
    line = (folder / "cost" / f"{code}.md").read_text("utf-8")
    amount = int(line.split("amount_nok: ", 1)[1].split()[0])
    header = folder / "project.md"
    text = header.read_text("utf-8")
    base = int(text.split("base_estimate_nok: ", 1)[1].split()[0])
    header.write_text(
        text.replace(f"base_estimate_nok: {base}", f"base_estimate_nok: {base - amount}"), "utf-8"
    )
    gone = [folder / "cost" / f"{code}.md"] + [
        item
        for item in sorted((folder / "kuttliste").glob("*.md"))
        if f'"{code}"' in item.read_text("utf-8").split("affected_codes:", 1)[1].split("\n", 1)[0]
    ]
    index = folder / "index.md"
    lines = index.read_text("utf-8").splitlines(keepends=True)
    named = {f"({path.parent.name}/{path.name})" for path in gone}
    index.write_text("".join(ln for ln in lines if not any(n in ln for n in named)), "utf-8")
    for path in gone:
        path.unlink()


def test_an_own_part_an_earlier_version_kept_is_read_without_its_codes(tmp_path: Path) -> None:
    """A row kept before the codes were (its own part alone) still reads: its own part stands
    until the teaching moves, and is then computed again with its codes."""
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    with Ledger.open(ws.ledger_file) as ledger:
        ledger.ingested.keep_versions([("new", "i1", ["x"], frozenset({"21", "22"}))])
    with sqlite3.connect(ws.ledger_file) as db:
        db.execute("INSERT INTO versions (folder, inputs, own) VALUES ('old', 'i0', '[\"y\"]')")
        db.execute(
            "INSERT INTO versions (folder, inputs, own) VALUES ('bad', 'i2', '{\"own\": []}')"
        )
    with Ledger.open(ws.ledger_file) as ledger:
        assert ledger.ingested.versions() == {
            "new": ("i1", ["x"], frozenset({"21", "22"})),
            "old": ("i0", ["y"], None),
        }


def test_the_look_holds_the_garbage_collector_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every full collection during the look walked all that the events since the start left
    (0.6 s of a look's 4.3 at ten thousand projects); it is held off, and given back after."""
    import gc

    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    seen: list[bool] = []
    with Ledger.open(ws.ledger_file) as ledger:
        portfolio = Portfolio.of(ws, load_config(), ledger, LOG)
        real_look = portfolio.ingested.look

        def look(**kwargs: object) -> object:
            seen.append(gc.isenabled())
            return real_look(**kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(portfolio.ingested, "look", look)
        assert gc.isenabled()
        portfolio.due(ledger)
    assert seen == [False]
    assert gc.isenabled()


def test_the_reruns_are_decided_on_the_folders_the_classes_were_rebuilt_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A settle's two steps (the classes rebuilt, the reruns decided) look at the folders once,
    and see the same folders; a later look at the reruns looks again (a project that came by
    hand since is seen)."""
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    generated = generate_ns3451(13, 6).projects
    for project in generated[:5]:
        project.write(ws.bundles_projects / project.project_id)
    looks = []
    real = IngestedProjects.look

    def counted(self: IngestedProjects, *, ir: bool) -> Any:
        looks.append(ir)
        return real(self, ir=ir)

    monkeypatch.setattr(IngestedProjects, "look", counted)
    with Ledger.open(ws.ledger_file) as ledger:
        portfolio = Portfolio.of(ws, load_config(), ledger, LOG)
        portfolio.rebuild(NOW)
        generated[5].write(ws.bundles_projects / generated[5].project_id)  # after the look
        first = {d.folder.name for d in portfolio.due(ledger)}
        assert len(looks) == 1, "the reruns looked at the folders again"
        assert generated[5].project_id not in first  # decided on the classes' own look
        second = {d.folder.name for d in portfolio.due(ledger)}
        assert len(looks) == 2 and generated[5].project_id in second
