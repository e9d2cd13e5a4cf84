"""The reference fit of a large portfolio made in a process of its own (``FitProcess``): the same
figures as the fit made here, the processor's refit taking it from there, and a child that dies
leaving the fit to this process, logged. The child is a real spawned interpreter; the threshold
is lowered so that a portfolio of a dozen projects counts as large."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import structlog

from portfolio_optimiser.config import load_config
from portfolio_optimiser.context import price_fit
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.price_fit import PriceFit
from portfolio_optimiser.context.reference import ReferenceIndex
from portfolio_optimiser.daemon import fit_process
from portfolio_optimiser.daemon.fit_process import FitProcess
from portfolio_optimiser.daemon.ledger import Ledger
from portfolio_optimiser.daemon.portfolio import Portfolio
from portfolio_optimiser.daemon.workspace import Workspace

from .synthetic_ns3451 import generate_ns3451
from .test_portfolio_index import LOG, NOW, ws

__all__ = ["ws"]  # the fixture, shared with the index's tests


class Fits:
    """Counts the fits made in this process (one unpickled from the child makes none)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made = 0
        real = PriceFit.__init__

        def counted(fit: PriceFit, index: ReferenceIndex) -> None:
            self.made += 1
            real(fit, index)

        monkeypatch.setattr(price_fit.PriceFit, "__init__", counted)


def _index(tmp_path: Path) -> tuple[ReferenceIndex, list[Any]]:
    projects = []
    for project in generate_ns3451(5, 12).projects:
        project.write(tmp_path / project.project_id)
        projects.append(load_ir_projections(tmp_path / project.project_id))
    return ReferenceIndex.of(projects), projects


def _same_fit(a: PriceFit, b: PriceFit) -> None:
    for name, left, right in zip(a.entries()._fields, a.entries(), b.entries(), strict=True):
        if isinstance(left, np.ndarray):
            assert np.array_equal(left, right, equal_nan=True), name
        else:
            assert left == right, name


@pytest.fixture
def apart(monkeypatch: pytest.MonkeyPatch) -> Iterator[FitProcess]:
    """A fit process for which a dozen projects count as large, closed after the test."""
    monkeypatch.setattr(fit_process, "APART_FROM", 1)
    process = FitProcess(structlog.get_logger("test"))
    yield process
    process.close()


@pytest.mark.loadbearing
def test_a_large_index_is_fitted_in_a_process_of_its_own_with_the_same_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, apart: FitProcess
) -> None:
    index, projects = _index(tmp_path)
    here = PriceFit(index)
    fits = Fits(monkeypatch)
    fitted = apart.fitted(index)
    assert fitted == index and fitted.version == index.version
    _same_fit(fitted.fit, here)
    assert fits.made == 0  # made in the child, handed back
    for project in projects:  # every figure a run is given, the same
        assert fitted.assess(project) == index.assess(project)


def test_a_small_index_is_fitted_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index, _projects = _index(tmp_path)
    process = FitProcess(structlog.get_logger("test"))
    assert process.fitted(index) is index  # twelve projects: below the threshold
    assert process._pool is None  # and no child started for it


def test_a_child_that_dies_leaves_the_fit_to_this_process_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, apart: FitProcess
) -> None:
    index, _projects = _index(tmp_path)
    here = PriceFit(index)
    _same_fit(apart.fitted(index).fit, here)  # the child started, and warm
    pool = apart._pool
    assert pool is not None
    for pid in list(pool._processes):  # killed while the next fit is on its way
        os.kill(pid, signal.SIGKILL)
    with structlog.testing.capture_logs() as logs:
        fits = Fits(monkeypatch)
        again = apart.fitted(index)
        _same_fit(again.fit, here)
    assert fits.made == 1  # made here
    assert [e["event"] for e in logs] == [
        "reference fit made in the daemon's own process: its child failed"
    ]
    fits.made = 0
    _same_fit(apart.fitted(index).fit, here)  # the next fit: another child
    assert fits.made == 0


def test_the_processors_refit_takes_its_fit_from_the_process_of_its_own(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reruns' look against the next version fitted in the child decides as the look
    against the fit made here."""
    with Ledger.open(ws.ledger_file) as ledger:
        here = Portfolio.of(ws, load_config(), ledger, LOG)
        here.rebuild(NOW)
        expected = [(d.folder, d.identity) for d in here.due(ledger)]
    monkeypatch.setattr(fit_process, "APART_FROM", 1)
    fits = Fits(monkeypatch)
    with Ledger.open(ws.ledger_file) as ledger:
        apart = Portfolio.of(ws, load_config(), ledger, LOG)
        try:
            apart.rebuild(NOW)
            assert [(d.folder, d.identity) for d in apart.due(ledger)] == expected
            assert fits.made == 0
        finally:
            apart.fit.close()
