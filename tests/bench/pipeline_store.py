"""The per-call row again, against a reasoning store that holds many earlier runs' records.

A daemon's store grows by about 24 records a run and is never pruned: what a call costs must not
grow with it. The store is seeded with copies of one run's records, each copy under a task and
ids of its own and a day earlier (so the runs measured come after it, as they would), read once
(the daemon's first read after a start, reported apart), then the same warm runs as the per-call
row are timed against it.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

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
            text = _ID.sub(lambda m, c=copy: _renamed(m, c), text)
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
    from tests.bench.bench_pipeline import BUDGET, NOW, SETTINGS

    async def run(store: Store, run_id: str) -> None:
        await run_project(
            bundle,
            verdicts=VerdictStore(),
            budget=BUDGET,
            settings=SETTINGS,
            reasoning=ReasoningSession(store, models.admission()),
            run_id=run_id,
        )

    async def per_call(store: Store, name: str) -> float:
        """Own time per call of ``warm`` runs after one paid for apart, on one store object
        held across them as the daemon holds its own."""
        own, calls = 0.0, 0
        for i in range(warm + 1):
            requests, waited = models.requests, models.waited_s
            started = time.perf_counter()
            await run(store, f"{name}-{i}")
            if i:
                own += time.perf_counter() - started - (models.waited_s - waited)
                calls += models.requests - requests
        return own / max(calls, 1) * 1000

    await run(Store(work / "store-template"), "template")
    [template] = (work / "store-template" / "reasoning").glob("*--template")
    day = NOW.date().isoformat()
    earlier = NOW.date().replace(day=NOW.day - 1).isoformat()
    records = seed_store(work / "store-large", template, runs, (f'"{day}T', f'"{earlier}T'))
    empty_ms = await per_call(Store(work / "store-empty"), "empty")
    large = Store(work / "store-large")
    started = time.perf_counter()
    large.load()
    first_read = time.perf_counter() - started
    large_ms = await per_call(large, "large")
    return Row(
        f"our own time per model call, against a reasoning store of {_spaced(records)} records "
        f"({_spaced(runs)} earlier runs)",
        "reported (beside an empty store held the same way)",
        f"{large_ms:.1f} ms a call, {empty_ms:.1f} ms against the empty store (mean of {warm} "
        f"warm run(s) each, one store object across them); the large store's first read "
        f"{first_read:.1f} s",
        True,
    )
