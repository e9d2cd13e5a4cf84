"""An expert's verdict never waits behind a run (issue 19): a verdict saved while the processing
thread runs a bundle is taken in while that run is still in hand — on the loop's thread, through
the intake's own connection to the ledger — and the portfolio page shows it before the run ends.
The tick is far longer than the tests wait, so a loop that slept it would fail them."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from portfolio_optimiser.daemon import job
from portfolio_optimiser.daemon.workspace import Workspace

from .conftest import EXAMPLES
from .daemon_helpers import service_on, wait_for

SCHOOL = EXAMPLES / "portfolio" / "lillevik-school"
TICK_S = 60.0


class SlowRuns:
    """``run_pipeline`` held from its ``slow_from``-th call on until the test lets it go
    (``release``; at most ``seconds``), saying when a held run is in hand and when it has ended:
    a verdict is shown to be taken in during a run however slow the machine is, not within a
    fixed time."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, slow_from: int, seconds: float) -> None:
        self.real, self.calls = job.run_pipeline, 0
        self.slow_from, self.seconds = slow_from, seconds
        self.running, self.ended = threading.Event(), threading.Event()
        self.release = threading.Event()
        monkeypatch.setattr(job, "run_pipeline", self)

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        if self.calls < self.slow_from:
            return self.real(*args)
        self.running.set()
        self.release.wait(self.seconds)  # the verdict arrives while the processing thread is here
        try:
            return self.real(*args)
        finally:
            self.ended.set()


def _bundle(tmp_path: Path, project_id: str) -> Path:
    staged = tmp_path / f"staged-{project_id}"
    shutil.copytree(SCHOOL, staged)
    project = staged / "project.md"
    project.write_text(
        project.read_text("utf-8").replace("id: lillevik-school", f"id: {project_id}"), "utf-8"
    )
    return staged


def _save(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(".tmp-" + path.name)
    tmp.write_text(json.dumps(data), encoding="utf-8")
    tmp.rename(path)


@contextlib.contextmanager
def _daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Workspace]:
    """An in-process daemon on a fresh workspace, stopped (and its thread gone) on leaving."""
    monkeypatch.setenv("PORTFOLIO_OPTIMISER_REASONING_MODE", "ci")
    ws, service = service_on(tmp_path, tick_s=TICK_S)
    thread = threading.Thread(target=service.run, daemon=True)
    thread.start()
    try:
        yield ws
    finally:
        service.request_stop()
        thread.join(timeout=30)
    assert not thread.is_alive()


@pytest.mark.loadbearing
def test_a_verdict_saved_during_a_run_is_taken_in_before_the_run_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = SlowRuns(monkeypatch, slow_from=2, seconds=120.0)
    with _daemon(tmp_path, monkeypatch) as ws:
        _bundle(tmp_path, "lillevik-school").rename(ws.inbox_projects / "lillevik-school")
        wait_for(
            lambda: list(ws.outbox.glob("runs/lillevik-school/*/verdicts/*.json")),
            timeout_s=60,
            what="the first bundle's verdict templates",
        )
        _bundle(tmp_path, "lillevik-annex").rename(ws.inbox_projects / "lillevik-annex")
        assert runs.running.wait(30), "the second bundle's run never started"
        [template, *_] = sorted(ws.outbox.glob("runs/lillevik-school/*/verdicts/*.json"))
        data = json.loads(template.read_text("utf-8"))
        data |= {"decision": "approved", "rationale": "Checked on site.", "reviewer": "KE"}
        _save(ws.inbox_verdicts / template.name, data)
        promoted = ws.wiki / "verdicts" / f"{data['id']}.md"
        wait_for(promoted.is_file, timeout_s=60, what="the approval promoted during the run")
        page = (ws.outbox / "portfolio.md").read_text("utf-8")
        assert f"`{data['id']}`" not in page.split("## Largest candidates awaiting")[1], (
            "the page still lists the approved candidate as awaiting a verdict"
        )
        assert not runs.ended.is_set(), "the run ended first: the verdict waited behind it"
        runs.release.set()
        assert runs.ended.wait(60), "the run never ended"


@pytest.mark.loadbearing
def test_a_verdict_naming_no_candidate_is_reported_during_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = SlowRuns(monkeypatch, slow_from=1, seconds=120.0)
    with _daemon(tmp_path, monkeypatch) as ws:
        _bundle(tmp_path, "lillevik-school").rename(ws.inbox_projects / "lillevik-school")
        assert runs.running.wait(30), "the bundle's run never started"
        verdict = ws.inbox_verdicts / "c-0000000000000000.json"
        saved = {
            "id": "c-0000000000000000",
            "decision": "approved",
            "rationale": "r",
            "reviewer": "KE",
        }
        _save(verdict, saved)
        report = verdict.with_name(verdict.name + ".error.txt")
        wait_for(report.is_file, timeout_s=60, what="the verdict's report during the run")
        assert "names no candidate" in report.read_text("utf-8")
        assert not runs.ended.is_set(), "the run ended first: the verdict waited behind it"
        runs.release.set()


def test_the_memory_a_run_freed_is_given_back_once_the_daemon_is_idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """glibc keeps what a run freed; the daemon hands it back once it has been idle for a
    while after the work (the idle daemon's RSS target; not at the first idle turn, where it held
    up the next verdict of a burst), once, not at every idle turn."""
    from portfolio_optimiser.daemon import service

    given: list[float] = []
    monkeypatch.setattr(service, "give_back_memory", lambda **_: given.append(time.time()))
    with _daemon(tmp_path, monkeypatch) as ws:
        wait_for(lambda: len(given) == 1, timeout_s=30, what="the start's memory given back")
        _bundle(tmp_path, "lillevik-school").rename(ws.inbox_projects / "lillevik-school")
        wait_for(lambda: len(given) == 2, timeout_s=60, what="the run's memory given back")
        [proposals] = ws.outbox.glob("runs/lillevik-school/*/proposals.json")
        assert given[1] - proposals.stat().st_mtime >= service.IDLE_CHORES_AFTER_S - 0.1
        (ws.inbox_projects / "not-a-bundle.txt").write_text("x", encoding="utf-8")  # a hint
        time.sleep(0.5)
        assert len(given) == 2, "given back again with no work between"


def _set_aside(script: str) -> list[str]:
    """``script`` run in a process of its own (a freeze is for the whole process); its output."""
    prelude = "import gc, weakref\nfrom portfolio_optimiser.daemon.memory import give_back_memory\n"
    done = subprocess.run(
        [sys.executable, "-c", prelude + script], capture_output=True, text=True, check=True
    )
    return done.stdout.split()


@pytest.mark.loadbearing
def test_what_the_work_left_alive_is_set_aside_from_the_collector_at_each_idle_turn() -> None:
    """The start's objects at the first turn, and what each later work left alive at each later
    turn: a full collection during the next work does not walk them again (the reasoning
    store's records: half a second of each at 48 000)."""
    first, second = map(
        int,
        _set_aside(
            "kept = [[i] for i in range(10_000)]\n"
            "give_back_memory(thorough=False)\n"
            "first = gc.get_freeze_count()\n"
            "more = [[i] for i in range(10_000)]\n"
            "give_back_memory(thorough=False)\n"
            "print(first, gc.get_freeze_count())\n"
        ),
    )
    assert first >= 10_000
    assert second >= first + 10_000


@pytest.mark.loadbearing
def test_a_cycle_that_dies_after_it_was_set_aside_is_collected_at_the_next_thorough_turn() -> None:
    """Set aside, a cycle that dies is out of the collector's reach until a thorough turn hands
    everything back and collects it (at most ``THOROUGH_EVERY_S`` later), never for good."""
    after_quick, after_thorough = _set_aside(
        "class Cycle:\n"
        "    def __init__(self): self.me = self\n"
        "give_back_memory(thorough=True)\n"
        "cycle = Cycle(); alive = weakref.ref(cycle)\n"
        "give_back_memory(thorough=False)\n"
        "del cycle\n"
        "gc.collect()\n"
        "give_back_memory(thorough=False)\n"
        "quick = alive() is not None\n"
        "give_back_memory(thorough=True)\n"
        "print(quick, alive() is not None)\n"
    )
    assert after_quick == "True"  # held while set aside: the price of not walking it
    assert after_thorough == "False"


def test_the_daemon_switches_threads_often_enough_for_a_verdict_taken_in_beside_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verdict is taken in on the loop's thread while the processing thread computes; every
    flush lets go of the GIL, and the loop waited the other thread's switch interval to get it
    back (5 ms by default, each time)."""
    from portfolio_optimiser.daemon import service

    monkeypatch.setattr(sys, "setswitchinterval", lambda s: asked.append(s))
    asked: list[float] = []
    with _daemon(tmp_path, monkeypatch):
        wait_for(lambda: bool(asked), timeout_s=30, what="the switch interval set")
    assert asked == [service.SWITCH_INTERVAL_S]
    assert service.SWITCH_INTERVAL_S <= 0.001


def test_the_daemon_keeps_what_its_events_free_after_giving_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each time memory is given back at idle, what later events free is kept for the next one
    as the portfolio's size asks (``daemon/memory.py``); a turn collects everything, what was
    set aside too, only once every ``THOROUGH_EVERY_S``."""
    from portfolio_optimiser.daemon import service

    done: list[object] = []
    monkeypatch.setattr(
        service, "give_back_memory", lambda thorough: done.append(("given back", thorough))
    )
    monkeypatch.setattr(service, "keep_freed_memory", lambda projects: done.append(projects))
    with _daemon(tmp_path, monkeypatch) as ws:
        wait_for(lambda: len(done) == 2, timeout_s=30, what="the start's memory given back")
        _bundle(tmp_path, "lillevik-school").rename(ws.inbox_projects / "lillevik-school")
        wait_for(lambda: len(done) == 4, timeout_s=60, what="the run's memory given back")
    # Everything collected at the first turn; within the hour after it, the young objects only.
    assert done == [("given back", True), 0, ("given back", False), 1]


@pytest.mark.loadbearing
def test_a_changed_status_waits_while_hints_are_queued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between two verdicts of a burst the status is not written (its two flushes held up the
    next verdict by a millisecond): it is said once the hints are drained, or after
    ``STATUS_HELD_AT_MOST_S`` of a stream that never drains."""
    from portfolio_optimiser.daemon import service as service_module

    _ws, service = service_on(tmp_path, tick_s=TICK_S)
    now = [100.0]
    said: list[float] = []
    service.monotonic = lambda: now[0]
    monkeypatch.setattr(service, "_status", lambda *_a, **_k: "status")
    monkeypatch.setattr(service, "_publish_status", lambda *_a: said.append(now[0]))
    processor = SimpleNamespace(desk=object(), history=[], pending=lambda: 0, waiting={})
    watcher = SimpleNamespace(alive=lambda: True, method="inotify")
    loop = service_module._Loop(watcher, None, None)  # type: ignore[arg-type]

    service._keep_alive(processor, loop)
    assert said == [100.0]
    processor.history.append("a verdict")
    service.hints.put(None)  # the next verdict's hint, already queued
    service._keep_alive(processor, loop)
    assert said == [100.0], "said between two verdicts of a burst"
    now[0] += service_module.STATUS_HELD_AT_MOST_S
    service._keep_alive(processor, loop)
    assert said == [100.0, now[0]], "held past its bound by a stream of hints"
    processor.history.append("another verdict")
    service.hints.get_nowait()  # drained
    service._keep_alive(processor, loop)
    assert said == [100.0, now[0], now[0]]
