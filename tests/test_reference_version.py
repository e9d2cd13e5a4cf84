"""The reference fit as a versioned artefact (DESIGN §12): a version is named by its set of
projects and the rule, whatever order they arrived in; an arriving project is scored against the
current version at once, and the next version is fitted once arrivals are quiet for
``[reference] refit_quiet_s`` or ``refit_every`` have come — never on a verdict's path; a restart
reaches the same version and figures."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from portfolio_optimiser.cli import main
from portfolio_optimiser.config import Config, load_config
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.reference import ProjectPrices, ReferenceRule
from portfolio_optimiser.context.reference_classes import ReferenceClasses
from portfolio_optimiser.context.reference_sweep import within_band
from portfolio_optimiser.context.reference_version import RefitPolicy, version_id
from portfolio_optimiser.daemon.ingested import IngestedProjects
from portfolio_optimiser.daemon.ledger import Ledger
from portfolio_optimiser.daemon.portfolio import Portfolio
from portfolio_optimiser.daemon.processor import Processor
from portfolio_optimiser.daemon.session import status_text
from portfolio_optimiser.daemon.stamps import iso
from portfolio_optimiser.daemon.workspace import Workspace

from .synthetic_ns3451 import generate_ns3451
from .test_portfolio_due import ENV, LOG, settled


def test_when_the_next_version_is_due() -> None:
    policy = RefitPolicy(quiet_s=30.0, every=3)
    assert policy.due_in(0, 100.0, 200.0) is None  # nothing arrived: nothing to refit
    assert policy.due_in(1, 100.0, 110.0) == 20.0  # quiet for 10 s of 30
    assert policy.due_in(2, 100.0, 130.0) == 0.0  # quiet long enough
    assert policy.due_in(2, 100.0, 190.0) == 0.0
    assert policy.due_in(3, 100.0, 100.0) == 0.0  # the third arrival: at once
    assert RefitPolicy(quiet_s=0.0, every=20).due_in(1, 100.0, 100.0) == 0.0


def _prices(root: Path, seed: int, n: int) -> dict[str, ProjectPrices]:
    found = {}
    for p in generate_ns3451(seed, n, parts=2).projects:
        found[p.project_id] = ProjectPrices.of(load_ir_projections(p.write(root / p.project_id)))
    return found


def _classes(steps: list[dict[str, ProjectPrices]], rule: ReferenceRule) -> ReferenceClasses:
    classes = ReferenceClasses(rule)
    for projects in steps:
        classes.update(projects)
    return classes


@pytest.mark.loadbearing
def test_a_version_is_its_set_whatever_order_it_arrived_in(tmp_path: Path) -> None:
    rule = ReferenceRule()
    projects = _prices(tmp_path / "a", 5, 12)
    names = sorted(projects)
    at_once = _classes([projects], rule)
    order = names[:]
    random.Random(7).shuffle(order)
    grown = _classes([{n: projects[n] for n in order[: i + 1]} for i in range(len(order))], rule)
    # A project gone and back, and another revised and revised back: the same set again.
    revised = dict(projects)
    was = projects[names[3]]
    revised[names[3]] = dataclasses.replace(
        was, classes=tuple((a, u, price * 1.1, s) for a, u, price, s in was.classes)
    )
    detour = _classes([projects, {n: projects[n] for n in names[1:]}, revised, projects], rule)
    index = at_once.index()
    assert index.version.startswith("v-") and len(index.version) == 14
    for other in (grown, detour):
        again = other.index()
        assert again.version == index.version
        for name in names:  # the figures of the same version are the full recompute's
            assert again.assess_prices(projects[name]) == index.assess_prices(projects[name])
    assert index.version == version_id(at_once.digest(), rule)
    assert _classes([revised], rule).version() != index.version
    assert _classes([{n: projects[n] for n in names[1:]}], rule).version() != index.version
    assert _classes([projects], ReferenceRule(threshold=3.0)).version() != index.version


def _config(**reference: Any) -> Config:
    config = load_config()
    return config.model_copy(update={"reference": config.reference.model_copy(update=reference)})


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def portfolio(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Twenty projects run and settled (``once``), and four more generated beside them."""
    root = tmp_path_factory.mktemp("versions")
    generated = generate_ns3451(23, 24).projects
    settled(root / "ws", generated[:20])
    for project in generated[20:]:
        project.write(root / "later" / project.project_id)
    return root


def _copy(portfolio: Path, tmp_path: Path) -> tuple[Workspace, list[Path]]:
    shutil.copytree(portfolio / "ws", tmp_path / "ws", symlinks=True)
    return Workspace.at(tmp_path / "ws", environ={}), sorted((portfolio / "later").iterdir())


@contextlib.contextmanager
def _processor(ws: Workspace, config: Config, clock: Clock) -> Iterator[Processor]:
    with Ledger.open(ws.ledger_file) as ledger:
        processor = Processor(ws, config, ledger, clock, LOG, environ=ENV)
        try:
            yield processor
        finally:
            processor.close()


def _arrive(processor: Processor, clock: Clock, *bundles: Path) -> None:
    """Bundles dropped into the inbox, settled and run, as the daemon steps (no refit forced)."""
    for bundle in bundles:
        shutil.copytree(bundle, processor.workspace.inbox_projects / bundle.name)
    processor.scan()
    clock.now += 10  # past the inbox's stability period
    processor.step()
    assert all((processor.workspace.outbox / "runs" / b.name).is_dir() for b in bundles)


def _full_fit(ws: Workspace) -> str:
    """The version a fit of every ingested project afresh gives, in a process of its own."""
    with Ledger.open(ws.ledger_file) as ledger:
        ingested = IngestedProjects(ws, ledger, LOG)
        classes = ReferenceClasses(load_config().reference.rule())
        classes.update({n: prices for n, (_f, _c, prices, _ir) in ingested.look(ir=False).items()})
        return classes.version()


def _latest(ws: Workspace, project_id: str) -> dict[str, Any]:
    with Ledger.open(ws.ledger_file) as ledger:
        folder = {p: f for p, _r, f in ledger.records.project_runs()}[project_id]
    doc: dict[str, Any] = json.loads((Path(folder) / "proposals.json").read_text("utf-8"))
    return doc


@pytest.mark.loadbearing
def test_an_arrival_is_scored_against_the_current_version_and_the_refit_waits_for_quiet(
    portfolio: Path, tmp_path: Path
) -> None:
    ws, later = _copy(portfolio, tmp_path)
    clock = Clock()
    with _processor(ws, _config(refit_quiet_s=30.0, refit_every=20), clock) as processor:
        current = processor.portfolio.fit.version
        assert current is not None and current.projects == 20
        assert current.id == _full_fit(ws)
        _arrive(processor, clock, later[0])
        # Its run measured against the current version, which stands until arrivals are quiet.
        assert _latest(ws, later[0].name)["reference_version"] == current.id
        assert processor.portfolio.fit.version == current and processor.portfolio.fit.arrivals == 1
        assert not processor.has_work()
        wait = processor.seconds_until_next()
        assert wait is not None and 0 < wait <= 30.0
        clock.now += wait
        assert processor.has_work()
        processor.step()
        fitted = processor.portfolio.fit.version
        assert fitted is not None and fitted.id != current.id and fitted.projects == 21
        assert fitted.id == _full_fit(ws)
        assert processor.portfolio.fit.arrivals == 0
        status = json.loads(status_text(processor, pid_state="running"))["reference"]
        assert status["version"] == fitted.id and status["refit_due_at"] is None
    with Ledger.open(ws.ledger_file) as ledger:
        assert ledger.ingested.reference_version() == fitted


@pytest.mark.loadbearing
def test_the_page_at_a_version_is_the_page_a_full_recompute_gives(
    portfolio: Path, tmp_path: Path
) -> None:
    """Arrivals scored one by one, then the refit and its reruns; then a process that fits the
    same set afresh (its set forgotten, every class rebuilt) publishes the same page."""
    ws, later = _copy(portfolio, tmp_path)
    clock = Clock()
    config = _config(refit_quiet_s=30.0)
    with _processor(ws, config, clock) as processor:
        for bundle in later:
            _arrive(processor, clock, bundle)
        clock.now += 30
        processor.step(quiet_s=0.0)
        assert processor.portfolio.fit.arrivals == 0
        version = processor.portfolio.fit.version
        page = (ws.outbox / "portfolio.md").read_text("utf-8")
    with Ledger.open(ws.ledger_file) as ledger:
        ledger.ingested.publish_reference_version("v-000000000000", {}, "", joined=[], left=[])
    (ws.outbox / "portfolio.md").unlink()
    with _processor(ws, config, clock) as fresh:
        assert fresh.portfolio.fit.version is not None and version is not None
        assert fresh.portfolio.fit.version.id == version.id
        assert fresh.portfolio.due(fresh.ledger) == []
        fresh.desk.publish_portfolio()
        assert (ws.outbox / "portfolio.md").read_text("utf-8") == page


def test_every_so_many_arrivals_the_next_version_is_fitted_at_once(
    portfolio: Path, tmp_path: Path
) -> None:
    ws, later = _copy(portfolio, tmp_path)
    clock = Clock()
    with _processor(ws, _config(refit_quiet_s=3600.0, refit_every=2), clock) as processor:
        first = processor.portfolio.fit.version
        _arrive(processor, clock, later[0])
        assert processor.portfolio.fit.version == first
        said = json.loads(status_text(processor, pid_state="running"))["reference"]
        assert said["arrivals_since"] == 1 and said["refit_due_at"] == iso(clock.now + 3600)
        clock.now += 100  # the time it is due stays where the last arrival put it
        said = json.loads(status_text(processor, pid_state="running"))["reference"]
        assert said["refit_due_at"] == iso(clock.now - 100 + 3600)
        _arrive(processor, clock, later[1])  # the second: fitted in the same step
        assert processor.portfolio.fit.version != first and processor.portfolio.fit.arrivals == 0


@pytest.mark.loadbearing
def test_a_verdict_never_waits_for_a_refit_nor_calls_one(
    portfolio: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, later = _copy(portfolio, tmp_path)
    clock = Clock()
    with _processor(ws, _config(refit_quiet_s=30.0), clock) as processor:
        _arrive(processor, clock, later[0])
        fitted: list[float] = []
        monkeypatch.setattr(Portfolio, "rebuild", lambda _self, now: fitted.append(now))
        [template, *_] = sorted(ws.outbox.glob("runs/*/*/verdicts/*.json"))
        data = json.loads(template.read_text("utf-8"))
        data |= {"decision": "approved", "rationale": "Checked.", "reviewer": "KE"}
        staged = tmp_path / template.name
        staged.write_text(json.dumps(data), encoding="utf-8")
        processor.observe(staged.rename(ws.inbox_verdicts / template.name))
        assert processor.history[-1].state == "ingested", processor.history[-1]
        assert fitted == [] and processor.portfolio.fit.arrivals == 1


@pytest.mark.loadbearing
def test_an_arrival_moved_within_the_band_by_the_refit_is_not_run_again(
    portfolio: Path, tmp_path: Path
) -> None:
    """What an arrival's identity was computed from is its anchor from the moment it settles,
    as for every project a look has seen: the refit holds it while it moves within the band."""
    ws, later = _copy(portfolio, tmp_path)
    clock = Clock()
    office = later[1]  # its saving moves 6 %, less than half the floor, as the fit takes it in
    with _processor(ws, _config(refit_quiet_s=30.0), clock) as processor:
        processor.step(quiet_s=0.0)  # the start's look at the reruns: none due
        assert not processor.desk.reruns_due
        _arrive(processor, clock, office)
        [ran] = _runs(ws, office.name)
        clock.now += 30
        processor.step(quiet_s=0.0)
        assert processor.portfolio.fit.arrivals == 0, "not refitted"
        now = processor.portfolio._memo[office.name][2]
        held = processor.portfolio._anchored(processor.ledger)[office.name].keys
        assert now != held and within_band(held, now, 0.05, 50_000), "moved otherwise"
        assert _runs(ws, office.name) == [ran], "run again for a move within the band"


def _runs(ws: Workspace, name: str) -> list[str]:
    return sorted(p.name for p in (ws.outbox / "runs" / name).iterdir())


def _figures(ws: Workspace) -> dict[str, Any]:
    """What the portfolio says at the end: its version, and each project's latest run's version
    and reference candidates (id, saving, grade)."""
    with Ledger.open(ws.ledger_file) as ledger:
        version = ledger.ingested.reference_version()
        runs = sorted(ledger.records.project_runs())
    found: dict[str, Any] = {"version": version.id if version else None}
    for project_id, _run_id, folder in runs:
        doc = json.loads((Path(folder) / "proposals.json").read_text("utf-8"))
        found[project_id] = (
            doc.get("reference_version"),
            sorted(
                (c["id"], c["claimed_saving_nok"], c.get("grade"))
                for c in doc["candidates"]
                if c["measure_type"] == "reference_price"
            ),
        )
    return found


RESTARTS = ("between-arrivals", "before-the-refit", "after-the-refit")


@pytest.mark.loadbearing
@pytest.mark.parametrize("restart", RESTARTS)
def test_a_restart_at_any_moment_reaches_the_same_figures_at_the_same_version(
    portfolio: Path, tmp_path: Path, restart: str
) -> None:
    """Two arrivals, two more, then the refit: run without a stop, and with one at each moment;
    every restart ends at the same version with the same figures in every project's run."""
    config = _config(refit_quiet_s=3600.0, refit_every=20)

    def play(ws: Workspace, later: list[Path], stop_at: str | None) -> dict[str, Any]:
        clock = Clock()
        with _processor(ws, config, clock) as processor:
            _arrive(processor, clock, *later[:2])
            if stop_at == "between-arrivals":
                processor.close()
                processor = Processor(ws, config, processor.ledger, clock, LOG, environ=ENV)
                assert processor.portfolio.fit.arrivals == 2, "the arrivals since were forgotten"
            _arrive(processor, clock, *later[2:])
            if stop_at == "before-the-refit":
                processor.close()
                processor = Processor(ws, config, processor.ledger, clock, LOG, environ=ENV)
            if stop_at == "after-the-refit":
                processor.desk.rebuild_references()  # the refit published, no rerun yet
                processor.close()
                processor = Processor(ws, config, processor.ledger, clock, LOG, environ=ENV)
            processor.step(quiet_s=0.0, refit_now=True)
            processor.step(quiet_s=0.0, refit_now=True)  # nothing more is due
            assert not processor.desk.reruns_due
        return _figures(ws)

    ws, later = _copy(portfolio, tmp_path / "straight")
    expected = play(ws, later, None)
    assert expected["version"] == _full_fit(ws)
    assert any(v[1] for k, v in expected.items() if k != "version"), "no reference candidate"
    ws, later = _copy(portfolio, tmp_path / restart)
    assert play(ws, later, restart) == expected


def test_status_shows_the_current_version_its_size_and_age(
    portfolio: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws, _later = _copy(portfolio, tmp_path)
    with Ledger.open(ws.ledger_file) as ledger:
        version = ledger.ingested.reference_version()
    assert version is not None and version.projects == 20
    assert main(["--workspace", str(ws.root), "status", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)["daemon"]["reference"]
    assert said["version"] == version.id and said["projects"] == 20
    assert said["fitted_at"] == version.fitted_at and said["age_s"] >= 0
    assert main(["--workspace", str(ws.root), "status"]) == 0
    line = (
        f"reference fit: version {version.id} of 20 project folder(s), fitted {version.fitted_at}"
    )
    assert line in capsys.readouterr().out
