"""The spend file: the portfolio's token ledger across runs and restarts (``outbox/spend.json``).

It is our own accounting state, so reading is strict: content that is not a valid ledger is an
error naming the file, never zero (reading it as zero would hand back budget already spent).
Writing is atomic and takes a required stamp with no wall-clock default, so the same ledger and
stamp always give the same bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from portfolio_optimiser._atomic import publish_text
from portfolio_optimiser.errors import UserError

__all__ = ["Spend", "SpendFileError", "SpendRun", "read_spend", "write_spend"]


class SpendFileError(UserError):
    """The spend file exists but is not a ledger we wrote; ``str(exc)`` names file and fix."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(
            f"{path}: the spend file {problem}; it is the portfolio's token ledger and is never "
            "read as zero, so restore it from a backup or repair it by hand"
        )
        self.path = path


class SpendRun(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    run_id: str
    project_id: str
    tokens: int = Field(ge=0)
    budget_stop: str | None = None


class Spend(BaseModel):
    """What every pass so far has spent; ``stamp`` is the caller's time of the last write."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    # Every field is required: a file of "{}" read as a fresh ledger would be corrupt as zero.
    schema_version: Literal[1]
    spent_tokens: int = Field(ge=0)
    runs: tuple[SpendRun, ...]
    stamp: str

    @classmethod
    def empty(cls) -> Spend:
        """The ledger before the first pass."""
        return cls(schema_version=1, spent_tokens=0, runs=(), stamp="")

    @model_validator(mode="after")
    def _covers_its_runs(self) -> Spend:
        # A total below its own runs means budget was handed back by an edit.
        runs_total = sum(run.tokens for run in self.runs)
        if self.spent_tokens < runs_total:
            raise ValueError(f"spent_tokens {self.spent_tokens} is below its runs' {runs_total}")
        return self

    def add_run(
        self, *, run_id: str, project_id: str, tokens: int, budget_stop: str | None = None
    ) -> Spend:
        run = SpendRun(run_id=run_id, project_id=project_id, tokens=tokens, budget_stop=budget_stop)
        return self.model_copy(
            update={"spent_tokens": self.spent_tokens + tokens, "runs": (*self.runs, run)}
        )


def read_spend(path: Path) -> Spend:
    """The ledger at ``path``; a missing file is a fresh ledger, anything unreadable an error."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Spend.empty()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpendFileError(path, f"cannot be read ({exc})") from exc
    try:
        json.loads(text)  # for the line and column of a syntax error
    except json.JSONDecodeError as exc:
        raise SpendFileError(
            path, f"is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from exc
    try:
        # Strict JSON mode: "12" is not a token count and true is not 1.
        return Spend.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "top level"
        raise SpendFileError(path, f"is not a valid ledger at {where}: {first['msg']}") from exc


def write_spend(path: Path, spend: Spend, *, stamp: str) -> Spend:
    """Publish ``spend`` atomically under ``stamp``; the same input always gives the same bytes."""
    stamped = spend.model_copy(update={"stamp": stamp})
    text = json.dumps(stamped.model_dump(mode="json"), sort_keys=True, indent=2) + "\n"
    publish_text(path, text)
    return stamped
