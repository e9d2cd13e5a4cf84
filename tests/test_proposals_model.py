"""``proposals.json`` read back (DESIGN §3 "Outputs"): one typed document, one reader, one error.

What the writer publishes, :func:`read_proposals` reads back field for field, with the same
standing for each candidate as the run gave it; a file that is not a run's proposals is one error
that names the file and the field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from portfolio_optimiser.context.decisions import Accepted, Receipt, Rejected, Rule
from portfolio_optimiser.context.models import Candidate
from portfolio_optimiser.context.standing import CheckerWord
from portfolio_optimiser.outputs import ProposalsError, read_proposals, write_run_outputs
from portfolio_optimiser.pipeline.checker import CheckerOutcome
from portfolio_optimiser.pipeline.outcome import CandidateRun, RunResult


def _run(
    saving: int | float, codes: tuple[str, ...], *, ok: bool, checker: CheckerWord, **kw: Any
) -> CandidateRun:
    cand = Candidate(
        project_id="depot",
        affected_codes=codes,
        measure_type=kw.pop("measure_type", "standardisation"),
        claimed_saving_nok=saving,
        evidence=("cost/02.3.md",),
        **kw,
    )
    receipt = Receipt(candidate_id=cand.id, project_id="depot", checks=())
    decision = (
        Accepted(candidate_id=cand.id, receipt=receipt)
        if ok
        else Rejected(candidate_id=cand.id, rule=Rule.ARITHMETIC, reason="off", receipt=receipt)
    )
    return CandidateRun(
        candidate=cand,
        validator=decision,
        checker=CheckerOutcome(outcome=checker, reason="counts 01 twice"),
        attempt=1,
        materiality="low",
        assessment="a-1" if ok else None,
        disagreement="d-1" if checker == "rejected" else None,
    )


def _result() -> RunResult:
    return RunResult(
        project_id="depot",
        run_id="r1",
        task="t",
        ran_locally=False,
        proposer=None,
        stop_reason="local_rules",
        candidates=(
            _run(144000, ("02.3",), ok=True, checker="approved", title="Standard panels"),
            _run(
                90000.0,
                ("01", "02.4"),
                ok=True,
                checker="rejected",
                measure_type="reuse",
                unit="m2",
                origin="measure-option:m-1",
            ),
            _run(9_000_000, ("02.3",), ok=False, checker="not_run", measure_type="removal"),
        ),
    )


@pytest.fixture
def published(tmp_path: Path) -> tuple[RunResult, Path]:
    result = _result()
    folder = write_run_outputs(
        result, outbox=tmp_path / "outbox", run_id="r1", stamp="2026-11-30T12:00:00Z", schema_ref=""
    )
    return result, folder / "proposals.json"


def test_what_the_writer_publishes_reads_back_field_for_field(
    published: tuple[RunResult, Path],
) -> None:
    result, path = published
    doc = read_proposals(path)
    assert (doc.project_id, doc.run_id) == ("depot", "r1")
    assert len(doc.candidates) == len(result.candidates)
    for read, run in zip(doc.candidates, result.candidates, strict=True):
        cand = run.candidate
        assert (read.id, read.project_id, read.title) == (cand.id, cand.project_id, cand.title)
        assert read.affected_codes == cand.affected_codes
        assert (read.measure_type, read.unit, read.origin) == (
            cand.measure_type,
            cand.unit,
            cand.origin,
        )
        assert read.claimed_saving_nok == cand.claimed_saving_nok
        assert read.saving_literal == cand.saving_literal  # 90000.0 stays "90000.0"
        assert (read.validator, read.checker) == (run.validator.outcome, run.checker.outcome)
        assert (read.assessment, read.disagreement) == (run.assessment, run.disagreement)


def test_a_candidate_read_back_stands_as_the_run_gave_it(
    published: tuple[RunResult, Path],
) -> None:
    result, path = published
    doc = read_proposals(path)
    assert [c.awaits_verdict for c in doc.candidates] == [True, True, False]
    assert [c.validated for c in doc.candidates] == [True, False, False]
    assert [c.awaits_verdict for c in doc.candidates] == [
        r.awaits_verdict for r in result.candidates
    ]
    assert [c.validated for c in doc.candidates] == [r.validated for r in result.candidates]
    # The templates the writer left are exactly the candidates that await a verdict.
    templates = sorted(p.stem for p in (path.parent / "verdicts").glob("*.json"))
    assert templates == sorted(c.id for c in doc.candidates if c.awaits_verdict)


def _set(*where: str | int, to: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        node: Any = doc
        for step in where[:-1]:
            node = node[step]
        node[where[-1]] = to

    return edit


def _drop(*where: str | int) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        node: Any = doc
        for step in where[:-1]:
            node = node[step]
        del node[where[-1]]

    return edit


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (_drop("project_id"), "field project_id"),
        (_set("schema_version", to=2), "field schema_version"),
        (_set("candidates", to={}), "field candidates"),
        (_set("candidates", 1, to=[]), "field candidates/1"),
        (
            _set("candidates", 0, "claimed_saving_nok", to=True),
            "field candidates/0/claimed_saving_nok",
        ),
        (_drop("candidates", 1, "saving_literal"), "field candidates/1/saving_literal"),
        (_set("candidates", 0, "affected_codes", to="02.3"), "field candidates/0/affected_codes"),
        (
            _set("candidates", 2, "validator", "outcome", to="maybe"),
            "field candidates/2/validator/outcome",
        ),
        (
            _set("candidates", 1, "checker", "outcome", to="blocked"),
            "field candidates/1/checker/outcome",
        ),
        (_set("candidates", 0, "assessment", to=7), "field candidates/0/assessment"),
    ],
)
def test_a_malformed_document_is_one_error_naming_the_file_and_the_field(
    published: tuple[RunResult, Path], edit: Callable[[dict[str, Any]], None], field: str
) -> None:
    _result, path = published
    doc = json.loads(path.read_text("utf-8"))
    edit(doc)
    path.write_text(json.dumps(doc), "utf-8")
    with pytest.raises(ProposalsError) as caught:
        read_proposals(path)
    assert str(path) in str(caught.value)
    assert f"({field}:" in str(caught.value)
    assert isinstance(caught.value, ValueError)  # readers that skip a bad run catch ValueError


def test_broken_json_is_named_by_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "proposals.json"
    path.write_text('{"project_id": "depot",\n  "candidates": [,]}\n', "utf-8")
    with pytest.raises(ProposalsError, match=r"proposals\.json is not a run's proposals \(line 2"):
        read_proposals(path)


def test_a_missing_file_is_the_operating_system_s_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_proposals(tmp_path / "proposals.json")
