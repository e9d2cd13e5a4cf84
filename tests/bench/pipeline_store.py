"""The per-call row again, against a reasoning store that holds many earlier runs' records.

A daemon's store grows by about 24 records a run and is never pruned: what a call costs must not
grow with it. The store is seeded with copies of one run's records, each copy under a task and
ids of its own and a day earlier (so the runs measured come after it, as they would), read once
(the daemon's first read after a start, reported apart), then the same warm runs as the per-call
row are timed against it, after the daemon's idle turn (``give_back_memory``) that follows the
first of them.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

from portfolio_optimiser.daemon.memory import give_back_memory
from portfolio_optimiser.learning import VerdictStore
from portfolio_optimiser.pipeline.run import ReasoningSession, run_project
from portfolio_optimiser.reasoning.store import Store
from tests.bench._table import Row

if TYPE_CHECKING:
    from tests.bench.bench_pipeline import Models

__all__ = ["measure_store_size", "seed_store"]

_ID: Final = re.compile(r'"([a-z]{2})-([0-9a-f]{10})"')


def seed_store(state: Path, template: Path, runs: int, earlier: tuple[str, str]) -> int:
    """``runs`` copies of the task folder ``template`` in the store at ``state``, with its log;
    each record's date ``earlier[0]`` written ``earlier[1]``. Returns the records written."""
    reasoning = state / "reasoning"
    texts = [f.read_text("utf-8") for f in sorted(template.glob("*.json"))]
    logged = []
    for copy in range(runs):
        task = f"earlier-{copy:06d}--run"
        folder = reasoning / task
        folder.mkdir(parents=True)
        for text in texts:
            text = text.replace(template.name, task).replace(*earlier)
            text = _ID.sub(functools.partial(_renamed, copy=copy), text)
            record = json.loads(text)
            name = f"{record['seq']:04d}-{record['id']}.json"
            (folder / name).write_text(text, "utf-8")
            logged.append(f"{task}/{name}")
    (reasoning / "records.log").write_text("".join(f"{n}\n" for n in logged), "utf-8")
    return len(logged)


def _spaced(number: int) -> str:
    return f"{number:,}".replace(",", " ")


def _renamed(match: re.Match[str], copy: int) -> str:
    digest = hashlib.blake2s(f"{match.group(2)}:{copy}".encode(), digest_size=5).hexdigest()
    return f'"{match.group(1)}-{digest}"'


async def measure_store_size(
    models: Models, bundle: Path, work: Path, *, runs: int, warm: int
) -> Row:
    from tests.bench.bench_pipeline import BUDGET, NOW, SETTINGS, write_project_bundle

    async def run(store: Store, run_id: str, project: Path = bundle) -> None:
        await run_project(
            project,
            verdicts=VerdictStore(),
            budget=BUDGET,
            settings=SETTINGS,
            reasoning=ReasoningSession(store, models.admission()),
            run_id=run_id,
        )

    collected: list[float] = []

    def timed_collection(phase: str, info: dict[str, int]) -> None:
        if info["generation"] == 2:
            collected.append(time.perf_counter() * (-1 if phase == "start" else 1))

    async def per_call(store: Store, name: str) -> tuple[float, float]:
        """Own time per call of ``warm`` runs after one paid for apart, and calls a run, on one
        store object held across them as the daemon holds its own. Each run is a project of its
        own: a project run again on the same store reuses its standing conclusions and asks no
        checker, and a call would then carry a whole run's fixed costs."""
        own, calls = 0.0, 0
        for i in range(warm + 1):
            project = write_project_bundle(work / f"{name}-{i}", f"bench-{name}-{i}")
            requests, served = models.requests, models.served_s
            started = time.perf_counter()
            await run(store, f"{name}-{i}", project)
            if i:
                own += time.perf_counter() - started - (models.served_s - served)
                calls += models.requests - requests
            else:  # the daemon's idle turn after its first run (and the store's first read)
                give_back_memory(thorough=True)
                collected.clear()
        return own / max(calls, 1) * 1000, calls / warm

    await run(Store(work / "store-template"), "template")
    [template] = (work / "store-template" / "reasoning").glob("*--template")
    day = NOW.date().isoformat()
    earlier = NOW.date().replace(day=NOW.day - 1).isoformat()
    records = seed_store(work / "store-large", template, runs, (f'"{day}T', f'"{earlier}T'))
    empty_ms, empty_calls = await per_call(Store(work / "store-empty"), "empty")
    large = Store(work / "store-large")
    started = time.perf_counter()
    large.load()
    first_read = time.perf_counter() - started
    gc.callbacks.append(timed_collection)
    try:
        large_ms, large_calls = await per_call(large, "large")
    finally:
        gc.callbacks.remove(timed_collection)
    # A full collection walks every record read: the measured runs' share of them, as it falls.
    full = len(collected) // 2
    full_ms = sum(collected[: full * 2]) * 1000
    return Row(
        f"our own time per model call, against a reasoning store of {_spaced(records)} records "
        f"({_spaced(runs)} earlier runs)",
        "reported (beside an empty store held the same way)",
        f"{large_ms:.1f} ms a call, {empty_ms:.1f} ms against the empty store ({large_calls:g} "
        f"and {empty_calls:g} calls a run; mean of {warm} warm run(s) each, a project of its "
        f"own each, one store object across them); {full} full collection(s) of the garbage "
        f"collector in the large store's measured runs, {full_ms:.0f} ms; its first read "
        f"{first_read:.1f} s",
        True,
    )
