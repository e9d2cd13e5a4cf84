"""The commons are pure data that hold their own contracts: schemas, the skill, the examples."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.verdict import parse_verdict

from .conftest import REPO

SHARED = REPO / "shared"
SKILL = SHARED / "skills" / "expert-reviewer"
FRAMEWORK_WORDS = re.compile(
    r"\b(maf|microsoft|agent[ -]framework|openai|azure|ollama|claude|gpt|langchain|python|pydantic|mcp)\b",
    re.IGNORECASE,
)


@pytest.mark.parametrize(
    "schema", sorted((SHARED / "schemas").glob("*.json")), ids=lambda p: p.name
)
def test_every_schema_is_a_valid_json_schema(schema: Path) -> None:
    jsonschema.Draft202012Validator.check_schema(json.loads(schema.read_text("utf-8")))


def test_the_skill_follows_the_agent_skills_spec() -> None:
    text = (SKILL / "SKILL.md").read_text("utf-8")
    _, front, body = text.split("---\n", 2)
    meta = yaml.safe_load(front)
    assert meta["name"] == SKILL.name
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", meta["name"]) and len(meta["name"]) <= 64
    assert 0 < len(meta["description"]) <= 1024
    assert "use it when" in meta["description"].lower()
    assert all(isinstance(v, str) for v in meta.get("metadata", {}).values())
    assert len(body.splitlines()) < 500


def test_the_skill_prose_names_no_framework() -> None:
    for path in SKILL.rglob("*.md"):
        assert not FRAMEWORK_WORDS.search(path.read_text("utf-8")), path


def test_the_example_verdict_is_valid_pipeline_input() -> None:
    path = SKILL / "references" / "example-verdict.json"
    verdict = parse_verdict(path.read_bytes(), str(path))
    assert verdict.approves
    assert verdict.id == json.loads(path.read_text("utf-8"))["id"]


def test_the_example_verdict_names_a_real_candidate_of_the_school() -> None:
    from portfolio_optimiser.context.candidates import kuttliste_candidates

    example = json.loads((SKILL / "references" / "example-verdict.json").read_text("utf-8"))
    project = load_ir_projections(SHARED / "examples" / "portfolio" / "lillevik-school")
    assert example["id"] in {c.id for c in kuttliste_candidates(project)}


def test_the_example_portfolio_has_three_projects_with_a_kuttliste() -> None:
    projects = [
        load_ir_projections(p) for p in sorted((SHARED / "examples" / "portfolio").iterdir())
    ]
    assert len(projects) == 3
    for project in projects:
        assert project.measure_options
        assert project.p50_nok is not None and project.p85_nok is not None
        assert project.base_estimate_nok == project.cost_total_nok


def test_validator_decisions_fit_the_proposals_schema() -> None:
    from portfolio_optimiser.context.candidates import kuttliste_candidates
    from portfolio_optimiser.context.validator import validate_candidates

    schema = json.loads((SHARED / "schemas" / "proposals.schema.json").read_text("utf-8"))
    project = load_ir_projections(SHARED / "examples" / "portfolio" / "lillevik-school")
    candidates = kuttliste_candidates(project)
    bad = candidates[0].model_copy(update={"affected_codes": ("99.9",)})
    decisions = validate_candidates([*candidates, bad], project)
    document = {
        "schema_version": 1,
        "project_id": project.id,
        "run_id": "r-1",
        "candidates": [
            {
                **c.model_dump(mode="json"),
                "validator": d.model_dump(mode="json"),
                "checker": {"outcome": "not_run"},
            }
            for c, d in zip([*candidates, bad], decisions, strict=True)
        ],
    }
    jsonschema.validate(document, schema)
    assert document["candidates"][-1]["validator"]["outcome"] == "rejected"


def test_a_test_cannot_reach_beyond_loopback() -> None:
    import socket

    from .conftest import NetworkRefused

    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as outside,
        pytest.raises(NetworkRefused),
    ):
        outside.connect(("0.0.0.1", 9))  # unroutable: unguarded it fails locally, sending nothing
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as loopback:
        assert loopback.connect_ex(("127.0.0.1", 9)) != 0  # allowed through; nothing listens
