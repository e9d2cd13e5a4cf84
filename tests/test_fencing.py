"""Fencing tokens and the shared spend, on a real PostgreSQL the tests start
(``tests/postgres.py``): a job attempt writes only while its token is current, and the
portfolio's spend is the ledger's, whatever ``spend.json`` on a shared drive says."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from portfolio_optimiser.daemon.ledger import Ledger
from portfolio_optimiser.daemon.ledger_fences import Fenced
from portfolio_optimiser.daemon.ledger_machines import _EXECUTOR_LOCKS as EXECUTOR_LOCKS
from portfolio_optimiser.daemon.spend_book import EARLIER, charge_run, spend_of
from portfolio_optimiser.daemon.workspace import Workspace
from portfolio_optimiser.pipeline.budget import read_spend

from . import test_scale_workers
from .fakes.llm_server import FakeLLMServer
from .test_scale_workers import (
    BILLED_PER_CALL,
    PROCESS_TEST_S,
    _calls,
    _done,
    _each_ran_once,
    _env,
    _machines_alive,
    _stop,
    _stopped,
    _three_projects,
    _wait,
)

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(PROCESS_TEST_S)]
server = test_scale_workers.server  # the loopback model server that bills every answer

JOB = "a" * 64
STAMP = "2026-12-05T12:00:00Z"


@pytest.mark.loadbearing
def test_a_handed_over_job_fences_off_the_machine_it_left(postgres: Any) -> None:
    url = postgres.new_database()
    with Ledger.connect(url) as w1, Ledger.connect(url) as w2, Ledger.connect(url) as daemon:
        token = w1.fences.take(JOB, "w1", held=None, assigned=True)
        with w1.fences.guard(JOB, "w1", token):
            w1.jobs.save(JOB, "ran", "{}", now=STAMP)
        assert w1.fences.take(JOB, "w1", held=token, assigned=False) == token  # its next step
        assert daemon.fences.hand_over(JOB) == token + 1
        with pytest.raises(Fenced), w1.fences.guard(JOB, "w1", token):
            w1.jobs.save(JOB, "published", "{}", now=STAMP)
        assert daemon.jobs.all() == ["{}"]  # its write refused: nothing of it landed
        with pytest.raises(Fenced):
            w1.fences.take(JOB, "w1", held=token, assigned=True)  # the stale attempt's next step
        with pytest.raises(Fenced):
            daemon.fences.take(JOB, "w3", held=None, assigned=False)  # the queue chose another
        taken = w2.fences.take(JOB, "w2", held=None, assigned=True)
        assert taken > token + 1
        with w2.fences.guard(JOB, "w2", taken):
            w2.jobs.save(JOB, "published", '{"by": "w2"}', now=STAMP)
        # w2 restarted under its name (the engine's recovery): the new process fences the old.
        again = daemon.fences.take(JOB, "w2", held=None, assigned=True)
        with pytest.raises(Fenced), w2.fences.guard(JOB, "w2", taken):
            pass
        with daemon.fences.guard(JOB, "w2", again):
            pass


def test_a_hand_over_waits_for_a_write_under_way_and_gives_up_on_a_frozen_one(
    postgres: Any,
) -> None:
    url = postgres.new_database()
    with Ledger.connect(url) as w1, Ledger.connect(url) as daemon:
        token = w1.fences.take(JOB, "w1", held=None, assigned=True)
        landed: list[float] = []

        def write(seconds: float, executor: str = "w1") -> None:
            with w1.fences.guard(JOB, executor, token):
                time.sleep(seconds)
                w1.jobs.save(JOB, "published", "{}", now=STAMP)
                landed.append(time.monotonic())

        writer = threading.Thread(target=write, args=(1.0,))
        writer.start()
        time.sleep(0.2)
        daemon.fences.hand_over(JOB)
        handed = time.monotonic()
        writer.join()
        assert landed and landed[0] <= handed  # the write landed before the token moved on
        token = w1.fences.take(JOB, "w1b", held=None, assigned=True)
        frozen = threading.Thread(target=write, args=(7.0, "w1b"))
        frozen.start()
        time.sleep(0.2)
        with pytest.raises(Exception, match="lock timeout"):
            daemon.fences.hand_over(JOB)  # not forever: the daemon looks again later
        frozen.join()


def test_on_a_shared_database_spend_is_the_ledgers_and_spend_json_is_published_from_it(
    tmp_path: Path, postgres: Any
) -> None:
    url = postgres.new_database()
    ws = Workspace(root=tmp_path / "ws", state=tmp_path / "ws" / ".state")
    ws.ensure()
    before = {
        "schema_version": 1,
        "spent_tokens": 130,
        "runs": [{"run_id": "old/1", "project_id": "old", "tokens": 100, "budget_stop": None}],
        "stamp": "2026-12-01T00:00:00Z",
    }
    ws.spend_file.write_text(json.dumps(before), "utf-8")
    with Ledger.connect(url) as ledger:
        assert spend_of(ws, ledger).spent_tokens == 130  # nothing charged through it yet

        def charge(run: str, tokens: int) -> None:
            charge_run(
                ws, ledger, run_id=run, project_id=run.split("/")[0], tokens=tokens,
                budget_stop=None, stamp=STAMP, guard=_no_fence, fault=lambda _point: None,
            )  # fmt: skip

        charge("p/1", 40)
        charge("p/1", 40)  # once
        published = read_spend(ws.spend_file)
        assert [r.run_id for r in published.runs] == ["old/1", EARLIER, "p/1"]
        assert published.spent_tokens == 170
        # A stale copy of the file (a client's cache) changes no figure a decision reads.
        ws.spend_file.write_text(json.dumps(before), "utf-8")
        assert spend_of(ws, ledger).spent_tokens == 170
        charge("q/1", 5)
        assert read_spend(ws.spend_file).spent_tokens == 175


def _no_fence() -> Any:
    import contextlib

    return contextlib.nullcontext()


@pytest.mark.loadbearing
def test_a_worker_frozen_mid_job_and_handed_over_writes_nothing_when_it_comes_back(
    tmp_path: Path, postgres: Any, server: FakeLLMServer
) -> None:
    """w1 freezes (SIGSTOP) as it starts its first job's run; its lock's session ends, as the
    server ends a cut-off machine's, while the connection its job writes through is left alive
    (as if it had reconnected): only the token can stop it. The daemon hands the job over and
    runs it; w1, resumed, writes nothing, and the charges are what the model server billed."""
    url, ws, config, processes = _three_projects(tmp_path, postgres, server)
    try:
        # Its next heartbeat far off: the window a cut-off machine has before it learns of it.
        env = _env(url, "w1", "during-run:stop") | {"PORTFOLIO_OPTIMISER_TEST_HEARTBEAT_S": "600"}
        frozen = processes.start("worker", ws, "--config", config, env=env)
        _wait(lambda: _machines_alive(url, "w1"))
        daemon = processes.start("run", ws, "--config", config, env=_env(url, "intake"))
        _wait(lambda: _stopped(frozen.pid))
        _end_lock_session(url, "w1")
        _wait(
            lambda: _done(url) == (3, 0),
            what="three jobs done",
            seen=lambda: (_done(url), frozen.stderr()[-1500:], daemon.stderr()[-3000:]),
        )
        calls = _calls(server)
        staged = sorted(p.name for p in (ws / ".state" / "staged").glob("*/*"))
        os.kill(frozen.pid, signal.SIGCONT)
        _wait(
            lambda: "this machine's attempt stopped" in frozen.stderr(),
            what="the frozen worker, let go again, to say its attempt stopped",
            seen=lambda: (frozen.stderr()[-2000:], daemon.stderr()[-3000:]),
        )
        time.sleep(1)  # anything it would still do after its refusal
        _stop(daemon, frozen)
    finally:
        processes.close()
    assert '"jobs of a machine that is gone handed over"' in daemon.stderr()
    assert _calls(server) == calls, "the frozen worker called no model once it came back"
    assert sorted(p.name for p in (ws / ".state" / "staged").glob("*/*")) == staged
    _each_ran_once(ws, url, 3)
    with Ledger.connect(url) as ledger:
        charged = sum(ledger.budget.charged_tokens(j) for j in _identities(ledger))
    assert charged == _calls(server) * BILLED_PER_CALL, "the charges are what was billed"


def _end_lock_session(url: str, executor: str) -> None:
    """The session holding ``executor``'s lock ends (its other sessions are left)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        ended = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'"
            " AND granted AND classid = %s::oid AND objsubid = 2"
            " AND objid = (hashtext(%s)::bigint & 4294967295)::oid",
            (EXECUTOR_LOCKS, executor),
        ).fetchall()
    assert ended == [(True,)], ended


def _identities(ledger: Ledger) -> list[str]:
    return [json.loads(state)["identity"] for state in ledger.jobs.all()]
