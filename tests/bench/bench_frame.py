"""The uncertainty frame's cost (issue 20): a large estimate simulated with correlation, each of
fifty measures' effect on P50 and P85 and the set together; and what the frame adds to a run of
each example project.

A run computes its project's frame (``pipeline.run``); the second measure times the frame alone
and the whole run, and compares the frame with the rest of the run.

    uv run python -m tests.bench.bench_frame            # three timings of each, the median shown
    uv run python -m tests.bench.bench_frame --quick    # one of each

The large estimate is 2 000 elements, PERT or triangular, with most likely figures from 50 000 to
5 000 000 NOK and skewed ranges, in 20 correlation groups (coefficients 0.3 to 1.0: the range a
Monte Carlo study of seven projects measured) with a third of the elements in none; each of the 50
measures takes 5 to 30 % of one to four elements. Its figures are seeded: every timing computes
the same ones.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from portfolio_optimiser.context.frame import frame_of
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.uncertainty import STABLE_TO, Effect, Element, simulate
from portfolio_optimiser.learning import VerdictStore
from portfolio_optimiser.pipeline.run import run_project
from portfolio_optimiser.reasoning.modes import Mode
from tests.bench._table import Row, report
from tests.conftest import EXAMPLES
from tests.pipeline_helpers import CHECKER, PROPOSER, budget, factory, session, settings

ELEMENTS = 2_000
GROUPS = 20
MEASURES = 50
LARGE_TARGET_S = 2.0
RUN_SHARE_TARGET = 0.20


def large_estimate(seed: int = 20) -> tuple[list[Element], dict[str, float], list[Effect]]:
    rng = np.random.default_rng(seed)
    elements = []
    for i in range(ELEMENTS):
        likely = float(rng.uniform(50_000, 5_000_000))
        low, high = likely * float(rng.uniform(0.7, 0.95)), likely * float(rng.uniform(1.05, 2.0))
        elements.append(
            Element(
                f"e{i:04d}",
                low,
                likely,
                high,
                distribution="triangular" if i % 4 == 0 else "pert",
                group=f"g{i % GROUPS:02d}" if i % 3 else None,
            )
        )
    correlation = {f"g{k:02d}": round(0.3 + 0.7 * k / (GROUPS - 1), 3) for k in range(GROUPS)}
    effects = []
    for m in range(MEASURES):
        chosen = rng.choice(ELEMENTS, size=int(rng.integers(1, 5)), replace=False)
        effects.append(
            Effect(f"m{m:02d}", {f"e{int(i):04d}": float(rng.uniform(0.05, 0.3)) for i in chosen})
        )
    return elements, correlation, effects


def _timed(work: Callable[[], object], times: int) -> list[float]:
    taken = []
    for _ in range(times):
        started = time.perf_counter()
        work()
        taken.append(time.perf_counter() - started)
    return taken


def measure_large(times: int) -> list[Row]:
    elements, correlation, effects = large_estimate()
    together = Effect("together", {k: v for e in effects for k, v in e.shares.items()})
    found = simulate(
        elements, correlation=correlation, effects=effects, together=together, seed=3459
    )
    taken = _timed(
        lambda: simulate(
            elements, correlation=correlation, effects=effects, together=together, seed=3459
        ),
        times,
    )
    median = statistics.median(taken)
    deltas = sorted(delta.p85 for delta in found.effects.values())
    return [
        Row(
            f"{ELEMENTS} elements in {GROUPS} correlation groups: P10–P90, the S-curve, the "
            f"contributors, ΔP50 and ΔP85 of {MEASURES} measures alone and together",
            f"≤ {LARGE_TARGET_S:g} s on 2 cores",
            f"{median:.2f} s (median of {times}: {', '.join(f'{t:.2f}' for t in taken)}); "
            f"{found.samples} samples; P50 {found.quantiles['p50'] / 1e6:,.1f} M, P85 "
            f"{found.quantiles['p85'] / 1e6:,.1f} M; ΔP85 from {deltas[0] / 1e3:,.0f} k to "
            f"{deltas[-1] / 1e3:,.0f} k, together {found.joint.p85 / 1e3 if found.joint else 0:,.0f} k",
            median <= LARGE_TARGET_S,
        ),
        Row(
            "P85's 95 % interval over the samples, as a share of it",
            f"≤ {STABLE_TO:.1%}",
            f"{found.stable_to:.3%}",
            found.stable_to <= STABLE_TO,
        ),
    ]


def measure_runs(times: int) -> list[Row]:
    """Each example project run locally (mode ci, as CI runs it), and its frame computed alone."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-frame-") as tmp:
        for bundle in sorted((EXAMPLES / "portfolio").iterdir()):
            project = load_ir_projections(bundle)
            reasoning = session(Path(tmp) / bundle.name, PROPOSER, CHECKER, mode=Mode.CI)

            def run(bundle: Path = bundle, reasoning: object = reasoning) -> object:
                return asyncio.run(
                    run_project(
                        bundle,
                        verdicts=VerdictStore(),
                        budget=budget(),
                        settings=settings(),
                        reasoning=reasoning,  # type: ignore[arg-type]
                        run_id=f"bench-{time.perf_counter_ns()}",
                        client_factory=factory({}),
                    )
                )

            run()  # imports and first use, apart
            whole = statistics.median(_timed(run, times))
            frame = statistics.median(
                _timed(
                    lambda project=project: frame_of(
                        project, [], accepted=frozenset(), rule=settings().frame
                    ),
                    times,
                )
            )
            # The run computes its frame: without it, the run would take the rest.
            share = frame / (whole - frame) if whole > frame else float("inf")
            rows.append(
                Row(
                    f"a run of {bundle.name}, with its frame against without it",
                    f"≤ +{RUN_SHARE_TARGET:.0%}",
                    f"+{share:.1%} ({frame * 1000:.1f} ms of frame in a {whole * 1000:.0f} ms "
                    "local run)",
                    share <= RUN_SHARE_TARGET,
                )
            )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="one timing of each")
    args = parser.parse_args(argv)
    times = 1 if args.quick else 3
    started = time.perf_counter()
    rows = [*measure_large(times), *measure_runs(times)]
    return report(rows, "quick" if args.quick else "full", time.perf_counter() - started)


if __name__ == "__main__":
    sys.exit(main())
