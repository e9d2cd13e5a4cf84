"""The find-and-learn benchmark: does the product find what a portfolio hides, and does it learn?

``uv run python -m tests.bench.bench_learning [--quick]`` prints a table per seed and exits 1 when
a target is missed. Everything is offline and in process: synthetic portfolios with planted
overpricing (``tests/synthetic.py``), a naive scripted model that proposes measures at random
(it reads the project in its prompt, never the truth or the experts' preferences), and scripted experts whose
preferences the product never reads. Rounds of run → verdicts → run, and a control arm whose
learning store stays empty. See ``tests/bench/README.md`` for what is pinned and why.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.models import Candidate, Project
from portfolio_optimiser.context.reference import MEASURE_TYPE as REFERENCE_PRICE
from portfolio_optimiser.context.reference import ReferenceIndex
from portfolio_optimiser.context.verdict import Decision
from portfolio_optimiser.learning import LearnedVerdict, VerdictStore
from portfolio_optimiser.learning.verdict_store import CandidateKey
from portfolio_optimiser.pipeline.outcome import RunResult
from portfolio_optimiser.pipeline.precedent import precedents
from portfolio_optimiser.pipeline.run import run_project
from portfolio_optimiser.reasoning.catalogue import Advisor
from tests.bench._table import Row, report
from tests.pipeline_helpers import budget, factory, session, settings
from tests.synthetic import PRICED, generate

SEEDS: Final = (11, 22, 33)
ROUNDS: Final = 3
MODEL = Advisor(
    id="naive-model",
    name="a naive scripted model (proposes at random)",
    adapter="scripted",
    provider="bench",
    model="random",
    local=True,
    capabilities=("propose",),
)
TYPES: Final = (
    "standardisation",
    "simplification",
    "material_substitution",
    "procurement",
    "phasing",
    "deferral",
)
# The experts' hidden preferences: which measure types they approve on which code group. The
# product never reads this; it can only learn it from their verdicts.
GROUPS: Final = {
    "02": "building",
    "03": "installations",
    "04": "installations",
    "05": "installations",
    "07": "outdoors",
}
LIKED: Final = {
    "building": {"standardisation", "material_substitution"},
    "installations": {"simplification", "procurement"},
    "outdoors": {"phasing"},
}
REALISATION: Final = 0.8
_MARKER: Final = re.compile(r"\(marker V\d+\)")


def liked(candidate: Candidate) -> bool:
    group = GROUPS.get(candidate.affected_codes[0].split(".")[0])
    return group is not None and candidate.measure_type in LIKED[group]


def naive_model(seed: int, round_no: int, heard: list[str]) -> Any:
    """Three measures per prompt on random priced codes with random types, 3 % of the line."""

    def propose(messages: list[Any], _options: Mapping[str, Any]) -> str:
        text = "\n".join(m.text or "" for m in messages)
        heard.append(text)
        project = re.search(r"\bid: ([a-z0-9-]+)", text)
        rng = random.Random(f"{seed}/{round_no}/{project.group(1) if project else ''}")
        measures = []
        for code in rng.sample(sorted(PRICED), 3):
            amount = re.search(rf"code: {re.escape(code)} · amount_nok: (\d+)", text)
            if amount is None:
                continue
            measures.append(
                {
                    "title": f"Measure on {code}",
                    "affected_codes": [code],
                    "measure_type": rng.choice(TYPES),
                    "claimed_saving_nok": round(int(amount.group(1)) * 0.03),
                    "rationale": "a guess",
                    "evidence": [f"cost/{code}.md"],
                }
            )
        return json.dumps({"candidates": measures})

    return factory({MODEL.id: propose})


@dataclass
class Arm:
    """One arm of one seed: the learning store it keeps (or not) and what each round saw."""

    learns: bool
    store: VerdictStore = field(default_factory=VerdictStore)
    judged: int = 0
    rates: list[float] = field(default_factory=list)
    unflagged: int = 0
    leaks: int = 0
    found: set[tuple[str, str]] = field(default_factory=set)
    seconds: float = 0.0


def _verdict(candidate: Candidate, approve: bool, n: int, round_no: int) -> LearnedVerdict:
    why = "Realises as planned" if approve else "Does not suit these codes"
    return LearnedVerdict(
        candidate_id=candidate.id,
        decision=Decision.APPROVED if approve else Decision.REJECTED,
        rationale=f"{why} (marker V{n}). Checked against the project.",
        reviewer="E1",
        key=CandidateKey.from_candidate(candidate),
        source=Path(f"verdict-{n}.json"),
        realization_rate=REALISATION if approve else None,
        decided_at=f"2026-1{round_no}-01T12:00:00Z",
    )


def _round(
    arm: Arm,
    round_no: int,
    bundles: Mapping[str, Path],
    projects: Mapping[str, Project],
    index: ReferenceIndex,
    planted: set[tuple[str, str]],
    seed: int,
    state: Path,
) -> None:
    store = arm.store if arm.learns else VerdictStore()
    teaching = precedents(store.verdicts())
    heard: list[str] = []
    reasoning = session(state / f"r{round_no}", MODEL)
    results: list[RunResult] = []
    started = time.perf_counter()
    for project_id, bundle in bundles.items():
        results.append(
            asyncio.run(
                run_project(
                    bundle,
                    verdicts=store,
                    budget=budget(),
                    settings=settings(max_attempts=1, max_candidates=3),
                    reasoning=reasoning,
                    run_id=f"round-{round_no}",
                    client_factory=naive_model(seed, round_no, heard),
                    references=index.assess(projects[project_id]),
                    portfolio=projects,
                )
            )
        )
    arm.seconds += time.perf_counter() - started
    approved = judged = 0
    fresh: list[LearnedVerdict] = []
    for result in results:
        for run in result.candidates:
            cand = run.candidate
            if run.validator.outcome != "accepted":
                continue
            if teaching.of(cand) is not None and run.precedent is None:
                arm.unflagged += 1  # a twice-rejected measure shown without its precedent
            if _MARKER.search(cand.rationale):
                arm.leaks += 1  # verdict words in a rationale the checker would see
            if cand.measure_type == REFERENCE_PRICE:
                arm.found.add((cand.project_id, cand.affected_codes[0]))
                approve = (cand.project_id, cand.affected_codes[0]) in planted
            else:
                approve = liked(cand)
            if not cand.origin.startswith("measure-option:"):
                judged += 1
                approved += approve
            if store.get(cand.id) is None:
                arm.judged += 1
                fresh.append(_verdict(cand, approve, arm.judged + 1000 * round_no, round_no))
    for text in heard:  # what the model was sent: verdict words only inside the fold
        for result in results:
            if result.learned:
                text = text.replace(result.learned, "")
        arm.leaks += len(_MARKER.findall(text))
    arm.rates.append(approved / judged if judged else 0.0)
    if arm.learns:
        for verdict in fresh:
            arm.store.add(verdict)


@dataclass(frozen=True)
class SeedResult:
    seed: int
    planted: int
    learning: Arm
    control: Arm


def run_seed(seed: int, n_projects: int, rounds: int) -> SeedResult:
    portfolio = generate(seed, n_projects=n_projects)
    # In memory where the machine has it: the rounds measure the pipeline, not the disk's fsync
    # (every reasoning record is fsynced; on this machine's disk that is most of a round's time).
    memory = Path("/dev/shm")
    where = str(memory) if memory.is_dir() else None
    with tempfile.TemporaryDirectory(prefix="bench-learning-", dir=where) as tmp:
        root = Path(tmp)
        bundles = {
            p.project_id: p.write(root / "projects" / p.project_id) for p in portfolio.projects
        }
        projects = {pid: load_ir_projections(b) for pid, b in bundles.items()}
        index = ReferenceIndex.of(projects.values())
        arms = (Arm(learns=True), Arm(learns=False))
        for arm, name in zip(arms, ("learning", "control"), strict=True):
            for round_no in range(1, rounds + 1):
                _round(
                    arm, round_no, bundles, projects, index, portfolio.planted, seed, root / name
                )
    return SeedResult(seed, len(portfolio.planted), *arms)


def rows_for(result: SeedResult, n_projects: int, rounds: int, budget_s: float) -> list[Row]:
    arm, control = result.learning, result.control
    hits = len(arm.found & generate(result.seed, n_projects=n_projects).planted)
    recall = hits / result.planted if result.planted else 0.0
    precision = hits / len(arm.found) if arm.found else 0.0
    rise = (arm.rates[-1] - arm.rates[0]) * 100
    control_rise = (control.rates[-1] - control.rates[0]) * 100
    rates = " → ".join(f"{r:.0%}" for r in arm.rates)
    control_rates = " → ".join(f"{r:.0%}" for r in control.rates)
    s = f"seed {result.seed}: "
    return [
        Row(
            s + "planted lines found (recall)",
            "≥ 90 %",
            f"{recall:.0%} ({hits} of {result.planted})",
            recall >= 0.9,
        ),
        Row(
            s + "reference candidates on planted lines (precision)",
            "≥ 80 %",
            f"{precision:.0%} ({hits} of {len(arm.found)})",
            precision >= 0.8,
        ),
        Row(
            s + f"approval of proposals not the planner's, round 1 → {rounds}",
            "rises ≥ 30 pp",
            f"{rates} ({rise:+.0f} pp)",
            rise >= 30,
        ),
        Row(
            s + "the same, control with an empty wiki",
            "no such rise (< 10 pp)",
            f"{control_rates} ({control_rise:+.0f} pp)",
            control_rise < 10,
        ),
        Row(
            s + "twice-rejected measures shown without their precedent",
            "0",
            str(arm.unflagged),
            arm.unflagged == 0,
        ),
        Row(
            s + "verdict words outside the fold",
            "0",
            str(arm.leaks + control.leaks),
            arm.leaks + control.leaks == 0,
        ),
        Row(
            s + f"{n_projects} projects × {rounds} rounds, offline",
            f"≤ {budget_s:.0f} s",
            f"{arm.seconds:.1f} s",
            arm.seconds <= budget_s,
        ),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="one seed, 12 projects")
    args = parser.parse_args(argv)
    seeds, n_projects = ((SEEDS[0],), 15) if args.quick else (SEEDS, 30)
    started = time.perf_counter()
    rows: list[Row] = []
    for seed in seeds:
        rows += rows_for(run_seed(seed, n_projects, ROUNDS), n_projects, ROUNDS, 60.0)
    return report(rows, "quick" if args.quick else "full", time.perf_counter() - started)


if __name__ == "__main__":
    sys.exit(main())
