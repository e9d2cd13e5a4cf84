"""The look at the reruns (``Portfolio.due``) at scale: a project's version is computed again
only when what it is computed from moved — its content, the experts' teaching, its reference
candidates (found for every project at once from the compact index) — and the projects it
finds due are the ones a look computing every version afresh finds."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import structlog

from portfolio_optimiser.config import load_config
from portfolio_optimiser.daemon.ledger import Ledger
from portfolio_optimiser.daemon.once import run_once
from portfolio_optimiser.daemon.portfolio import Due, Portfolio
from portfolio_optimiser.daemon.workspace import Workspace

from .synthetic_ns3451 import generate_ns3451
from .test_portfolio_index import Reads

ENV = {"PORTFOLIO_OPTIMISER_REASONING_MODE": "ci"}
LOG = structlog.get_logger("test")


def _due(ws: Workspace, ledger: Ledger) -> tuple[Portfolio, list[tuple[str, str, bool]]]:
    """A new process's look: its classes rebuilt, then the reruns decided."""
    portfolio = Portfolio.of(ws, load_config(), ledger, LOG)
    portfolio.rebuild()
    return portfolio, _said(portfolio.due(ledger))


def _said(due: list[Due]) -> list[tuple[str, str, bool]]:
    return sorted((d.folder.name, d.identity, d.restore) for d in due)


def _forget_versions(ws: Workspace) -> None:
    with sqlite3.connect(ws.ledger_file) as db:
        db.execute("DELETE FROM versions")


@pytest.mark.loadbearing
def test_the_look_reads_only_projects_whose_inputs_moved_and_finds_what_afresh_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    generated = generate_ns3451(11, 14).projects
    for project in generated[:12]:
        project.write(ws.inbox_projects / project.project_id)
    run_once(ws, load_config(), log=LOG, environ=ENV)
    reads = Reads(monkeypatch)
    with Ledger.open(ws.ledger_file) as ledger:
        _portfolio, due = _due(ws, ledger)
        assert due == [] and reads.folders == [], "a settled portfolio read its bundles again"
        for project in generated[12:]:  # two more settle, as a planner's bundles do
            project.write(ws.bundles_projects / project.project_id)
        reads.folders.clear()
        _portfolio, due = _due(ws, ledger)
        read = set(reads.folders)
        _forget_versions(ws)
        _afresh, afresh = _due(ws, ledger)
    assert due == afresh
    assert {p.project_id for p in generated[12:]} <= read  # new: no version of theirs is known
    assert {name for name, _identity, _restore in due} <= read  # a due project's snapshot
    assert len(read) < 14, "every bundle was read: nothing was decided from the compact index"
    new = {p.project_id for p in generated[12:]}
    assert any(name not in new for name, *_ in due), "the portfolio moved under no project"
