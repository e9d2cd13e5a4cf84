"""The daemon on a shared PostgreSQL (``[scale] database_url``): the ledger and the bundle jobs'
workflows live in the database, not in the state directory, and a crash mid-run is finished from
there. Real PostgreSQL, started by the tests (``tests/postgres.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from portfolio_optimiser.daemon.ledger import Ledger

from .daemon_helpers import (
    copy_example,
    die_at,
    project_in_inbox,
    published_runs,
    spend_runs,
)

pytestmark = pytest.mark.postgres

PROJECT = "lillevik-school"


def test_once_keeps_the_ledger_and_the_job_in_postgresql(tmp_path: Path, postgres: Any) -> None:
    import psycopg

    url = postgres.new_database()
    ws, processes = project_in_inbox(tmp_path, PROJECT)
    try:
        env = {"PORTFOLIO_OPTIMISER_DATABASE_URL": url}
        first = processes.start("once", ws, env=env).completed(120)
        assert first.returncode == 0, first.stderr[-2000:]
        copy_example(PROJECT, ws / "inbox" / "projects" / "again")
        second = processes.start("once", ws, env=env).completed(120)
        assert second.returncode == 0, second.stderr[-2000:]
    finally:
        processes.close()
    assert len(published_runs(ws, PROJECT)) == 1
    assert len(spend_runs(ws, PROJECT)) == 1
    assert not (ws / ".state" / "ledger.sqlite").exists(), "the ledger is the shared one"
    assert not (ws / ".state" / "dbos.sqlite").exists(), "and so are the workflows"
    with Ledger.connect(url) as ledger:
        assert sorted(item.state for item in ledger.items("done")) == ["done"]
        assert ledger.jobs.all(unfinished=True) == []
        (job,) = [j for j in ledger.jobs.all() if '"stage": "settled"' in j]
    with psycopg.connect(url) as db:
        statuses = db.execute("SELECT status FROM dbos.workflow_status").fetchall()
    assert statuses == [("SUCCESS",)], "one workflow for one identity; the duplicate started none"
    assert (ws / "outbox" / "duplicates" / "again.duplicate.txt").is_file(), job


def test_a_run_killed_mid_job_is_finished_from_postgresql(tmp_path: Path, postgres: Any) -> None:
    url = postgres.new_database()
    ws, processes = project_in_inbox(tmp_path, PROJECT)
    env = {"PORTFOLIO_OPTIMISER_DATABASE_URL": url}
    try:
        die_at(processes, ws, "after-outputs", env=env, timeout_s=120)
        again = processes.start("once", ws, env=env).completed(120)
    finally:
        processes.close()
    assert again.returncode == 0, again.stderr[-2000:]
    assert '"job resumed"' in again.stderr and '"stage": "ran"' in again.stderr, again.stderr
    assert len(published_runs(ws, PROJECT)) == 1
    assert len(spend_runs(ws, PROJECT)) == 1, "charged once"
    with Ledger.connect(url) as ledger:
        assert [item.state for item in ledger.items()] == ["done"]
        assert ledger.jobs.all(unfinished=True) == []
    assert list((ws / ".state" / "claimed").iterdir()) == []


def test_a_second_daemon_on_the_same_shared_database_is_refused(postgres: Any) -> None:
    from portfolio_optimiser.daemon.ledger import LedgerError

    url = postgres.new_database()
    now = "2026-12-06T12:00:00Z"
    with Ledger.connect(url) as first, Ledger.connect(url) as second:
        first.machines.hold_intake("/mnt/portfolio", now=now)
        with pytest.raises(LedgerError, match="another daemon already takes in this workspace"):
            second.machines.hold_intake("/mnt/portfolio", now=now)
        # Another workspace on the same database is told so, not that its own inbox is taken.
        with pytest.raises(LedgerError) as other:
            second.machines.hold_intake("/mnt/other", now=now)
        assert "is the ledger of the workspace /mnt/portfolio" in str(other.value)
        assert "this workspace (/mnt/other) needs a database of its own" in str(other.value)
    with Ledger.connect(url) as after:
        after.machines.hold_intake("/mnt/portfolio", now=now)  # the first one's ended with it


def test_status_without_the_database_setting_names_the_shared_database(
    tmp_path: Path, postgres: Any
) -> None:
    # Found by a newcomer: without the setting, status read an empty ledger beside the shared
    # one and said "awaiting a verdict: nothing" while six candidates waited.
    url = postgres.new_database()
    ws, processes = project_in_inbox(tmp_path, PROJECT)
    env = {"PORTFOLIO_OPTIMISER_DATABASE_URL": url}
    try:
        assert processes.start("once", ws, env=env).completed(120).returncode == 0
        shared = processes.start("status", ws, env=env).completed(60)
        alone = processes.start("status", ws).completed(60)
        once = processes.start("once", ws).completed(60)
    finally:
        processes.close()
    assert shared.returncode == 0 and "awaiting a verdict: 6 candidate(s)" in shared.stdout
    for refused in (alone, once):
        assert refused.returncode == 78, refused.stdout + refused.stderr
        assert "keeps its ledger in the shared database postgresql://" in refused.stderr
        assert "set PORTFOLIO_OPTIMISER_DATABASE_URL" in refused.stderr
        assert "nothing" not in refused.stdout
    assert not (ws / ".state" / "ledger.sqlite").exists(), "no ledger beside the shared one"


@pytest.mark.loadbearing
def test_spend_json_is_changed_by_one_job_at_a_time_on_every_machine(
    tmp_path: Path, postgres: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading
    import time

    from portfolio_optimiser.daemon import job as stages
    from portfolio_optimiser.daemon import spend_book
    from portfolio_optimiser.daemon.job import Job, JobContext, RunSummary, Stage
    from portfolio_optimiser.daemon.workspace import Workspace
    from portfolio_optimiser.pipeline.budget import read_spend

    url = postgres.new_database()
    ws = Workspace(root=tmp_path / "ws", state=tmp_path / "ws" / ".state")
    ws.ensure()
    real_write = spend_book.write_spend

    def slow_write(*args: Any, **kwargs: Any) -> None:
        time.sleep(0.05)  # between the read and the write: where another machine would step in
        real_write(*args, **kwargs)

    monkeypatch.setattr(spend_book, "write_spend", slow_write)

    def charge(i: int) -> None:
        with Ledger.connect(url) as ledger:  # a machine of its own
            context = JobContext(
                ws, ledger, lambda: None, lambda: "2026-12-02T00:00:00Z", None, lambda _: None
            )  # type: ignore[arg-type]
            summary = RunSummary(f"p-{i}", 10 + i, None, ())
            job = Job(f"{i:064d}", f"p-{i}", "", "", "2026-12-02T00:00:00Z", False)
            stages.charged(job.at(Stage.PUBLISHED, summary), context)

    machines = [threading.Thread(target=charge, args=(i,)) for i in range(6)]
    for machine in machines:
        machine.start()
    for machine in machines:
        machine.join(60)
    spend = read_spend(ws.spend_file)
    assert sorted(run.project_id for run in spend.runs) == [f"p-{i}" for i in range(6)]
    assert spend.spent_tokens == sum(10 + i for i in range(6))


def test_the_readme_set_up_runs_and_a_role_without_rights_is_a_configuration_error(
    tmp_path: Path, postgres: Any
) -> None:
    import uuid

    import psycopg

    from .daemon_helpers import make_workspace

    tag = uuid.uuid4().hex[:8]
    owner, other = f"po_{tag}", f"other_{tag}"
    owned, shared = f"portfolio_{tag}", f"plain_{tag}"
    with psycopg.connect(postgres.url(), autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {owner} LOGIN")
        admin.execute(f"CREATE ROLE {other} LOGIN")
        admin.execute(f"CREATE DATABASE {owned} OWNER {owner}")  # createdb -O po portfolio
        admin.execute(f"CREATE DATABASE {shared}")  # createdb portfolio: owned by the admin
    base = f"postgresql://{{}}@127.0.0.1:{postgres.port}/{{}}"
    ws, processes = project_in_inbox(tmp_path, PROJECT)
    refused_ws = make_workspace(tmp_path / "refused")
    try:
        env = {"PORTFOLIO_OPTIMISER_DATABASE_URL": base.format(owner, owned)}
        ran = processes.start("once", ws, env=env).completed(120)
        status = processes.start("status", ws, env=env).completed(60)
        env = {"PORTFOLIO_OPTIMISER_DATABASE_URL": base.format(other, shared)}
        refused = processes.start("once", refused_ws, env=env).completed(60)
    finally:
        processes.close()
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert len(published_runs(ws, PROJECT)) == 1
    assert f"PostgreSQL postgresql://127.0.0.1:{postgres.port}/{owned}" in status.stdout
    assert refused.returncode == 78, refused.stderr[-2000:]
    said = [ln for ln in refused.stderr.splitlines() if ln.strip()]
    assert len(said) == 1, said
    assert f"the database {shared} refused the role {other}" in said[0]
    assert f"createdb -O {other} {shared}" in said[0] and "internal error" not in said[0]
