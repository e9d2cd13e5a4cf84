"""The offline simulation: the real pipeline, a scripted model, two runs separated by a promotion.

``python -m portfolio_optimiser.simulation`` (and ``portfolio-optimiser demo``) copies the example
portfolio into a workspace and runs it with scripted chat clients standing in for models: a
proposer that proposes each bundle's kuttliste, and a checker that approves — except a deferral,
which it rejects (a deferral moves cost, it does not remove it). Run A's school candidate then gets
the expert persona's approved verdict (read from the commons at call time), which is promoted into
the wiki; run B, from a fresh store seeded from that wiki, carries the verdict's marker in its
hypothesis prompt, and a control run on an empty wiki does not. This proves the plumbing and the
data flow. It does not show what a real model would propose or judge.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent_framework import Message

from portfolio_optimiser._atomic import publish_atomic
from portfolio_optimiser.config import Config, load_config
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.learning import (
    VerdictStore,
    load_verdicts_from_dir,
    promote_verdict,
    seed_store_from_bundle,
)
from portfolio_optimiser.persona import load_persona_example, persona_marker
from portfolio_optimiser.pipeline.budget import Budget
from portfolio_optimiser.pipeline.clients.scripted import ScriptedChatClient
from portfolio_optimiser.pipeline.outcome import RunResult
from portfolio_optimiser.pipeline.run import ReasoningSession, RunSettings, run_project
from portfolio_optimiser.reasoning.catalogue import Advisor, Catalogue
from portfolio_optimiser.reasoning.modes import Mode, ModeResolution
from portfolio_optimiser.reasoning.store import Admission, Store
from portfolio_optimiser.resources import commons_dir

__all__ = ["SimulationReport", "main", "simulate"]

PROPOSER = Advisor(
    id="scripted-proposer",
    name="Scripted proposer (a stand-in, not a model)",
    adapter="scripted",
    provider="portfolio-optimiser",
    model="scripted",
    local=True,
    capabilities=("propose",),
)
CHECKER = Advisor(
    id="scripted-checker",
    name="Scripted checker (a stand-in, not a model)",
    adapter="scripted",
    provider="portfolio-optimiser",
    model="scripted",
    local=True,
    capabilities=("cost_review", "independent_reasoning"),
)
SCHOOL = "lillevik-school"
STAMP = "2026-11-30T12:00:00Z"


def _last_user_text(messages: Sequence[Message]) -> str:
    return next((m.text or "" for m in reversed(messages) if m.role == "user"), "")


def scripted_clients(bundles: Mapping[str, Path]) -> Any:
    """A client factory whose proposer proposes the kuttliste of the project named in its prompt."""
    kuttliste = {pid: load_ir_projections(root) for pid, root in bundles.items()}

    def propose(messages: list[Message], _options: Mapping[str, Any]) -> str:
        prompt = "\n".join(m.text or "" for m in messages)
        project = next((p for pid, p in kuttliste.items() if f"id: {pid}" in prompt), None)
        if project is None:
            return json.dumps({"candidates": []})
        return json.dumps(
            {
                "candidates": [
                    {
                        "title": o.title or o.id,
                        "affected_codes": list(o.affected_codes),
                        "measure_type": o.measure_type,
                        "claimed_saving_nok": o.estimated_saving_nok,
                        "quantity": o.quantity,
                        "unit": o.unit,
                        "unit_price_nok": o.unit_price_nok,
                        "rationale": o.consequence or "",
                        "evidence": [
                            o.source,
                            *(ln.source for c in o.affected_codes if (ln := project.line(c))),
                        ],
                    }
                    for o in project.measure_options
                ]
            }
        )

    def check(messages: list[Message], _options: Mapping[str, Any]) -> str:
        task = "\n".join(m.text or "" for m in messages if m.role == "user")
        if "measure type deferral" in task:
            return "A deferral moves the cost to a later budget; it does not remove it.\nVERDICT: REJECT — a deferral moves cost, it does not save it"
        return "The figures were recomputed and nothing is counted twice.\nVERDICT: APPROVE"

    def factory(advisor: Advisor, middleware: Sequence[Any]) -> ScriptedChatClient:
        handler = propose if advisor.id == PROPOSER.id else check
        return ScriptedChatClient(handler=handler, middleware=list(middleware), model=advisor.model)

    return factory


@dataclass(frozen=True)
class SimulationReport:
    workspace: Path
    marker: str
    run_a: tuple[RunResult, ...]
    run_b: RunResult
    control: RunResult
    promoted_page: Path | None

    @property
    def marker_reached_run_b(self) -> bool:
        return any(self.marker in prompt for prompt in self.run_b.hypothesis_prompts)

    @property
    def marker_in_control(self) -> bool:
        return any(self.marker in prompt for prompt in self.control.hypothesis_prompts)


def _admission(now: datetime) -> Admission:
    # The simulation pins its own mode: it demonstrates the consult path, wherever it runs (CI too).
    return Admission(
        catalogue=Catalogue((PROPOSER, CHECKER)),
        mode=ModeResolution(Mode.OFFLINE, "simulation"),
        now=now,
    )


async def simulate(
    workspace: Path, *, config: Config | None = None, promote: bool = True
) -> SimulationReport:
    """Run the two-run simulation in ``workspace`` (created if missing)."""
    config = config or load_config()
    verdict, raw = load_persona_example()  # at call time: the persona is read, never inlined
    marker = persona_marker(verdict)
    examples = commons_dir() / "examples" / "portfolio"
    projects = workspace / "bundles" / "projects"
    wiki = workspace / "bundles" / "wiki"
    for source in sorted(p for p in examples.iterdir() if p.is_dir()):
        if not (projects / source.name).exists():
            shutil.copytree(source, projects / source.name)
    for folder in (wiki, workspace / "inbox" / "verdicts", workspace / "inbox" / "projects"):
        folder.mkdir(parents=True, exist_ok=True)
    bundles = {p.name: p for p in sorted(projects.iterdir()) if p.is_dir()}
    settings = RunSettings.from_config(config)
    budget = Budget(
        run_tokens=config.budget.run_tokens,
        call_tokens=config.budget.call_tokens,
        max_rounds=config.stop.max_rounds * 4,
    )
    factory = scripted_clients(bundles)
    now = datetime(2026, 11, 30, 12, tzinfo=UTC)
    session = ReasoningSession(Store(workspace / ".state"), _admission(now))

    async def one(
        bundle: Path, store: VerdictStore, run_id: str, reasoning: ReasoningSession = session
    ) -> RunResult:
        return await run_project(
            bundle,
            verdicts=store,
            budget=budget,
            settings=settings,
            reasoning=reasoning,
            run_id=run_id,
            client_factory=factory,
        )

    run_a = tuple(
        await asyncio.gather(
            *(one(b, seed_store_from_bundle(wiki), "run-a") for b in bundles.values())
        )
    )
    school_a = next(r for r in run_a if r.project_id == SCHOOL)
    if verdict.id not in {c.candidate.id for c in school_a.candidates}:
        raise RuntimeError(
            f"the persona's verdict {verdict.id} names no candidate of run A; the example and the bundle have drifted"
        )

    # The expert persona answers by file, as an expert would: its verdict lands in the verdict inbox.
    publish_atomic(workspace / "inbox" / "verdicts" / f"{verdict.id}.json", raw)
    inbox = VerdictStore()
    load_verdicts_from_dir(workspace / "inbox" / "verdicts", inbox)
    page = None
    if promote:
        for learned in inbox.approved():
            page = (
                promote_verdict(verdict, wiki_root=wiki, run_id="run-a", at=STAMP)
                if learned.candidate_id == verdict.id
                else page
            )

    run_b = await one(bundles[SCHOOL], seed_store_from_bundle(wiki), "run-b")
    empty = workspace / ".control-wiki"
    empty.mkdir(exist_ok=True)
    control_session = ReasoningSession(Store(workspace / ".state-control"), _admission(now))
    control = await one(bundles[SCHOOL], seed_store_from_bundle(empty), "control", control_session)
    return SimulationReport(
        workspace=workspace,
        marker=marker,
        run_a=run_a,
        run_b=run_b,
        control=control,
        promoted_page=page,
    )


def render_report(report: SimulationReport) -> str:
    lines = [
        "portfolio-optimiser simulation: the real pipeline with scripted stand-ins for models",
        "",
    ]
    lines.append(f"Workspace: {report.workspace}")
    lines.append("")
    lines.append("Run A (empty wiki):")
    for result in report.run_a:
        lines.append(
            f"  {result.project_id}: {len(result.candidates)} candidates, stop: {result.stop_reason}"
        )
        for c in result.candidates:
            lines.append(
                f"    {c.candidate.id}  {c.candidate.claimed_saving_nok:>12,.0f} NOK  validator {c.validator.outcome:<8}  "
                f"checker {c.checker.outcome:<9}  {c.candidate.title[:44]}".replace(",", " ")
            )
    lines.append("")
    lines.append(
        f"The expert persona approved {SCHOOL}'s candidate and it was promoted to {report.promoted_page}."
    )
    lines.append(
        f"Run B (fresh store, seeded from the wiki): marker {report.marker} in its hypothesis prompt: {'yes' if report.marker_reached_run_b else 'NO'}"
    )
    lines.append(
        f"Control (empty wiki): marker in its hypothesis prompt: {'yes' if report.marker_in_control else 'no'}"
    )
    lines.append("")
    lines.append(
        "What this proves: the plumbing and the data flow (bundle → context → proposal → validator →\n"
        "checker → verdict → promotion → fold → the next run's prompt) and the deterministic backbone.\n"
        "What it does not prove: the proposer and the checker are scripted stand-ins, so nothing here\n"
        "says how well a real model would propose or judge."
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m portfolio_optimiser.simulation",
        description=__doc__.split("\n")[0] if __doc__ else None,
    )
    parser.add_argument(
        "--workspace",
        type=Path,
        help="where to build the demo workspace (default: a new temporary folder)",
    )
    args = parser.parse_args(argv)
    workspace = args.workspace or Path(tempfile.mkdtemp(prefix="portfolio-optimiser-demo-"))
    report = asyncio.run(simulate(workspace))
    print(render_report(report))
    return 0 if report.marker_reached_run_b and not report.marker_in_control else 1
