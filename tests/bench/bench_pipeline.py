"""Benchmark of the pipeline against the issue's performance targets; prints a markdown table.

``uv run python -m tests.bench.bench_pipeline [--quick]`` exits 1 when a target is missed. Every
model is a loopback :class:`FakeLLMServer` in mode ``slow`` (a fixed delay, then a normal answer):
the proposer's server answers a valid proposal, the checker's server ``VERDICT: APPROVE``. Nothing
leaves 127.0.0.1 and no credential is read.

| measure | how |
|---|---|
| per call | one project run (1 proposer call, 1 checker call per candidate: 5 calls) with the model answering in 200 ms; our own time is wall time minus the time the fakes spent on the requests (their delay and their own work), per model call |
| calls per candidate | model calls over candidates in the same runs; the checker approves on its first turn |
| store size | the per-call row again against a reasoning store seeded with copies of a run's records (2 000 earlier runs; 200 in ``--quick``): one store object across the runs, each run a project of its own, timed after the first run and the daemon's idle turn; reported beside an empty store held the same way |
| floor | the last run's exchanges replayed with Agent Framework and the SDK alone (the proposer's ``Agent.run``, one ``ask_checker`` group chat per candidate, the same prompts, tools and models); reported: what a call costs before the product does anything |
| throughput | N copies of the bundle (distinct project ids) run at once (``run_project`` under a semaphore) at concurrency 4 and at 1, each pass on a fresh reasoning store |
| prompt size | ``render_context`` of a many-concept bundle against the text of every file concatenated |
| reuse | the same project run twice on one reasoning store; the second run's checker consultations and requests |

``--quick`` shrinks the throughput and reuse passes (6 projects, a 50 ms model) and runs one warm
overhead run instead of three; only the speedup target is relaxed (≥ 2×). The overhead measure
keeps its 200 ms model (at 50 ms the fixed per-run cost would be judged against a model four times
faster than the target assumes), and the prompt measure keeps its 500 concepts: it costs well under
a second, and below ~96 000 characters of bundle no render could meet 25 % because the render
budget alone is 24 000 characters.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from portfolio_optimiser.context.navigate import navigate_bundle
from portfolio_optimiser.context.render import render_context
from portfolio_optimiser.learning import VerdictStore
from portfolio_optimiser.pipeline.budget import Budget, estimate_tokens
from portfolio_optimiser.pipeline.outcome import RunResult
from portfolio_optimiser.pipeline.run import ReasoningSession, RunSettings, run_project
from portfolio_optimiser.reasoning.catalogue import Advisor, Catalogue, Presence
from portfolio_optimiser.reasoning.modes import Mode, ModeResolution
from portfolio_optimiser.reasoning.records import ConsultationInput
from portfolio_optimiser.reasoning.store import Admission, Store
from tests.bench._table import Row, report
from tests.bench.pipeline_store import measure_store_size
from tests.fakes.llm_server import FakeLLMServer

__all__ = ["FULL", "QUICK", "Row", "Scale", "main", "run_benchmark"]

CONTEXT_CHARS: Final = 24_000
MODEL_DELAY_S: Final = 0.2
"""The target's model: every answer takes 200 ms."""
PER_CALL_OF_FLOOR: Final = 1.1
"""Own time per model call against Agent Framework and the SDK alone on the same exchanges, in
the same run (DESIGN §12): the floor moves with the machine and the libraries, the ratio not."""
"""Our own time per model call: (wall − model time) / calls."""
CALLS_PER_CANDIDATE_TARGET: Final = 2.0
PROMPT_TARGET: Final = 0.25
CONCURRENCY: Final = 4
NOW: Final = datetime(2026, 11, 30, 12, tzinfo=UTC)

SETTINGS: Final = RunSettings(max_attempts=3, max_rounds=4, max_candidates=8, run_timeout_s=900)
BUDGET: Final = Budget(run_tokens=60_000, call_tokens=8_000, max_rounds=16)

# The small project: five cost lines (50 000 000 NOK) and two kuttliste items.
COST_LINES: Final = (
    ("02.1", "Grunnarbeid", 9_000_000),
    ("02.2", "Bæresystemer", 14_000_000),
    ("02.3", "Yttervegger", 12_000_000),
    ("02.4", "Innervegger", 7_000_000),
    ("02.5", "Dekker", 8_000_000),
)
MEASURES: Final = (
    # id, title, measure type, code, saving (NOK), quantity, unit price
    (
        "k-01",
        "Standard windows instead of custom sizes",
        "standardisation",
        "02.3",
        1_200_000,
        600,
        2_000,
    ),
    ("k-02", "Lighter interior partitions", "simplification", "02.4", 600_000, 400, 1_500),
)


def _cost_file(code: str) -> str:
    return f"cost/{code}.md"


def _measure_file(measure_id: str) -> str:
    return f"kuttliste/{measure_id}.md"


ADDITIONS: Final = (
    # title, measure type, code, saving (NOK): measures the kuttliste does not list
    ("Reuse excavated masses on site", "reuse", "02.1", 450_000),
    ("Hollow-core slabs instead of cast in place", "prefabrication", "02.5", 380_000),
)
PROPOSAL: Final = json.dumps(
    {
        "candidates": [
            {
                "title": title,
                "affected_codes": [code],
                "measure_type": kind,
                "claimed_saving_nok": saving,
                "rationale": f"a measure the kuttliste does not name, on {code}",
                "evidence": [_cost_file(code)],
            }
            for title, kind, code, saving in ADDITIONS
        ]
    }
)
"""The proposer's every answer: two additions to the kuttliste, which pass the validator."""
CANDIDATES: Final = len(MEASURES) + len(ADDITIONS)
APPROVAL: Final = "The figures were recomputed and nothing is counted twice.\nVERDICT: APPROVE"


@dataclass(frozen=True)
class Scale:
    name: str
    projects: int
    concepts: int
    delay_s: float
    """The model delay of the throughput and reuse passes."""
    overhead_runs: int
    speedup_target: float
    store_runs: int
    """Earlier runs in the large store of the store-size row."""


FULL: Final = Scale(
    "full",
    projects=20,
    concepts=500,
    delay_s=0.2,
    overhead_runs=3,
    speedup_target=3.2,
    store_runs=2000,
)
QUICK: Final = Scale(
    "quick",
    projects=6,
    concepts=500,
    delay_s=0.05,
    overhead_runs=1,
    speedup_target=2.0,
    store_runs=200,
)


class TimedFakeLLMServer(FakeLLMServer):
    """The loopback fake, in mode ``slow``, adding up the time it spent on each request: from its
    request line read to its answer written — its delay, and its own work around it.

    That work is the model server's, not the pipeline's: Python's ``http.server`` parsing the
    request, the fake decoding the prompt's JSON, recording it and encoding its answer, 0.8 ms
    of CPU a request on this machine (a real server parses in C++, in microseconds). Counted
    as the pipeline's, it was 0.8–1.2 ms of each call's own time.

    Its sockets are ``TCP_NODELAY``, as a real model server's are (uvicorn, llama.cpp): the fake
    writes headers and body in two sends, and with Nagle on, every request on a kept-alive
    connection stalls on the client's delayed ACK (about 40 ms on Linux loopback), which would be
    charged to the pipeline as overhead although it is the fake's.
    """

    def __init__(self, *, content: str, delay_s: float) -> None:
        super().__init__(mode="slow", content=content, slow_s=delay_s)
        self._served_lock = threading.Lock()
        self._served_s = 0.0
        handler: Any = self._httpd.RequestHandlerClass
        handler.disable_nagle_algorithm = True
        parse, post, server = handler.parse_request, handler.do_POST, self

        def parse_request(request: Any) -> bool:
            request.began = time.perf_counter()  # the request line is in: the model's turn
            return bool(parse(request))

        def do_post(request: Any) -> None:
            try:
                post(request)
            finally:
                server.served(time.perf_counter() - request.began)

        handler.parse_request, handler.do_POST = parse_request, do_post

    def __enter__(self) -> TimedFakeLLMServer:
        self.start()
        return self

    @property
    def served_s(self) -> float:
        with self._served_lock:
            return self._served_s

    def served(self, seconds: float) -> None:
        with self._served_lock:
            self._served_s += seconds


@dataclass
class Models:
    proposer: TimedFakeLLMServer
    checker: TimedFakeLLMServer

    def set_delay(self, seconds: float) -> None:
        self.proposer.slow_s = seconds
        self.checker.slow_s = seconds

    @property
    def requests(self) -> int:
        return len(self.proposer.requests) + len(self.checker.requests)

    @property
    def served_s(self) -> float:
        return self.proposer.served_s + self.checker.served_s

    def admission(self) -> Admission:
        def advisor(name: str, server: FakeLLMServer, capabilities: tuple[str, ...]) -> Advisor:
            return Advisor(
                id=f"bench-{name}",
                name=f"Loopback {name} (a fake, not a model)",
                adapter="openai-compatible",
                provider="self-hosted",
                model="bench-model",
                local=True,
                capabilities=capabilities,
                options={"base_url": server.base_url, "timeout_seconds": 30},
            )

        return Admission(
            catalogue=Catalogue(
                (
                    advisor("proposer", self.proposer, ("propose",)),
                    advisor("checker", self.checker, ("cost_review", "independent_reasoning")),
                )
            ),
            mode=ModeResolution(Mode.STANDARD, "bench"),
            now=NOW,
            presence=Presence(env_names=frozenset(), has_executable=lambda _name: True),
        )


# --- bundles -----------------------------------------------------------------------------------


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def write_project_bundle(root: Path, project_id: str) -> Path:
    """A small bundle in the shared/README.md format: a project, five cost lines, two measures."""
    total = sum(amount for _code, _title, amount in COST_LINES)
    _write(
        root / "project.md",
        f"---\ntype: project\nid: {project_id}\nname: Benchmark project {project_id}\n"
        f"currency: NOK\nbase_estimate_nok: {total}\n---\n\n# {project_id}\n\n"
        "A new school building used to time the pipeline.\n",
    )
    links = ["* [Project](project.md) - the project frame"]
    for code, title, amount in COST_LINES:
        _write(
            root / _cost_file(code),
            f'---\ntype: cost-line\ncode: "{code}"\ntitle: {title}\namount_nok: {amount}\n---\n\n'
            f"# {code} {title}\n\nThe estimate for {title.lower()}, priced from the sketch design.\n",
        )
        links.append(f"* [{code} {title}]({_cost_file(code)}) - cost line")
    for mid, title, kind, code, saving, quantity, price in MEASURES:
        _write(
            root / _measure_file(mid),
            f"---\ntype: measure-option\nid: {mid}\ntitle: {title}\nmeasure_type: {kind}\n"
            f'affected_codes: ["{code}"]\nestimated_saving_nok: {saving}\nquantity: {quantity}\n'
            f"unit: m2\nunit_price_nok: {price}\n---\n\n# {mid} {title}\n\n"
            f"Saves {saving} NOK on [{code}](../{_cost_file(code)}).\n",
        )
        links.append(f"* [{mid} {title}]({_measure_file(mid)}) - kuttliste item")
    _write(
        root / "index.md",
        f'---\nokf_version: "0.2"\n---\n\n# {project_id}\n\n' + "\n".join(links) + "\n",
    )
    return root


_PROSE: Final = (
    "The steering group discussed this topic at the monthly meeting and asked the project team to "
    "record what is known, what is assumed and what remains open. The consultant's note describes "
    "the current design, the quantities taken from the model and the prices used in the estimate. "
    "Several alternatives were considered; the preferred one keeps the programme and the cost "
    "frame, but depends on a decision by the municipality before the contract is tendered. The "
    "risk register links this topic to the schedule and to the operating budget of the building. "
)


def write_large_bundle(root: Path, concepts: int) -> Path:
    """A bundle of ``concepts`` linked concepts (cost lines and prose), each ~600 characters of body."""
    links = []
    amount = 1_000_000
    for i in range(1, concepts + 1):
        if i % 2:
            rel = f"cost/line-{i:04d}.md"
            head = (
                f'type: cost-line\ncode: "{i // 100:02d}.{i % 100:02d}"\ntitle: Cost line {i}\n'
                f"amount_nok: {amount + i * 1000}"
            )
        else:
            rel = f"context/note-{i:04d}.md"
            head = (
                f"type: note\ntitle: Context note {i}\n"
                f"description: Background for decision {i} of the design phase."
            )
        _write(root / rel, f"---\n{head}\n---\n\n# Concept {i}\n\n{_PROSE[:600]}\n")
        links.append(f"* [Concept {i}]({rel})")
    total = sum(amount + i * 1000 for i in range(1, concepts + 1, 2))
    _write(
        root / "project.md",
        f"---\ntype: project\nid: large-bundle\nname: Large bundle\ncurrency: NOK\n"
        f"base_estimate_nok: {total}\n---\n\n# Large bundle\n\nA bundle of {concepts} concepts.\n",
    )
    _write(
        root / "index.md",
        '---\nokf_version: "0.2"\n---\n\n# Large bundle\n\n* [Project](project.md)\n'
        + "\n".join(links)
        + "\n",
    )
    return root


# --- measures ----------------------------------------------------------------------------------


def _session(models: Models, state: Path) -> ReasoningSession:
    return ReasoningSession(Store(state), models.admission())


async def _one_run(models: Models, bundle: Path, state: Path, run_id: str) -> RunResult:
    return await run_project(
        bundle,
        verdicts=VerdictStore(),
        budget=BUDGET,
        settings=SETTINGS,
        reasoning=_session(models, state),
        run_id=run_id,
    )


def _approved(result: RunResult) -> int:
    return sum(1 for c in result.candidates if c.checker.outcome == "approved")


async def measure_overhead(models: Models, work: Path, scale: Scale) -> list[Row]:
    models.set_delay(MODEL_DELAY_S)
    bundle = write_project_bundle(work / "overhead" / "bundle", "bench-overhead")
    # The first run pays for imports and first-use set-up; it is reported, not judged.
    cold = await _timed_run(models, bundle, work / "overhead" / "state-cold", "cold")
    warm = [
        await _timed_run(models, bundle, work / "overhead" / f"state-{i}", f"warm-{i}")
        for i in range(scale.overhead_runs)
    ]
    wall = sum(w for w, _m, _n, _r in warm)
    model = sum(m for _w, m, _n, _r in warm)
    calls = sum(n for _w, _m, n, _r in warm)
    candidates = sum(len(r.candidates) for _w, _m, _n, r in warm)
    consulted = all(_approved(r) == CANDIDATES for _w, _m, _n, r in warm)
    per_call_ms = (wall - model) / calls * 1000
    cold_per_call = (cold[0] - cold[1]) / max(1, cold[2]) * 1000
    measured = (
        f"{per_call_ms:.1f} ms a call ({(wall - model) / len(warm) * 1000:.0f} ms of "
        f"{wall / len(warm) * 1000:.0f} ms a run, {(wall - model) / wall:.1%}; {calls / len(warm):g} "
        f"calls a run; mean of {len(warm)} warm run(s); cold first run {cold_per_call:.0f} ms a call)"
    )
    if not consulted:
        measured += "; a run did not reach the checker"
    per_candidate = calls / candidates
    floor_ms, floor = await measure_floor(models, bundle, scale, per_call_ms)
    large = await measure_store_size(
        models,
        bundle,
        work / "overhead",
        runs=scale.store_runs,
        warm=scale.overhead_runs,
    )
    return [
        Row(
            f"our own time per model call, model answering in {MODEL_DELAY_S * 1000:.0f} ms",
            f"≤ {PER_CALL_OF_FLOOR:g} × the floor below ({PER_CALL_OF_FLOOR * floor_ms:.1f} ms)",
            f"{measured}; {per_call_ms / floor_ms:.2f} × the floor",
            consulted and per_call_ms <= PER_CALL_OF_FLOOR * floor_ms,
        ),
        Row(
            "model calls per candidate, checker approving on its first turn",
            f"≤ {CALLS_PER_CANDIDATE_TARGET:g}",
            f"{per_candidate:.2f} ({calls / len(warm):g} calls for {candidates / len(warm):g} "
            f"candidates a run: 1 proposer call, 1 checker call each; the maker opens with the "
            "proposal itself, no call)",
            consulted and per_candidate <= CALLS_PER_CANDIDATE_TARGET,
        ),
        floor,
        large,
    ]


async def measure_floor(
    models: Models, bundle: Path, scale: Scale, own_ms: float
) -> tuple[float, Row]:
    """What Agent Framework and the SDK cost alone on a run's exchanges: the proposer's
    ``Agent.run`` (its instructions, tools and response format) and one maker-checker group chat
    per candidate (``ask_checker``, the checker approving at once), replaying the prompts the
    last run sent, on the same loopback models, each run's two clients built as a run builds
    them — no records, no bundle, no budget or redaction. What the product adds is the rest."""
    from agent_framework import Agent

    from portfolio_optimiser.context.ir import load_ir_projections
    from portfolio_optimiser.pipeline.checker import ask_checker
    from portfolio_optimiser.pipeline.clients.openai_compatible import chat_client_for
    from portfolio_optimiser.pipeline.clients.scripted import ScriptedChatClient
    from portfolio_optimiser.pipeline.datasource import DataSource, datasource_tools
    from portfolio_optimiser.pipeline.proposer import response_format

    asked = models.proposer.requests[-1].body
    instructions, prompt = (m["content"] for m in asked["messages"][:2])
    # A checker's request: its instructions, the task, the maker's opening.
    checked = [r.body for r in models.checker.requests[-CANDIDATES:]]
    tools = datasource_tools(DataSource(root=bundle, project=load_ir_projections(bundle)))
    catalogue = models.admission().catalogue

    def built(advisor_id: str) -> Any:
        advisor = catalogue.get(advisor_id)
        assert advisor is not None
        return chat_client_for(advisor)

    def defence() -> ScriptedChatClient:
        async def speak(_messages: object, _options: object) -> str:
            return "The figures stand."

        return ScriptedChatClient(handler=speak)

    async def exchanges() -> None:
        proposer, checker = built("bench-proposer"), built("bench-checker")
        agent = Agent(client=proposer, name="proposer", instructions=instructions, tools=tools)
        form = response_format("json_schema")
        await agent.run(
            prompt, options={"max_tokens": asked["max_tokens"], "response_format": form}
        )
        for body in checked:
            task, maker = (m["content"] for m in body["messages"][1:3])
            await ask_checker(
                opening=maker,
                maker_client=defence(),
                checker_client=checker,
                task=task,
                max_rounds=SETTINGS.max_rounds,
                checker_options={"max_tokens": body["max_tokens"]},
            )
        for client in (proposer, checker):
            await client.client.close()

    await exchanges()  # its first use paid for apart
    own, calls = 0.0, 0
    for _ in range(max(scale.overhead_runs, 3)):
        requests, served = models.requests, models.served_s
        started = time.perf_counter()
        await exchanges()
        own += time.perf_counter() - started - (models.served_s - served)
        calls += models.requests - requests
    floor_ms = own / max(calls, 1) * 1000
    return floor_ms, Row(
        "Agent Framework and the SDK alone on the same exchanges, model answering in "
        f"{MODEL_DELAY_S * 1000:.0f} ms",
        "reported (the floor under the per-call target)",
        f"{floor_ms:.1f} ms a call; the product's own work adds {own_ms - floor_ms:.1f} ms a "
        f"call (records, bundle, validation, budget and redaction)",
        True,
    )


async def _timed_run(
    models: Models, bundle: Path, state: Path, run_id: str
) -> tuple[float, float, int, RunResult]:
    requests, served = models.requests, models.served_s
    started = time.perf_counter()
    result = await _one_run(models, bundle, state, run_id)
    wall = time.perf_counter() - started
    return wall, models.served_s - served, models.requests - requests, result


async def _portfolio_pass(
    models: Models, bundles: Sequence[Path], state: Path, concurrency: int
) -> tuple[float, float, int]:
    """(wall seconds, seconds the fakes spent waiting, candidates the checker approved)."""
    served = models.served_s
    started = time.perf_counter()
    # Runs in one process at once, as the pipeline allows (the daemon runs one a process and
    # scales by worker processes: bench_workers).
    reasoning, gate = _session(models, state), asyncio.Semaphore(concurrency)

    async def one(bundle: Path) -> RunResult:
        async with gate:
            return await run_project(
                bundle,
                verdicts=VerdictStore(),
                budget=BUDGET,
                settings=SETTINGS,
                reasoning=reasoning,
                run_id=f"concurrency-{concurrency}",
            )

    results = await asyncio.gather(*(one(bundle) for bundle in bundles))
    wall = time.perf_counter() - started
    approved = sum(_approved(result) for result in results)
    return wall, models.served_s - served, approved


async def measure_throughput(models: Models, work: Path, scale: Scale) -> Row:
    models.set_delay(scale.delay_s)
    bundles = [
        write_project_bundle(work / "portfolio" / f"p{i:02d}", f"bench-project-{i:02d}")
        for i in range(1, scale.projects + 1)
    ]
    # Each pass on its own fresh reasoning store, so nothing is reused.
    serial, serial_model, serial_ok = await _portfolio_pass(
        models, bundles, work / "state-serial", 1
    )
    parallel, _model, parallel_ok = await _portfolio_pass(
        models, bundles, work / "state-concurrent", CONCURRENCY
    )
    speedup = serial / parallel
    expected = scale.projects * CANDIDATES
    complete = serial_ok == expected and parallel_ok == expected
    measured = (
        f"{speedup:.2f}× (serial {serial:.2f} s, concurrency {CONCURRENCY} {parallel:.2f} s; "
        f"{scale.projects / serial:.2f} → {scale.projects / parallel:.2f} projects/s; "
        f"pipeline share of the serial pass {(serial - serial_model) / serial:.0%})"
    )
    if not complete:
        measured += f"; approved {serial_ok} and {parallel_ok} of {expected} candidates"
    relaxed = " (relaxed for --quick; 3.2× on the full run)" if scale is QUICK else ""
    return Row(
        f"{scale.projects} projects at concurrency {CONCURRENCY}, model {scale.delay_s * 1000:.0f} ms",
        f"≥ {scale.speedup_target:g}× serial throughput{relaxed}",
        measured,
        complete and speedup >= scale.speedup_target,
    )


def measure_prompt(work: Path, scale: Scale) -> Row:
    root = write_large_bundle(work / "large", scale.concepts)
    context = render_context(navigate_bundle(root), budget_chars=CONTEXT_CHARS)
    stuffed = "\n".join(path.read_text(encoding="utf-8") for path in sorted(root.rglob("*.md")))
    ratio = len(context) / len(stuffed)
    measured = (
        f"{ratio:.1%} ({len(context):,} of {len(stuffed):,} chars; ~{estimate_tokens(context):,} "
        f"of ~{estimate_tokens(stuffed):,} tokens)"
    ).replace(",", " ")
    return Row(
        f"prompt size, {scale.concepts}-concept bundle",
        f"≤ {PROMPT_TARGET:.0%} of stuffing the bundle",
        measured,
        ratio <= PROMPT_TARGET,
    )


async def measure_reuse(models: Models, work: Path, scale: Scale) -> Row:
    models.set_delay(scale.delay_s)
    bundle = write_project_bundle(work / "reuse" / "bundle", "bench-reuse")
    state = work / "reuse" / "state"
    first = await _one_run(models, bundle, state, "reuse-1")
    checker_before = len(models.checker.requests)
    second = await _one_run(models, bundle, state, "reuse-2")
    checker_calls = len(models.checker.requests) - checker_before
    loaded = Store(state).load()
    # A re-run asks the proposer again (its answer is this run's, never a standing conclusion);
    # what must not be asked again is the checker, about the candidates it already concluded.
    consultations = [
        r
        for r in loaded.of_kind("consultation")
        if isinstance(r.body, ConsultationInput) and r.body.advisor == "bench-checker"
    ]
    first_n = sum(1 for r in consultations if r.task == first.task)
    second_n = sum(1 for r in consultations if r.task == second.task)
    reused = sum(1 for c in second.candidates if c.plan_outcome == "reuse_prior")
    ok = first_n > 0 and second_n == 0 and checker_calls == 0 and reused == len(second.candidates)
    measured = (
        f"{second_n} checker consultations, {checker_calls} checker requests in run 2 "
        f"({reused} of {len(second.candidates)} candidates reused; run 1 consulted {first_n} times)"
    )
    return Row(
        "re-run of an unchanged project",
        "consults no checker (0 checker consultations, 0 checker requests)",
        measured,
        ok,
    )


async def run_benchmark(scale: Scale) -> list[Row]:
    with (
        tempfile.TemporaryDirectory(prefix="portfolio-optimiser-bench-") as tmp,
        TimedFakeLLMServer(content=PROPOSAL, delay_s=MODEL_DELAY_S) as proposer,
        TimedFakeLLMServer(content=APPROVAL, delay_s=MODEL_DELAY_S) as checker,
    ):
        work = Path(tmp)
        models = Models(proposer, checker)
        rows = await measure_overhead(models, work, scale)
        rows.append(await measure_throughput(models, work, scale))
        rows.append(measure_prompt(work, scale))
        rows.append(await measure_reuse(models, work, scale))
        return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.bench_pipeline",
        description="Benchmark the pipeline against its performance targets.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smaller numbers, for CI (a few seconds)"
    )
    args = parser.parse_args(argv)
    scale = QUICK if args.quick else FULL
    started = time.perf_counter()
    rows = asyncio.run(run_benchmark(scale))
    return report(rows, scale.name, time.perf_counter() - started)


if __name__ == "__main__":
    sys.exit(main())
