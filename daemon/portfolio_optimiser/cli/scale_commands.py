"""The commands of a portfolio many machines share: ``worker`` and ``recover``."""

from __future__ import annotations

import argparse
import dataclasses
import signal
import threading
from collections import Counter
from types import FrameType
from typing import Any

from .commands import resolve_config, say

__all__ = ["recover", "say_shared", "shared_view", "worker"]


def worker(args: argparse.Namespace) -> int:
    from portfolio_optimiser.daemon.logging import configure_logging, get_logger
    from portfolio_optimiser.daemon.worker import serve_worker
    from portfolio_optimiser.daemon.workspace import Workspace

    config = resolve_config(args)
    configure_logging()
    stop = threading.Event()

    def on_stop(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    return serve_worker(
        Workspace.at(args.workspace),
        config,
        log=get_logger("portfolio_optimiser"),
        stop=stop,
        executor=args.executor,
    )


def recover(args: argparse.Namespace) -> int:
    from portfolio_optimiser.daemon.logging import configure_logging, get_logger
    from portfolio_optimiser.daemon.worker import recover_executor

    config = resolve_config(args)
    configure_logging()
    handed = recover_executor(config, args.executor, log=get_logger("portfolio_optimiser"))
    if handed:
        say(
            f"{handed} job(s) of {args.executor} handed back to the queue; the live workers "
            "finish each from the stage it reached"
        )
    else:
        say(f"{args.executor} had no job under way; nothing to hand over")
    return 0


def shared_view(database_url: str, ledger: Any) -> dict[str, Any]:
    """For ``status`` on a shared database: every daemon and worker that has worked on it
    (alive: it holds its executor's lock now), the jobs queued for a free worker, and the jobs
    under way on each."""
    from portfolio_optimiser.daemon.engine import shared_queue

    listed = shared_queue(database_url)
    under_way = Counter(executor for status, executor in listed if status == "PENDING")
    machines = [
        {**dataclasses.asdict(m), "jobs_under_way": under_way.get(m.executor, 0)}
        for m in ledger.machines.all()
    ]
    return {
        "machines": machines,
        "queue_depth": sum(1 for status, _executor in listed if status == "ENQUEUED"),
    }


def say_shared(view: dict[str, Any]) -> None:
    alive = [m for m in view["machines"] if m["alive"]]
    say(f"machines: {len(alive)} working, {view['queue_depth']} job(s) queued for a free worker")
    for m in view["machines"]:
        jobs = m["jobs_under_way"]
        if m["alive"]:
            state = f"working, {jobs} job(s) under way"
        else:
            state = f"gone since {m['seen']}"
            if jobs:
                state += (
                    f", {jobs} job(s) waiting for it: "
                    f"`portfolio-optimiser recover --executor {m['executor']}` hands them over"
                )
        say(f"  {m['executor']} ({m['role']} on {m['host']}, pid {m['pid']}): {state}")
