"""Jobs per second when 1, 2 and 4 processes take bundle jobs from the queue they share.

    uv run python -m tests.bench.bench_workers [--quick]

A real PostgreSQL (``tests/postgres.py``), a loopback model that takes 200 ms per answer, and
the CLI's own processes: the daemon (which runs jobs too, so "1" is the daemon alone) and 1 or 3
``worker`` processes beside it. Each is started and registered before the projects are moved
into the inbox at once; the clock runs from that move to the last job settled, so it counts
intake (the quiet period, the claims) as a user waits for it.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import tempfile
import time
from pathlib import Path

from portfolio_optimiser.daemon.ledger import Ledger
from tests.daemon_helpers import Processes, config_with_local_server, make_workspace
from tests.fakes.llm_server import FakeLLMServer
from tests.postgres import PostgresServer, start_postgres
from tests.synthetic import tiny_project

from ._table import Row, report

ANSWER_S = 0.2
SPEEDUP_AT_2 = 1.8


def _config(path: Path, base_url: str) -> str:
    config_with_local_server(path, base_url)
    text = path.read_text("utf-8")
    for key, value in (("run_tokens", 60_000), ("portfolio_tokens", 100_000_000)):
        text = re.sub(rf"(?m)^{key} = \d+", f"{key} = {value}", text)
    path.write_text(text, "utf-8")
    return str(path)


def _env(url: str, executor: str) -> dict[str, str]:
    return {
        "PORTFOLIO_OPTIMISER_DATABASE_URL": url,
        "PORTFOLIO_OPTIMISER_EXECUTOR": executor,
        "PORTFOLIO_OPTIMISER_REASONING_MODE": "offline",  # the local advisor is asked
    }


def jobs_per_second(pg: PostgresServer, processes_n: int, jobs: int) -> tuple[float, int]:
    """Jobs settled per second, and the model calls they made."""
    url = pg.new_database()
    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeLLMServer(
            mode="slow", slow_s=ANSWER_S, content="The figures hold.\nVERDICT: APPROVE"
        ) as server,
    ):
        root = Path(tmp)
        ws = make_workspace(root / "ws")
        staging = root / "ws" / "staging"
        for i in range(jobs):
            tiny_project(staging / f"tiny-{i:03d}", i)
        config = _config(root / "config.toml", server.base_url)
        processes = Processes(root / "proc")
        try:
            started = [processes.start("run", ws, "--config", config, env=_env(url, "intake"))]
            started += [
                processes.start("worker", ws, "--config", config, env=_env(url, f"w{n}"))
                for n in range(1, processes_n)
            ]
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                with Ledger.connect(url) as ledger:
                    if sum(m.alive for m in ledger.machines.all()) == processes_n:
                        break
                time.sleep(0.2)
            else:
                raise RuntimeError("the processes did not all start within 120 s")
            time.sleep(2.0)  # each one's DBOS launched and polling its queue
            begun = time.perf_counter()
            for project in sorted(staging.iterdir()):
                project.rename(ws / "inbox" / "projects" / project.name)
            while True:
                with Ledger.connect(url) as ledger:
                    if len(ledger.items("done")) == jobs:
                        break
                for running in started:
                    if running.popen.poll() is not None:
                        raise RuntimeError(running.stderr()[-2000:])
                time.sleep(0.05)
            elapsed = time.perf_counter() - begun
        finally:
            processes.close()
        calls = len([r for r in server.requests if r.path.endswith("/chat/completions")])
    return jobs / elapsed, calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="fewer jobs")
    args = parser.parse_args(argv)
    jobs = 16 if args.quick else 40
    begun = time.perf_counter()
    with contextlib.contextmanager(start_postgres)() as pg:
        rates = {n: jobs_per_second(pg, n, jobs) for n in (1, 2, 4)}
    one = rates[1][0]
    rows = [
        Row(
            f"jobs per second, {n} process(es) taking jobs ({jobs} jobs, "
            f"{rates[n][1] // jobs} model calls each at {ANSWER_S * 1000:.0f} ms)",
            f"≥ {SPEEDUP_AT_2}× one at 2" if n == 2 else "reported",
            f"{rates[n][0]:.2f} jobs/s ({rates[n][0] / one:.2f}× one)",
            rates[n][0] >= SPEEDUP_AT_2 * one if n == 2 else True,
        )
        for n in (1, 2, 4)
    ]
    return report(rows, "quick" if args.quick else "full", time.perf_counter() - begun)


if __name__ == "__main__":
    raise SystemExit(main())
