"""What the durable workflow (DBOS Transact on SQLite) costs a bundle job, on the offline path.

    uv run python -m tests.bench.bench_durable [--quick]

Rows:
- per job: the wall time of ``Engine.submit`` and ``Engine.result`` minus the time spent inside the stage functions
  themselves (``job.STAGES``, timed by wrapping them), i.e. what DBOS's workflow and step
  records, and the ledger's checkpoint after each stage, add to one job; shown beside the
  job's whole time from claim to settled;
- start-up: importing ``dbos`` in a fresh interpreter, launching it on a new system database,
  stopping it (the daemon stops it at its first idle tick and launches it for the next job);
- memory: the RSS a fresh interpreter gains by importing ``dbos``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from portfolio_optimiser.config import load_config
from portfolio_optimiser.daemon import durable, job
from portfolio_optimiser.daemon.desk import Started
from portfolio_optimiser.daemon.ledger import Ledger
from portfolio_optimiser.daemon.processor import Processor
from portfolio_optimiser.daemon.workspace import Workspace

from ._table import Row, report
from .bench_daemon import EventLog, stage_example

PER_JOB_TARGET_MS = 50.0
"""An offline run takes a few hundred milliseconds; the workflow may add a tenth of that."""


def _timed_stages(spent: list[float]) -> None:
    for stage, step in list(job.STAGES.items()):

        def timed(j: Any, ctx: Any, _step: Callable[..., Any] = step) -> Any:
            started = time.perf_counter()
            try:
                return _step(j, ctx)
            finally:
                spent.append(time.perf_counter() - started)

        job.STAGES[stage] = timed


def per_job(n: int) -> Row:
    spent: list[float] = []
    _timed_stages(spent)
    engine_time: list[float] = []
    real_submit, real_result = durable.Engine.submit, durable.Engine.result

    def timed_submit(self: durable.Engine, j: Any) -> Any:
        started = time.perf_counter()
        try:
            return real_submit(self, j)
        finally:
            engine_time.append(time.perf_counter() - started)

    def timed_result(self: durable.Engine, submitted: Any, *, stop: Any) -> Any:
        started = time.perf_counter()
        try:
            return real_result(self, submitted, stop=stop)
        finally:
            engine_time[-1] += time.perf_counter() - started

    durable.Engine.submit = timed_submit  # type: ignore[method-assign]
    durable.Engine.result = timed_result  # type: ignore[method-assign]
    overheads, wholes = [], []
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace(root=Path(tmp) / "ws", state=Path(tmp) / "ws" / ".state")
        ws.ensure()
        config = load_config(None)
        with Ledger.open(ws.ledger_file) as ledger:
            processor = Processor(ws, config, ledger, time.time, EventLog())
            processor.desk.engine().serve()  # launched once, as for a burst of bundles
            for i in range(n):
                entry = stage_example(ws.inbox_projects / f"b{i}", f"b{i}")
                before = len(spent)
                started = time.perf_counter()
                taken = processor.desk.take(entry)
                assert isinstance(taken, Started), taken
                result = processor.desk.finish(taken)
                wholes.append(time.perf_counter() - started)
                assert result.state == "done", result
                overheads.append(engine_time[-1] - sum(spent[before:]))
            durable.stop_engine()
    ms = sorted(o * 1000 for o in overheads)
    p95 = ms[min(len(ms) - 1, int(0.95 * len(ms)))]
    whole = statistics.median(wholes) * 1000
    return Row(
        f"DBOS workflow and checkpoints per bundle job (offline, in-process, {n} jobs)",
        f"p95 ≤ {PER_JOB_TARGET_MS:.0f} ms",
        f"p50 {statistics.median(ms):.1f} ms, p95 {p95:.1f} ms; a whole job (claim → settled) "
        f"p50 {whole:.0f} ms",
        p95 <= PER_JOB_TARGET_MS,
    )


_STARTUP = """
import time, tempfile
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
rss0 = rss()
t0 = time.perf_counter()
from dbos import DBOS
t1 = time.perf_counter()
rss1 = rss()
d = tempfile.mkdtemp()
DBOS(config={"name": "portfolio-optimiser", "system_database_url": f"sqlite:///{d}/dbos.sqlite",
             "executor_id": "local", "log_level": "WARNING",
             "notification_listener_polling_interval_sec": 0.1})
t2 = time.perf_counter(); DBOS.launch(); t3 = time.perf_counter()
DBOS.destroy(workflow_completion_timeout_sec=0); t4 = time.perf_counter()
DBOS(config={"name": "portfolio-optimiser", "system_database_url": f"sqlite:///{d}/dbos.sqlite",
             "executor_id": "local", "log_level": "WARNING",
             "notification_listener_polling_interval_sec": 0.1})
t5 = time.perf_counter(); DBOS.launch(); t6 = time.perf_counter()
DBOS.destroy(workflow_completion_timeout_sec=0)
print(t1 - t0, t3 - t2, t4 - t3, t6 - t5, (rss1 - rss0) / 1024)
"""


def startup(repeats: int) -> list[Row]:
    samples = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", _STARTUP], capture_output=True, text=True, check=True
        ).stdout.split()
        samples.append([float(x) for x in out])
    imp, first, stop, again, rss = (statistics.median(col) for col in zip(*samples, strict=True))
    return [
        Row(
            "DBOS start-up (fresh interpreter; paid once, at the first job)",
            "reported",
            f"import {imp * 1000:.0f} ms; launch on a new SQLite system database "
            f"{first * 1000:.0f} ms; launch again {again * 1000:.0f} ms; stop {stop * 1000:.0f} ms",
            True,
        ),
        Row(
            "RSS added by importing DBOS (SQLAlchemy, psycopg)",
            "the daemon stays ≤ 120 MB (bench_daemon)",
            f"{rss:.0f} MB",
            True,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer jobs and start-ups")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows = [per_job(10 if args.quick else 40), *startup(2 if args.quick else 5)]
    return report(rows, "quick" if args.quick else "full", time.perf_counter() - started)


if __name__ == "__main__":
    raise SystemExit(main())
