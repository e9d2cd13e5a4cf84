"""A project is run again for its reference candidates only when they moved beyond the band:
``[reference] rerun_band`` (``within_band``), held in the ledger across a restart."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from portfolio_optimiser.config import Config, load_config
from portfolio_optimiser.context.reference_sweep import ReferenceKey, within_band
from portfolio_optimiser.daemon.job import run_id_for
from portfolio_optimiser.daemon.ledger import Ledger
from portfolio_optimiser.daemon.once import run_once
from portfolio_optimiser.daemon.portfolio import Portfolio
from portfolio_optimiser.daemon.workspace import Workspace

from .synthetic_ns3451 import generate_ns3451
from .test_portfolio_due import ENV, LOG, settled

STAMP = "2026-12-07T00:00:00Z"
NOW = 1_796_601_600.0
"""When the tests' reference fits are published (2026-12-07, UTC)."""

HELD: tuple[ReferenceKey, ...] = (
    ("231", "m2", "likely", 120_000),
    ("25", "m3", "possible", 64_000),
)


def test_savings_within_the_band_hold_and_any_other_move_does_not() -> None:
    moved = (("231", "m2", "likely", 130_000), ("25", "m3", "possible", 58_000))
    assert within_band(HELD, moved, 0.10)
    assert not within_band(HELD, moved, 0.05)
    assert within_band(HELD, HELD, 0.0)
    assert not within_band(HELD, moved, 0.0)
    beyond = (("231", "m2", "likely", 133_000), HELD[1])
    assert not within_band(HELD, beyond, 0.10)
    regraded = (("231", "m2", "possible", 120_000), HELD[1])
    assert not within_band(HELD, regraded, 0.10)
    assert not within_band(HELD, HELD[:1], 0.10)
    assert not within_band(HELD[:1], HELD, 0.10)
    assert not within_band(HELD, HELD[::-1], 0.10)
    # Never narrower than half the materiality floor: 64 000 → 58 000 is 9 %, but only 6 000.
    assert within_band(HELD, moved, 0.05, floor=50_000)
    assert not within_band(HELD, (("231", "m2", "likely", 146_000), HELD[1]), 0.05, floor=50_000)


def test_the_band_is_on_by_default() -> None:
    assert load_config().reference.rerun_band == 0.05


def _config(band: float) -> Config:
    config = load_config()
    return config.model_copy(
        update={"reference": config.reference.model_copy(update={"rerun_band": band})}
    )


def _look(ws: Workspace, band: float) -> tuple[dict[str, tuple[ReferenceKey, ...]], list[str]]:
    """A new process's look: each folder's reference candidates now, and the folders due."""
    with Ledger.open(ws.ledger_file) as ledger:
        portfolio = Portfolio.of(ws, _config(band), ledger, LOG)
        portfolio.rebuild(NOW)
        due = sorted(d.folder.name for d in portfolio.due(ledger))
        now = {name: memo[2] for name, memo in portfolio._memo.items()}
    return now, due


@pytest.fixture(scope="module")
def grown(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Forty projects run and settled, then two more settled beside them: the classes moved."""
    root = tmp_path_factory.mktemp("grown")
    generated = generate_ns3451(23, 42).projects
    ws = settled(root / "ws", generated[:40], _config(0.10))
    with Ledger.open(ws.ledger_file) as ledger:
        held = ledger.ingested.anchors()
    assert len(held) == 40, "the settling looks took no anchors"
    for project in generated[40:]:
        project.write(ws.bundles_projects / project.project_id)
    return root


def _copy(grown: Path, tmp_path: Path) -> Workspace:
    shutil.copytree(grown / "ws", tmp_path / "ws", symlinks=True)
    return Workspace.at(tmp_path / "ws", environ={})


@pytest.mark.loadbearing
def test_one_more_project_reruns_only_those_it_moved_beyond_the_band(
    grown: Path, tmp_path: Path
) -> None:
    exact = _copy(grown, tmp_path / "exact")
    banded = _copy(grown, tmp_path / "banded")
    with Ledger.open(banded.ledger_file) as ledger:
        anchors = ledger.ingested.anchors()
    _now, due_exact = _look(exact, 0.0)
    now, due = _look(banded, 0.10)
    new = set(now) - set(anchors)
    assert len(new) == 2
    moved = sorted(n for n in now if n not in new and now[n] != anchors[n].keys)
    held = [n for n in moved if within_band(anchors[n].keys, now[n], 0.10)]
    assert held, "no saving moved within the band: the portfolio does not test the band"
    assert set(due) == set(due_exact) - set(held)
    assert all(not within_band(anchors[n].keys, now[n], 0.10) for n in due if n not in new)


@pytest.mark.loadbearing
def test_a_project_held_within_the_band_stays_held_after_a_restart(
    grown: Path, tmp_path: Path
) -> None:
    ws = _copy(grown, tmp_path)
    _now, first = _look(ws, 0.10)
    _now, again = _look(ws, 0.10)  # another process: the anchors are read back from the ledger
    assert again == first


@pytest.mark.loadbearing
def test_the_same_bundle_dropped_again_is_held_as_its_folder_is(
    grown: Path, tmp_path: Path
) -> None:
    ws = _copy(grown, tmp_path)
    run_once(ws, _config(0.10), log=LOG, environ=ENV)  # what is due runs; the rest is held
    now, due = _look(ws, 0.10)
    with Ledger.open(ws.ledger_file) as ledger:
        anchors, latest = ledger.ingested.anchors(), dict(ledger.records.latest_runs())
    assert due == []
    held = sorted(n for n in now if now[n] != anchors[n].keys)
    assert held, "no project is held within the band"
    runs = sorted((ws.outbox / "runs" / held[0]).iterdir())
    shutil.copytree(ws.bundles_projects / held[0], ws.inbox_projects / f"{held[0]}-again")
    run_once(ws, _config(0.10), log=LOG, environ=ENV)
    with Ledger.open(ws.ledger_file) as ledger:
        assert dict(ledger.records.latest_runs())[held[0]] == latest[held[0]]
    assert sorted((ws.outbox / "runs" / held[0]).iterdir()) == runs, "it ran again"


def test_with_no_band_no_anchors_are_kept_and_a_band_set_later_starts_afresh(
    grown: Path, tmp_path: Path
) -> None:
    exact = _copy(grown, tmp_path / "exact")
    _now, due_exact = _look(exact, 0.0)
    with Ledger.open(exact.ledger_file) as ledger:
        assert ledger.ingested.anchors() == {}
    _now, due = _look(exact, 0.10)  # nothing to hold to: each folder's keys now are its anchor
    assert due == due_exact


def _settle_as_run(ws: Workspace, ledger: Ledger, config: Config) -> Portfolio:
    """Every project's identity now made its latest run's, as if each had run (no pipeline):
    the portfolio as the daemon leaves it settled."""
    portfolio = Portfolio.of(ws, config, ledger, LOG)
    portfolio.rebuild(NOW)
    for due in portfolio.due(ledger):
        ledger.begin(due.identity, kind="bundle", name=due.folder.name, now=STAMP)
        ledger.mark(due.identity, "done", now=STAMP)
        run_id = run_id_for(STAMP, due.identity)
        ledger.records.record_project_run(
            due.prices.project_id, run_id, str(ws.outbox / run_id), now=STAMP
        )
    assert portfolio.due(ledger) == [], "the portfolio did not settle"
    return portfolio


@pytest.mark.loadbearing
def test_one_arrival_among_a_thousand_makes_due_only_what_changed_in_kind_or_beyond_the_band(
    tmp_path: Path,
) -> None:
    """At 1 000 projects one more project moves hundreds of savings by a rounding step; only
    the projects whose reference candidates changed in kind (one came or went, a code, unit or
    grade changed) or moved a saving beyond the band become due — and some do, so the test
    tells the band from no rerun at all."""
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    generated = generate_ns3451(29, 1001, parts=1).projects
    for project in generated[:1000]:
        project.write(ws.bundles_projects / project.project_id)
    config = _config(0.05)
    with Ledger.open(ws.ledger_file) as ledger:
        _settle_as_run(ws, ledger, config)
        held = ledger.ingested.anchors()
        generated[1000].write(ws.bundles_projects / generated[1000].project_id)
        portfolio = Portfolio.of(ws, config, ledger, LOG)
        portfolio.rebuild(NOW)
        due = {d.folder.name for d in portfolio.due(ledger)} - {generated[1000].project_id}
        now = {name: memo[2] for name, memo in portfolio._memo.items()}
    floor = config.reference.min_saving_nok
    moved = {n for n in held if now[n] != held[n].keys}
    within = {n for n in moved if within_band(held[n].keys, now[n], 0.05, floor)}
    assert len(within) >= 50, f"{len(within)} savings moved within the band: nothing to hold"
    assert due, "nothing became due: the arrival changed nothing in kind or beyond the band"
    assert due == moved - within
