"""What the steps after publishing need of a run — from its result, or, after a crash, from the
files it already published (so the run is never done twice)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from portfolio_optimiser.pipeline.outcome import RunResult

__all__ = ["Published"]


@dataclass(frozen=True)
class Published:
    """What the steps after publishing need of a run, from its result or from its files."""

    project_id: str
    tokens: int
    budget_stop: str | None
    candidates: list[tuple[str, str, str | None, str | None]]
    folder: Path

    @classmethod
    def of(cls, result: RunResult, folder: Path) -> Published:
        rows = [
            (
                c.candidate.id,
                key_json(
                    c.candidate.project_id,
                    c.candidate.affected_codes,
                    c.candidate.measure_type,
                    c.candidate.saving_literal,
                ),
                c.assessment,
                c.disagreement,
            )
            for c in result.candidates
            if c.validator.outcome == "accepted"  # only these get a template and await a verdict
        ]
        tokens = result.tokens["input_tokens"] + result.tokens["output_tokens"]
        return cls(result.project_id, tokens, result.budget_stop, rows, folder)

    @classmethod
    def read(cls, folder: Path) -> Published:
        proposals = json.loads((folder / "proposals.json").read_text("utf-8"))
        provenance = json.loads((folder / "provenance.json").read_text("utf-8"))
        rows = [
            (
                c["id"],
                key_json(
                    c["project_id"], c["affected_codes"], c["measure_type"], c["saving_literal"]
                ),
                c.get("assessment"),
                c.get("disagreement"),
            )
            for c in proposals["candidates"]
            if c["validator"]["outcome"] == "accepted"
        ]
        tokens = sum(int(v) for v in (provenance.get("tokens") or {}).values())
        return cls(proposals["project_id"], tokens, provenance.get("budget_stop"), rows, folder)


def key_json(project_id: str, codes: Any, measure_type: str, literal: str) -> str:
    return json.dumps(
        {
            "project_id": project_id,
            "affected_codes": list(codes),
            "measure_type": measure_type,
            "saving_literal": literal,
        }
    )
