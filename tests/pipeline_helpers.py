"""Builders for pipeline tests: a small bundle, scripted advisors, a pinned reasoning session.

Every session pins its mode: CI sets CI=true (mode ci, no advisors), and a test that exercises an
advisor must behave the same on a developer's machine and in CI.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from portfolio_optimiser.pipeline.budget import Budget
from portfolio_optimiser.pipeline.clients.scripted import ScriptedChatClient
from portfolio_optimiser.pipeline.run import ReasoningSession, RunSettings
from portfolio_optimiser.reasoning.catalogue import Advisor, Catalogue, Presence
from portfolio_optimiser.reasoning.modes import Mode, ModeResolution
from portfolio_optimiser.reasoning.store import Admission, Store

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
PROPOSER = Advisor(
    id="p1",
    name="proposer",
    adapter="scripted",
    provider="test",
    model="m-propose",
    local=True,
    capabilities=("propose",),
)
CHECKER = Advisor(
    id="k1",
    name="checker",
    adapter="scripted",
    provider="test",
    model="m-check",
    local=True,
    capabilities=("cost_review", "independent_reasoning"),
)


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def small_bundle(root: Path, *, project_id: str = "depot", kuttliste: bool = True) -> Path:
    """A depot with two cost lines (02.3 costs 2 880 000) and, unless told, one kuttliste item.

    The item has the key of ``measure()``: a model proposing it adds nothing (the local rules
    already have it). Tests of what a model adds take the bundle without it.
    """
    cut = "* [Cut](k/k-01.md)\n" if kuttliste else ""
    write(
        root,
        "index.md",
        "# Depot\n\n* [Project](project.md)\n* [Walls](cost/02.3.md)\n* [Site](cost/01.md)\n" + cut,
    )
    write(
        root,
        "project.md",
        f"---\ntype: project\nid: {project_id}\nname: Depot\ncurrency: NOK\n---\nA depot.\n",
    )
    write(
        root,
        "cost/01.md",
        '---\ntype: cost-line\ncode: "01"\ntitle: Site\namount_nok: 420000\n---\nSite costs.\n',
    )
    write(
        root,
        "cost/02.3.md",
        '---\ntype: cost-line\ncode: "02.3"\ntitle: Walls\namount_nok: 2880000\nquantity: 480\nunit: m2\nunit_price_nok: 6000\n---\nWalls.\n',
    )
    if not kuttliste:
        return root
    write(
        root,
        "k/k-01.md",
        '---\ntype: measure-option\nid: k-01\ntitle: Standard panels\nmeasure_type: standardisation\naffected_codes: ["02.3"]\nestimated_saving_nok: 144000\n---\nStandard widths.\n',
    )
    return root


def measure(
    saving: float = 144000,
    codes: Sequence[str] = ("02.3",),
    measure_type: str = "standardisation",
    title: str = "Standard panels",
) -> dict[str, Any]:
    return {
        "title": title,
        "affected_codes": list(codes),
        "measure_type": measure_type,
        "claimed_saving_nok": saving,
        "rationale": "standard widths",
        "evidence": ["cost/02.3.md"],
    }


def proposal(*measures: dict[str, Any]) -> str:
    return json.dumps({"candidates": list(measures)})


def session(tmp: Path, *advisors: Advisor, mode: Mode = Mode.STANDARD) -> ReasoningSession:
    ctx = Admission(
        catalogue=Catalogue(tuple(advisors)),
        mode=ModeResolution(mode, "test"),
        now=NOW,
        presence=Presence(env_names=frozenset(), has_executable=lambda _name: True),
    )
    return ReasoningSession(Store(tmp / "state"), ctx)


def settings(**overrides: Any) -> RunSettings:
    values: dict[str, Any] = {
        "max_attempts": 3,
        "max_rounds": 4,
        "max_candidates": 5,
        "run_timeout_s": 60,
    }
    values.update(overrides)
    return RunSettings(**values)


def budget(run_tokens: int = 100_000) -> Budget:
    return Budget(run_tokens=run_tokens, call_tokens=20_000, max_rounds=20)


Handler = Callable[[list[Any], Mapping[str, Any]], str]


def factory(
    handlers: Mapping[str, Handler], clients: dict[str, ScriptedChatClient] | None = None
) -> Any:
    """A client factory that gives each advisor a scripted client with its handler."""

    def build(advisor: Advisor, middleware: Sequence[Any]) -> ScriptedChatClient:
        client = ScriptedChatClient(
            handler=handlers[advisor.id], middleware=list(middleware), model=advisor.model
        )
        if clients is not None:
            clients[advisor.id] = client
        return client

    return build
