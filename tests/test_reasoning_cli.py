"""The reasoning commands, run as ``main(argv)`` against a workspace whose records a test wrote.

The fixture task is written through the store with a pinned clock and mode ``standard``; the
commands then read it back. The commands resolve their mode from the environment, so each test
pins ``PORTFOLIO_OPTIMISER_REASONING_MODE=standard`` and removes ``CI`` (which means mode ``ci``).
"""

from __future__ import annotations

import json
import textwrap
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from portfolio_optimiser.cli import main
from portfolio_optimiser.config import EX_CONFIG, load_config
from portfolio_optimiser.reasoning.availability import ConsultationStatus
from portfolio_optimiser.reasoning.catalogue import Presence
from portfolio_optimiser.reasoning.environment import catalogue_of
from portfolio_optimiser.reasoning.modes import Mode, ModeResolution
from portfolio_optimiser.reasoning.policy import Materiality
from portfolio_optimiser.reasoning.records import (
    AssessmentInput,
    ConclusionInput,
    ConsultationInput,
    DisagreementInput,
    Evidence,
    EvidenceKind,
    PlanInput,
    Position,
    ResolutionInput,
    Stance,
    StoredRecord,
    Usage,
    ValidationInput,
)
from portfolio_optimiser.reasoning.store import Admission, Store

from .conftest import REPO

T0 = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
TASK = "lillevik-school"
SUBJECT = "Pile foundation redesign at Lillevik school"
TEST_EVIDENCE = Evidence(kind=EvidenceKind.TEST, reference="load test of pile 14")

ADVISORS = """
[[advisors]]
id = "alpha"
name = "Alpha"
adapter = "shared-a"
provider = "test-provider"
model = "test-model"
capabilities = ["cost_review", "independent_reasoning"]

[[advisors]]
id = "beta"
name = "Beta"
adapter = "shared-a"
provider = "test-provider"
model = "test-model"
capabilities = ["cost_review"]

[[advisors]]
id = "gamma"
name = "Gamma"
adapter = "other-b"
provider = "test-provider"
model = "test-model"
capabilities = ["cost_review", "independent_reasoning"]
"""


def write_config(workspace: Path) -> Path:
    """The default's stop and budget sections and three advisors on two adapters."""
    default = tomllib.loads((REPO / "config" / "portfolio-optimiser.toml").read_text("utf-8"))
    sections = [
        f"[{name}]\n" + "\n".join(f"{k} = {v!r}" for k, v in default[name].items()) + "\n"
        for name in ("stop", "budget")
    ]
    path = workspace / "config" / "portfolio-optimiser.toml"
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(sections) + textwrap.dedent(ADVISORS), "utf-8")
    return path


@pytest.fixture(autouse=True)
def standard_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PORTFOLIO_OPTIMISER_REASONING_MODE", "standard")
    for name in (
        "CI",
        "STATE_DIRECTORY",
        "PORTFOLIO_OPTIMISER_ADVISORS_DISABLE",
        "PORTFOLIO_OPTIMISER_REASONING_COOLDOWN_SECONDS",
    ):
        monkeypatch.delenv(name, raising=False)


@dataclass
class Fixture:
    workspace: Path
    chain: list[StoredRecord]

    @property
    def conclusion(self) -> StoredRecord:
        return next(r for r in self.chain if r.kind == "conclusion")

    def run(self, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
        code = main([*argv, "--workspace", str(self.workspace)])
        out, err = capsys.readouterr()
        return code, out, err

    def json(self, capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
        code, out, err = self.run(capsys, *argv, "--json")
        assert (code, err) == (0, "")
        return json.loads(out)


def files_under(root: Path) -> dict[str, bytes]:
    if not root.exists():
        return {}
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def task(tmp_path: Path) -> Fixture:
    """assessment → plan → opposing and supporting answers → disagreement → resolution →
    conclusion citing both → a passing validation, one minute apart."""
    workspace = tmp_path / "ws"
    config = load_config(write_config(workspace))
    store = Store(workspace / ".state")
    clock = iter(T0 + timedelta(minutes=m) for m in range(100))

    def record(draft: Any) -> StoredRecord:
        ctx = Admission(
            catalogue=catalogue_of(config),
            mode=ModeResolution(Mode.STANDARD, "env"),
            now=next(clock),
            presence=Presence(env_names=frozenset(), has_executable=lambda _name: True),
        )
        return store.record(TASK, draft, ctx)

    assessment = record(
        AssessmentInput(
            subject=SUBJECT,
            materiality=Materiality.HIGH,
            hypothesis="End-bearing piles can be two metres shorter.",
            evidence=(Evidence(kind=EvidenceKind.FILE, reference="ir/costs.json"),),
            capabilities=("cost_review", "independent_reasoning"),
        )
    )
    plan = record(PlanInput(assessment=assessment.id))

    def consulted(advisor: str, stance: Stance, tokens: tuple[int, int]) -> StoredRecord:
        return record(
            ConsultationInput(
                plan=plan.id,
                advisor=advisor,
                status=ConsultationStatus.COMPLETED,
                stance=stance,
                conclusion=f"{advisor}: {stance}",
                usage=Usage(input_tokens=tokens[0], output_tokens=tokens[1]),
            )
        )

    opposes = consulted("alpha", Stance.OPPOSES, (1200, 310))
    supports = consulted("gamma", Stance.SUPPORTS, (800, 95))
    disagreement = record(
        DisagreementInput(
            assessment=assessment.id,
            positions=(
                Position(source=opposes.id, position="the soil is too soft"),
                Position(source=supports.id, position="the load test allows it"),
            ),
            deciding_question="Does pile 14 carry 1.5 times the design load?",
        )
    )
    resolution = record(
        ResolutionInput(
            disagreement=disagreement.id,
            experiment="static load test of pile 14",
            outcome="pile 14 carried 1.6 times the design load",
            favours=supports.id,
            evidence=(TEST_EVIDENCE,),
        )
    )
    conclusion = record(
        ConclusionInput(
            assessment=assessment.id,
            decision="Shorten the piles by two metres",
            evidence=(TEST_EVIDENCE,),
            consultations=(opposes.id, supports.id),
            disagreements=(disagreement.id,),
            validation_plan=("re-run the validator on the revised schedule",),
        )
    )
    validation = record(
        ValidationInput(
            conclusion=conclusion.id, check="validator", outcome="pass", evidence=(TEST_EVIDENCE,)
        )
    )
    chain = [
        assessment,
        plan,
        opposes,
        supports,
        disagreement,
        resolution,
        conclusion,
        validation,
    ]
    return Fixture(workspace, chain)


CHAIN_KINDS = [
    "assessment",
    "plan",
    "consultation",
    "consultation",
    "disagreement",
    "resolution",
    "conclusion",
    "validation",
]


# --- status ---------------------------------------------------------------------------------------


@pytest.mark.loadbearing
def test_status_json_replays_the_task_from_its_records(
    task: Fixture, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = task.json(capsys, "status")
    assert shown["mode"] == "standard"
    assert shown["unreadable_records"] == []
    [status] = shown["tasks"]
    assert status["task"] == TASK
    [assessment] = status["assessments"]
    assert (assessment["id"], assessment["state"]) == (task.chain[0].id, "validated")
    assert assessment["plan_outcome"] == "consult"
    assert [(c["advisor"], c["stance"]) for c in assessment["consultations"]] == [
        ("alpha", "opposes"),
        ("gamma", "supports"),
    ]
    assert assessment["disagreements"] == [
        {"id": task.chain[4].id, "resolved_by": task.chain[5].id}
    ]
    conclusion = assessment["conclusion"]
    assert conclusion["id"] == task.conclusion.id
    assert conclusion["reviewed_by"] == ["alpha", "gamma"]
    assert conclusion["independent_review_count"] == 2
    assert conclusion["validations"] == [{"id": task.chain[7].id, "outcome": "pass"}]
    assert status["tokens"] == {"input_tokens": 2000, "output_tokens": 405}
    assert [t["id"] for t in status["timeline"]] == [r.id for r in task.chain]
    assert [t["kind"] for t in status["timeline"]] == CHAIN_KINDS
    handover = shown["handover"]
    assert handover.startswith("# Reasoning handover")
    assert f"## Task {TASK}" in handover
    assert f"| {task.chain[0].id} | {SUBJECT} | high | validated | 2 |" in handover
    assert "Tokens reported by advisors: 2000 in, 405 out." in handover


def test_status_text_shows_the_handover(task: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = task.run(capsys, "status")
    assert (code, err) == (0, "")
    assert "advisors: 3 of 3 available (mode standard)" in out
    assert "# Reasoning handover" not in out and "status --reasoning" in out
    code, out, err = task.run(capsys, "status", "--reasoning")
    assert "# Reasoning handover" in out and "validated" in out
    assert "\x1b" not in out


def test_status_reports_an_unreadable_record_and_goes_on(
    task: Fixture, capsys: pytest.CaptureFixture[str]
) -> None:
    (task.workspace / ".state" / "reasoning" / TASK / "0099-torn.json").write_bytes(b"{")
    shown = task.json(capsys, "status")
    assert [row[0] for row in shown["unreadable_records"]] == [f"{TASK}/0099-torn.json"]
    assert shown["tasks"][0]["assessments"][0]["state"] == "validated"


# --- explain --------------------------------------------------------------------------------------


@pytest.mark.loadbearing
def test_explain_a_conclusion_returns_its_whole_chain_in_order(
    task: Fixture, capsys: pytest.CaptureFixture[str]
) -> None:
    chain = task.json(capsys, "explain", task.conclusion.id)
    assert chain["subject"] == SUBJECT
    assert [s["kind"] for s in chain["steps"]] == CHAIN_KINDS
    assert [s["id"] for s in chain["steps"]] == [r.id for r in task.chain]
    assert chain["steps"][6]["record"]["independent_review_count"] == 2


@pytest.mark.parametrize(
    "which", [0, 2, 5, 7], ids=["assessment", "consultation", "resolution", "validation"]
)
def test_explain_from_any_record_of_the_chain_gives_the_same_chain(
    task: Fixture, capsys: pytest.CaptureFixture[str], which: int
) -> None:
    chain = task.json(capsys, "explain", task.chain[which].id)
    assert [s["id"] for s in chain["steps"]] == [r.id for r in task.chain]


def test_explain_by_a_subject_substring(task: Fixture, capsys: pytest.CaptureFixture[str]) -> None:
    chain = task.json(capsys, "explain", "Lillevik")
    assert [s["id"] for s in chain["steps"]] == [r.id for r in task.chain]
    code, out, err = task.run(capsys, "explain", "Pile foundation")
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == f"provenance of {SUBJECT!r}:"
    assert len(out.splitlines()) == 1 + len(task.chain)


def test_explain_of_an_unknown_id_exits_1_with_one_line(
    task: Fixture, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = task.run(capsys, "explain", "cn-doesnotexist")
    assert code == 1
    lines = (out + err).splitlines()
    assert len(lines) == 1 and "cn-doesnotexist" in lines[0]
    assert "Traceback" not in out + err


# --- advisors and plan ------------------------------------------------------------------------------


def test_advisors_lists_every_declared_advisor(
    task: Fixture, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = task.json(capsys, "advisors")
    assert (shown["mode"], shown["mode_source"]) == ("standard", "env")
    assert [(a["id"], a["status"]) for a in shown["advisors"]] == [
        ("alpha", "available"),
        ("beta", "available"),
        ("gamma", "available"),
    ]
    assert shown["capacity"] == {"cost_review": 3, "independent_reasoning": 2}
    code, out, err = task.run(capsys, "advisors")
    assert (code, err) == (0, "")
    assert "mode: standard (from env)" in out


@pytest.mark.loadbearing
def test_plan_previews_and_records_nothing(
    task: Fixture, capsys: pytest.CaptureFixture[str]
) -> None:
    state = task.workspace / ".state"
    before = files_under(state)
    preview = task.json(
        capsys,
        "plan",
        "--materiality",
        "high",
        "--capabilities",
        "cost_review,independent_reasoning",
    )
    assert preview["outcome"] == "consult" and preview["recorded"] is False
    assert [s["advisor"] for s in preview["selected"]] == ["alpha", "gamma"]
    code, out, err = task.run(
        capsys, "plan", "--materiality", "low", "--capabilities", "cost_review"
    )
    assert (code, err) == (0, "")
    assert "nothing was recorded" in out and "local review 5." in out
    assert files_under(state) == before


@pytest.mark.loadbearing
def test_plan_in_a_fresh_workspace_creates_no_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace = tmp_path / "fresh"
    write_config(workspace)
    code = main(
        [
            "plan",
            "--materiality",
            "critical",
            "--capabilities",
            "cost_review",
            "--workspace",
            str(workspace),
        ]
    )
    assert code == 0
    assert "selected alpha" in capsys.readouterr().out
    assert not (workspace / ".state").exists()


# --- the environment at the edge ------------------------------------------------------------------


@pytest.mark.loadbearing
@pytest.mark.parametrize(
    "command",
    [["advisors"], ["status"], ["plan", "--materiality", "high", "--capabilities", "cost_review"]],
)
def test_a_bad_reasoning_mode_is_a_configuration_error_in_one_line(
    task: Fixture,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
) -> None:
    monkeypatch.setenv("PORTFOLIO_OPTIMISER_REASONING_MODE", "turbo")
    code, out, err = task.run(capsys, *command)
    assert code == EX_CONFIG == 78
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("portfolio-optimiser: ")
    assert "PORTFOLIO_OPTIMISER_REASONING_MODE" in lines[0] and "'turbo'" in lines[0]


@pytest.mark.loadbearing
def test_disabling_all_advisors_shows_each_as_disabled(
    task: Fixture, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PORTFOLIO_OPTIMISER_ADVISORS_DISABLE", "all")
    shown = task.json(capsys, "advisors")
    assert [a["status"] for a in shown["advisors"]] == ["disabled"] * 3
    assert all("PORTFOLIO_OPTIMISER_ADVISORS_DISABLE" in a["reason"] for a in shown["advisors"])
    assert shown["capacity"] == {"cost_review": 0, "independent_reasoning": 0}
    preview = task.json(
        capsys, "plan", "--materiality", "critical", "--capabilities", "cost_review"
    )
    assert preview["outcome"] == "decide_locally" and preview["selected"] == []


def test_disabling_one_advisor_leaves_the_others(
    task: Fixture, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PORTFOLIO_OPTIMISER_ADVISORS_DISABLE", " gamma ,")
    shown = task.json(capsys, "advisors")
    assert [(a["id"], a["status"]) for a in shown["advisors"]] == [
        ("alpha", "available"),
        ("beta", "available"),
        ("gamma", "disabled"),
    ]


def test_under_ci_the_commands_work_and_no_advisor_is_available(
    task: Fixture, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PORTFOLIO_OPTIMISER_REASONING_MODE")
    monkeypatch.setenv("CI", "true")
    shown = task.json(capsys, "advisors")
    assert (shown["mode"], shown["mode_source"]) == ("ci", "ci")
    assert {a["status"] for a in shown["advisors"]} == {"disabled"}
    status = task.json(capsys, "status")
    assert status["tasks"][0]["assessments"][0]["state"] == "validated"
