"""Many machines on one portfolio: a daemon takes in the inbox, workers take its jobs from the
queue they share in PostgreSQL, and the portfolio's budget holds across all of them.

Real parts, started by the tests: PostgreSQL (``tests/postgres.py``), a loopback model server
that bills every answer (``fakes.llm_server``), and the CLI's own ``run`` and ``worker``
processes, one of them SIGKILLed at seeded stages and restarted.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from portfolio_optimiser.daemon.ledger import Ledger

from .daemon_helpers import (
    Processes,
    Running,
    config_with_local_server,
    make_workspace,
    run_cli,
)
from .fakes.llm_server import COMPLETION_TOKENS, PROMPT_TOKENS, FakeLLMServer
from .synthetic import tiny_project

PROCESS_TEST_S = 900
"""pytest-timeout's limit for a test of processes: above its waits' own deadlines (``WAIT_S``),
so that a wait that runs out fails saying what it waited for and saw, not pytest's bare stack."""
pytestmark = [pytest.mark.postgres, pytest.mark.timeout(PROCESS_TEST_S)]

PROJECTS = 200
BILLED_PER_CALL = PROMPT_TOKENS + COMPLETION_TOKENS
RUN_TOKENS = 3_000
"""Each run's claim on the portfolio; a run here spends a few dozen."""
SEED = int(os.environ.get("PORTFOLIO_OPTIMISER_TEST_SEED", "20261202"))
WORKER_FAULTS = (
    "during-run",
    "after-ran",
    "checkpoint-ran",
    "after-outputs",
    "checkpoint-published",
    "after-spend",
    "checkpoint-charged",
    "after-settle",
    "checkpoint-settled",
)
"""Where a worker may die between two durable steps (``after-charge``, mid-run after a model
call was billed, is always one of the three kills)."""


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(content="The figures hold.\nVERDICT: APPROVE") as running:
        yield running


def _config(path: Path, base_url: str, *, portfolio_tokens: int) -> str:
    config_with_local_server(path, base_url)
    text = path.read_text("utf-8")
    for key, value in (("run_tokens", RUN_TOKENS), ("portfolio_tokens", portfolio_tokens)):
        text, count = re.subn(rf"(?m)^{key} = \d+", f"{key} = {value}", text)
        assert count == 1, key
    path.write_text(text, "utf-8")
    return str(path)


def _workspace(tmp_path: Path, n: int) -> Path:
    ws = make_workspace(tmp_path / "ws")
    for i in range(n):
        tiny_project(ws / "inbox" / "projects" / f"tiny-{i:03d}", i)
    return ws


def _env(url: str, executor: str, fault: str = "") -> dict[str, str]:
    env = {
        "PORTFOLIO_OPTIMISER_DATABASE_URL": url,
        "PORTFOLIO_OPTIMISER_EXECUTOR": executor,
        "PORTFOLIO_OPTIMISER_REASONING_MODE": "offline",  # the local advisor is asked
    }
    if fault:
        env["PORTFOLIO_OPTIMISER_TEST_FAULT"] = fault
    return env


def _calls(server: FakeLLMServer) -> int:
    return len([r for r in server.requests if r.path.endswith("/chat/completions")])


def _done(url: str) -> tuple[int, int]:
    with Ledger.connect(url) as ledger:
        return len(ledger.items("done")), len(ledger.jobs.all(unfinished=True))


def _stop(*processes: Running) -> None:
    for running in processes:
        if running.popen.poll() is None:
            running.popen.send_signal(signal.SIGTERM)
    for running in processes:
        assert running.wait(60) == 0, running.stderr()[-3000:]


def _workflows(url: str) -> list[tuple[str, int]]:
    import psycopg

    with psycopg.connect(url) as db:
        try:
            rows = db.execute(
                "SELECT status, COUNT(*) FROM dbos.workflow_status GROUP BY status ORDER BY status"
            ).fetchall()
        except psycopg.errors.UndefinedTable:  # DBOS makes its tables at its first launch
            return []
    return [(str(status), int(n)) for status, n in rows]


def _executors(url: str) -> set[str]:
    """The executors that finished a job."""
    import psycopg

    with psycopg.connect(url) as db:
        rows = db.execute("SELECT DISTINCT executor_id FROM dbos.workflow_status").fetchall()
    return {str(executor) for (executor,) in rows}


def _spend(ws: Path) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = json.loads((ws / "outbox" / "spend.json").read_text())["runs"]
    return runs


def _run_folders(ws: Path) -> dict[str, list[str]]:
    runs = ws / "outbox" / "runs"
    return {
        project.name: [r.name for r in project.iterdir() if not r.name.startswith(".")]
        for project in sorted(runs.iterdir())
    }


@pytest.mark.loadbearing
def test_two_workers_one_killed_three_times_run_every_project_once_and_charge_it_once(
    tmp_path: Path, postgres: Any, server: FakeLLMServer
) -> None:
    rng = random.Random(SEED)
    kills = ["after-charge", *rng.sample(WORKER_FAULTS, 2)]
    rng.shuffle(kills)
    # The Nth time the point is reached, N ≥ 2: the job a restart recovers first is never the
    # one killed again (twice would set it aside, as it should).
    kills = [f"{point}@{rng.randint(2, 3)}" for point in kills]
    seen = f"seed {SEED}, kills {kills}"
    url = postgres.new_database()
    ws = _workspace(tmp_path, PROJECTS)
    config = _config(tmp_path / "config.toml", server.base_url, portfolio_tokens=10_000_000)
    processes = Processes(tmp_path / "proc")
    try:
        daemon = processes.start("run", ws, "--config", config, env=_env(url, "intake"))
        other = processes.start("worker", ws, "--config", config, env=_env(url, "w2"))
        killed = processes.start("worker", ws, "--config", config, env=_env(url, "w1", kills[0]))
        deaths = 0
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if killed.popen.poll() is not None:
                assert killed.popen.returncode == -signal.SIGKILL, killed.stderr()[-3000:]
                deaths += 1
                fault = kills[deaths] if deaths < len(kills) else ""
                killed = processes.start(
                    "worker", ws, "--config", config, env=_env(url, "w1", fault)
                )
            for running in (daemon, other):
                assert running.popen.poll() is None, running.stderr()[-3000:]
            if _done(url) == (PROJECTS, 0):
                break
            time.sleep(0.5)
        assert _done(url) == (PROJECTS, 0), f"{_done(url)} after 600 s; {seen}"
        status = run_cli("status", ws, "--config", config, "--json", env=_env(url, "status"))
        _stop(daemon, other, killed)
    finally:
        processes.close()
    assert deaths == 3, f"the worker was killed {deaths} times, not 3; {seen}"
    folders = _run_folders(ws)
    assert len(folders) == PROJECTS and all(len(r) == 1 for r in folders.values()), seen
    spend = _spend(ws)
    assert sorted(run["project_id"] for run in spend) == sorted(folders), "each run charged once"
    assert sum(run["tokens"] for run in spend) == _calls(server) * BILLED_PER_CALL, (
        f"every token the server billed, a killed attempt's included, charged once; {seen}"
    )
    # No run is run again, but for the attempt the kill after a charge cut off: it had made
    # as many calls as that kill's N (fewer than a whole run's).
    per_run = min(run["tokens"] for run in spend) // BILLED_PER_CALL
    cut_off = next(int(k.split("@")[1]) for k in kills if k.startswith("after-charge@"))
    assert 0 < cut_off < per_run
    assert _calls(server) == PROJECTS * per_run + cut_off, f"a run was run twice; {seen}"
    assert _workflows(url) == [("SUCCESS", PROJECTS)], "one workflow per identity, all finished"
    with Ledger.connect(url) as ledger:
        assert ledger.budget.holders() == [], "no hold on the budget is left behind"
    assert {"w1", "w2"} <= _executors(url), "both workers took jobs"
    assert list((ws / ".state" / "claimed").iterdir()) == [], "nothing is left claimed"
    assert sorted(p.name for p in (ws / "bundles" / "projects").iterdir()) == sorted(folders)
    shown = json.loads(status.stdout)["daemon"]["shared"]
    assert {m["executor"] for m in shown["machines"] if m["alive"]} >= {"intake", "w2"}
    assert shown["queue_depth"] == 0


def test_a_cap_that_funds_150_of_200_runs_exactly_150_across_the_workers(
    tmp_path: Path, postgres: Any, server: FakeLLMServer
) -> None:
    # What one run spends here, measured on one machine first (the same shape of project).
    probe = make_workspace(tmp_path / "probe")
    tiny_project(probe / "inbox" / "projects" / "tiny-999", 999)
    probe_config = _config(tmp_path / "probe.toml", server.base_url, portfolio_tokens=10**7)
    ran = run_cli(
        "once",
        probe,
        "--config",
        probe_config,
        env={"PORTFOLIO_OPTIMISER_REASONING_MODE": "offline"},
        timeout_s=120,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    (one,) = _spend(probe)
    per_run = int(one["tokens"])
    assert 0 < per_run < RUN_TOKENS
    # 149 runs spent leave one claim's worth: the 150th starts, and then none can.
    cap = 149 * per_run + RUN_TOKENS
    url = postgres.new_database()
    ws = _workspace(tmp_path, PROJECTS)
    config = _config(tmp_path / "config.toml", server.base_url, portfolio_tokens=cap)
    processes = Processes(tmp_path / "proc")
    try:
        daemon = processes.start("run", ws, "--config", config, env=_env(url, "intake"))
        workers = [
            processes.start("worker", ws, "--config", config, env=_env(url, name))
            for name in ("w1", "w2")
        ]
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and _done(url) != (150, 0):
            for running in (daemon, *workers):
                assert running.popen.poll() is None, running.stderr()[-3000:]
            time.sleep(0.5)
        time.sleep(3)  # long enough for a wrongly admitted 151st to be claimed
        assert _done(url) == (150, 0)
        status = run_cli("status", ws, "--config", config, "--json", env=_env(url, "status"))
        _stop(daemon, *workers)
    finally:
        processes.close()
    assert len(_run_folders(ws)) == 150
    waiting = sorted(p.name for p in (ws / "inbox" / "projects").iterdir())
    assert len(waiting) == 50, "the rest wait in the inbox, unclaimed"
    assert _workflows(url) == [("SUCCESS", 150)], "none of the 50 was started"
    assert sum(run["tokens"] for run in _spend(ws)) <= cap
    said = json.loads(status.stdout)["daemon"]
    assert sorted(said["waiting"]) == waiting
    assert all("waiting for budget" in why for why in said["waiting"].values())
    with Ledger.connect(url) as ledger:
        assert ledger.budget.holders() == []
    assert {"w1", "w2"} <= _executors(url), "both workers took jobs"


def test_a_job_left_on_a_machine_that_is_gone_is_handed_to_a_live_one(
    tmp_path: Path, postgres: Any, server: FakeLLMServer
) -> None:
    url, ws, config, processes = _three_projects(tmp_path, postgres, server)
    alone = run_cli("worker", ws, "--config", config, env={"PORTFOLIO_OPTIMISER_EXECUTOR": "x"})
    assert alone.returncode == 1 and "needs the shared database" in alone.stderr, alone.stderr
    try:
        dead, daemon = _a_worker_that_dies_and_the_daemon(url, ws, config, processes)
        assert dead.wait(120) == -signal.SIGKILL, dead.stderr()[-3000:]
        twin = run_cli("worker", ws, "--config", config, env=_env(url, "intake"))
        assert twin.returncode == 1 and "already working" in twin.stderr, twin.stderr
        _wait(lambda: _done(url) == (3, 0), what="three jobs done", seen=lambda: _done(url))
        _stop(daemon)
    finally:
        processes.close()
    assert '"jobs of a machine that is gone handed over"' in daemon.stderr()
    _each_ran_once(ws, url, 3)


def test_recover_hands_a_dead_machines_jobs_over_and_refuses_a_live_one(
    tmp_path: Path, postgres: Any, server: FakeLLMServer
) -> None:
    url, ws, config, processes = _three_projects(tmp_path, postgres, server)
    try:
        # w1 stops itself as its first job's run starts: while it is stopped its lock holds, so
        # the daemon cannot hand that job over before the daemon is frozen in turn; then w1 dies.
        dead = processes.start(
            "worker", ws, "--config", config, env=_env(url, "w1", "during-run:stop")
        )
        _wait(lambda: _machines_alive(url, "w1"))
        daemon = processes.start("run", ws, "--config", config, env=_env(url, "intake"))
        _wait(lambda: _stopped(dead.pid) and sum(n for _s, n in _workflows(url)) >= 2)
        os.kill(daemon.pid, signal.SIGSTOP)
        os.kill(dead.pid, signal.SIGKILL)
        assert dead.wait(120) == -signal.SIGKILL, dead.stderr()[-3000:]
        shown = run_cli("status", ws, "--config", config, env=_env(url, "status"))
        assert "recover --executor w1" in shown.stdout, shown.stdout
        refused = run_cli(
            "recover", ws, "--config", config, "--executor", "intake", env=_env(url, "r")
        )
        assert refused.returncode == 1 and "still working" in refused.stderr, refused.stderr
        handed = run_cli(
            "recover", ws, "--config", config, "--executor", "w1", env=_env(url, "r"), timeout_s=120
        )
        assert handed.returncode == 0, handed.stderr[-3000:]
        assert "1 job(s) of w1 handed back" in handed.stdout, handed.stdout
        os.kill(daemon.pid, signal.SIGCONT)
        _wait(lambda: _done(url) == (3, 0), what="three jobs done", seen=lambda: _done(url))
        _stop(daemon)
    finally:
        processes.close()
    _each_ran_once(ws, url, 3)


def _each_ran_once(ws: Path, url: str, n: int) -> None:
    folders = _run_folders(ws)
    assert len(folders) == n and all(len(r) == 1 for r in folders.values()), folders
    assert len(_spend(ws)) == n, "each charged once"
    assert _workflows(url) == [("SUCCESS", n)], "one workflow each"


def _three_projects(
    tmp_path: Path, postgres: Any, server: FakeLLMServer
) -> tuple[str, Path, str, Processes]:
    url = postgres.new_database()
    ws = _workspace(tmp_path, 3)
    config = _config(tmp_path / "config.toml", server.base_url, portfolio_tokens=10_000_000)
    return url, ws, config, Processes(tmp_path / "proc")


def _a_worker_that_dies_and_the_daemon(
    url: str, ws: Path, config: str, processes: Processes
) -> tuple[Running, Running]:
    """w1, which dies in the middle of its first job and is never started again; the daemon."""
    dead = processes.start("worker", ws, "--config", config, env=_env(url, "w1", "after-outputs"))
    _wait(lambda: _machines_alive(url, "w1"))
    return dead, processes.start("run", ws, "--config", config, env=_env(url, "intake"))


def _cut_off(url: str) -> None:
    """Every session on the database but this one ends, as when a machine's network goes."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


WAIT_S = 300.0
"""How long a test waits on another process: at least five times what the slowest of these
waits takes on an idle 2-core machine (about a minute), so that other work on the machine
(a loaded CI host, ``tests/bench/load.py``) slows a test without failing it."""


def _wait(
    condition: Callable[[], bool],
    timeout_s: float = WAIT_S,
    *,
    what: str = "",
    seen: Callable[[], object] | None = None,
) -> None:
    """Poll ``condition`` until it holds; at the deadline, fail saying what was waited for and
    what was seen instead."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            saw = f"; saw: {seen()!r}"[-3000:] if seen is not None else ""
            raise AssertionError(f"not within {timeout_s:g} s: {what or condition}{saw}")
        time.sleep(0.2)


def _stopped(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP): ``T`` in its ``/proc`` state."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def _machines_alive(url: str, executor: str) -> bool:
    with Ledger.connect(url) as ledger:
        return any(m.executor == executor and m.alive for m in ledger.machines.all())


def test_a_worker_that_loses_the_database_stops_at_once_and_says_why(
    tmp_path: Path, postgres: Any, server: FakeLLMServer
) -> None:
    url, ws, config, processes = _three_projects(tmp_path, postgres, server)
    try:
        worker = processes.start("worker", ws, "--config", config, env=_env(url, "w1"))
        _wait(lambda: '"worker started"' in worker.stderr())
        _cut_off(url)  # as if the network went away
        assert worker.wait(60) == 75, worker.stderr()[-3000:]
    finally:
        processes.close()
    assert "worker lost the shared database; stopping so that no job runs twice" in (
        worker.stderr()
    )
    assert not _machines_alive(url, "w1"), "its lock went with its session"


def test_a_worker_whose_database_goes_away_while_it_starts_says_so_in_one_sentence(
    tmp_path: Path, postgres: Any, server: FakeLLMServer
) -> None:
    url, ws, config, processes = _three_projects(tmp_path, postgres, server)
    try:
        worker = processes.start("worker", ws, "--config", config, env=_env(url, "w1"))
        _wait(lambda: _machines_alive(url, "w1"))  # registered; DBOS still launching
        _cut_off(url)
        code = worker.wait(60)
    finally:
        processes.close()
    said = worker.stderr()
    assert code == 75 and "lost the shared database" in said, said[-3000:]
    assert "internal error" not in said, said[-3000:]
