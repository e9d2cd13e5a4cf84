"""The service loop wakes on what happened, not on a tick: a verdict saved while the processing
thread runs a bundle is taken in when that run ends, never a tick later."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from portfolio_optimiser.daemon import job

from .conftest import EXAMPLES
from .daemon_helpers import service_on, wait_for

SCHOOL = EXAMPLES / "portfolio" / "lillevik-school"
TICK_S = 60.0
"""Far longer than the test waits: a loop that slept its tick after the run would fail it."""


@pytest.mark.loadbearing
def test_a_verdict_saved_during_a_run_is_taken_in_when_the_run_ends_not_a_tick_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_run = job.run_pipeline
    running, ended = threading.Event(), threading.Event()

    def slow_run(*args: Any) -> Any:
        running.set()
        time.sleep(1.5)  # the verdict arrives while the processing thread is in here
        try:
            return real_run(*args)
        finally:
            ended.set()

    monkeypatch.setattr(job, "run_pipeline", slow_run)
    monkeypatch.setenv("PORTFOLIO_OPTIMISER_REASONING_MODE", "ci")
    ws, service = service_on(tmp_path, tick_s=TICK_S)
    staged = tmp_path / "staged"
    shutil.copytree(SCHOOL, staged)
    thread = threading.Thread(target=service.run, daemon=True)
    thread.start()
    try:
        staged.rename(ws.inbox_projects / "lillevik-school")
        assert running.wait(30), "the bundle's run never started"
        verdict = ws.inbox_verdicts / "c-0000000000000000.json"
        saved = {"id": "c-0000000000000000", "decision": "approved", "rationale": "r"}
        verdict.write_text(json.dumps(saved), encoding="utf-8")
        report = verdict.with_name(verdict.name + ".error.txt")
        assert not report.exists(), "taken in while the run was in hand: not what this tests"
        assert ended.wait(60), "the run never ended"
        wait_for(report.is_file, timeout_s=10, what="the verdict's report after the run ended")
    finally:
        service.request_stop()
        thread.join(timeout=30)
    assert not thread.is_alive()
