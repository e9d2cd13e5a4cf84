"""Where a candidate stands after the two falsifiers (DESIGN §4 step 4, §5): one rule, one table.

An expert is asked for a verdict on every candidate the validator accepted, whatever the checker
said (models never decide; the expert's verdict resolves a checker's objection); only the ones the
checker did not block count in the validated saving. The table in ``context.standing``'s docstring
is this test's table.
"""

from __future__ import annotations

from typing import get_args

import pytest

from portfolio_optimiser.context import standing
from portfolio_optimiser.context.decisions import Accepted, Receipt, Rejected, Rule
from portfolio_optimiser.context.models import Candidate
from portfolio_optimiser.context.standing import (
    CheckerWord,
    ValidatorWord,
    awaits_verdict,
    validated,
)
from portfolio_optimiser.pipeline.checker import CheckerOutcome
from portfolio_optimiser.pipeline.outcome import CandidateRun

# (validator, checker, awaits a verdict, counts as validated)
TABLE: list[tuple[ValidatorWord, CheckerWord, bool, bool]] = [
    ("accepted", "approved", True, True),
    ("accepted", "no_verdict", True, True),
    ("accepted", "not_run", True, True),
    ("accepted", "rejected", True, False),
    ("rejected", "not_run", False, False),
    ("rejected", "approved", False, False),
]


def _documented() -> list[tuple[str, str, bool, bool]]:
    rows = []
    for line in (standing.__doc__ or "").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] in get_args(ValidatorWord):
            rows.append((cells[0], cells[1], cells[2] == "yes", cells[3] == "yes"))
    return rows


def test_the_table_is_the_documented_one() -> None:
    assert _documented() == TABLE


def test_the_table_covers_every_checker_word_on_an_accepted_candidate() -> None:
    on_accepted = {checker for validator, checker, _a, _v in TABLE if validator == "accepted"}
    assert on_accepted == set(get_args(CheckerWord))


@pytest.mark.parametrize(("validator", "checker", "awaits", "counts"), TABLE)
def test_a_candidate_stands_as_the_table_says(
    validator: ValidatorWord, checker: CheckerWord, awaits: bool, counts: bool
) -> None:
    assert awaits_verdict(validator) is awaits
    assert validated(validator, checker) is counts


def _run(validator: ValidatorWord, checker: CheckerWord) -> CandidateRun:
    cand = Candidate(
        project_id="depot",
        affected_codes=("02.3",),
        measure_type="standardisation",
        claimed_saving_nok=144000,
    )
    receipt = Receipt(candidate_id=cand.id, project_id="depot", checks=())
    decision = (
        Accepted(candidate_id=cand.id, receipt=receipt)
        if validator == "accepted"
        else Rejected(candidate_id=cand.id, rule=Rule.ARITHMETIC, reason="off", receipt=receipt)
    )
    return CandidateRun(
        candidate=cand,
        validator=decision,
        checker=CheckerOutcome(outcome=checker),
        attempt=1,
        materiality="low",
    )


@pytest.mark.parametrize(("validator", "checker", "awaits", "counts"), TABLE)
def test_a_run_candidate_asks_the_same_rule(
    validator: ValidatorWord, checker: CheckerWord, awaits: bool, counts: bool
) -> None:
    run = _run(validator, checker)
    assert (run.awaits_verdict, run.validated, run.blocked) == (awaits, counts, not counts)
