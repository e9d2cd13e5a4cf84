"""The simulation closes the learning loop through files, and the persona is read, never inlined."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from portfolio_optimiser.pipeline import simulation
from portfolio_optimiser.pipeline.simulation import SimulationReport, simulate

from .conftest import REPO


def run(workspace: Path, **kwargs: bool) -> SimulationReport:
    return asyncio.run(simulate(workspace, **kwargs))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> SimulationReport:
    return run(tmp_path_factory.mktemp("sim") / "ws")


@pytest.mark.loadbearing
def test_run_b_carries_the_promoted_marker_and_the_control_does_not(
    report: SimulationReport,
) -> None:
    assert report.marker == "RX-7Q"
    assert report.marker_reached_run_b
    assert not report.marker_in_control
    assert not any(report.marker in p for r in report.run_a for p in r.hypothesis_prompts)
    assert report.promoted_page is not None and report.promoted_page.is_file()


@pytest.mark.loadbearing
def test_without_the_promotion_the_marker_never_reaches_run_b(tmp_path: Path) -> None:
    report = run(tmp_path / "ws", promote=False)
    assert not report.marker_reached_run_b


def test_the_marker_is_absent_from_every_bundle() -> None:
    for path in (REPO / "shared" / "examples").rglob("*.md"):
        assert "RX-7Q" not in path.read_text("utf-8"), path


def test_the_simulation_shows_both_falsifiers_apart(report: SimulationReport) -> None:
    outcomes = {
        (c.validator.outcome, c.checker.outcome) for r in report.run_a for c in r.candidates
    }
    assert ("accepted", "rejected") in outcomes  # the checker blocks what the validator passed
    assert ("accepted", "approved") in outcomes


@pytest.mark.loadbearing
def test_the_simulations_marker_follows_the_persona_artifact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A throwaway copy of the commons with another marker: the simulation must follow the file.
    commons = tmp_path / "commons"
    shutil.copytree(REPO / "shared", commons, symlinks=True)
    example = commons / "skills" / "expert-reviewer" / "references" / "example-verdict.json"
    data = json.loads(example.read_text("utf-8"))
    data["rationale"] = data["rationale"].replace("(marker RX-7Q)", "(marker ZZ-42)")
    example.write_text(json.dumps(data, indent=2), encoding="utf-8")
    monkeypatch.setattr("portfolio_optimiser.persona.commons_dir", lambda: commons)
    monkeypatch.setattr(simulation, "commons_dir", lambda: commons)
    report = run(tmp_path / "ws")
    assert report.marker == "ZZ-42"
    assert report.marker_reached_run_b
