"""What a claimed job is, as a table: every outcome of ``decide`` and the rows that choose it."""

from __future__ import annotations

import dataclasses

import pytest

from portfolio_optimiser.daemon.decide import (
    ClaimView,
    Decision,
    Duplicate,
    LedgerView,
    New,
    Refused,
    Resume,
    TakeOver,
    Wait,
    decide,
)
from portfolio_optimiser.daemon.job import Job, Stage
from portfolio_optimiser.daemon.ledger import Item

HERE, ELSEWHERE = "/ws/.state/claimed/school.1", "/ws/.state/claimed/school.0"
CLAIM = ClaimView("a" * 64, HERE, tokens=100)


def job(stage: Stage, claimed: str = HERE) -> Job:
    return Job("a" * 64, "school", claimed, claimed, "2026-12-01T00:00:00Z", False, stage)


def item(state: str, error: str | None = None) -> Item:
    return Item(
        "a" * 64, "bundle", "school", state, 0, None, "school run r1", None, error,  # type: ignore[arg-type]
        "2026-12-01T00:00:00Z", "2026-12-01T00:00:00Z",
    )  # fmt: skip


def view(**changes: object) -> LedgerView:
    nothing = LedgerView(
        job=None, item=None, job_input_here=False, outputs_stand=False, held=False, budget_left=500
    )
    return dataclasses.replace(nothing, **changes)  # type: ignore[arg-type]


TABLE: list[tuple[str, LedgerView, Decision]] = [
    ("never seen, funded", view(), New()),
    ("never seen, the budget cannot fund it", view(budget_left=99), Wait(99)),
    ("never seen, already holding its share", view(budget_left=0, held=True), New()),
    (
        "its own job cut off mid-way",
        view(job=job(Stage.RAN), item=item("claimed")),
        Resume(job(Stage.RAN)),
    ),
    (
        "its own job put off before its run",
        view(job=job(Stage.CLAIMED), item=item("retry"), budget_left=0),
        Resume(job(Stage.CLAIMED)),
    ),
    (
        "its own job settled (dropped again after it ran)",
        view(job=job(Stage.SETTLED), item=item("done")),
        Duplicate("school run r1"),
    ),
    (
        "another claim's job, still under way there",
        view(job=job(Stage.RAN, ELSEWHERE), item=item("claimed"), job_input_here=True),
        Duplicate("school run r1"),
    ),
    ("the identity ran and its job is gone", view(item=item("done")), Duplicate("school run r1")),
    (
        "the identity failed before",
        view(item=item("failed", "school: no project.md")),
        Refused("school: no project.md"),
    ),
    (
        "the identity failed, with no reason kept",
        view(item=item("failed")),
        Refused("it failed before with the same content"),
    ),
    (
        "another claim's job ran, then was set aside; its outputs stand",
        view(job=job(Stage.PUBLISHED, ELSEWHERE), item=item("retry"), outputs_stand=True),
        TakeOver(job(Stage.PUBLISHED, ELSEWHERE)),
    ),
    (
        "another claim's job ran, then was set aside; its outputs are gone",
        view(job=job(Stage.RAN, ELSEWHERE), item=item("retry")),
        New(afresh=True),
    ),
    (
        "its outputs are gone and the budget cannot fund a new run",
        view(job=job(Stage.RAN, ELSEWHERE), item=item("retry"), budget_left=10),
        Wait(10),
    ),
    (
        "another claim's job never ran and its input is gone (set aside by a kill)",
        view(job=job(Stage.CLAIMED, ELSEWHERE), item=item("claimed")),
        New(),
    ),
]


@pytest.mark.loadbearing
@pytest.mark.parametrize(("why", "ledger", "decision"), TABLE, ids=[row[0] for row in TABLE])
def test_decide(why: str, ledger: LedgerView, decision: Decision) -> None:
    assert decide(CLAIM, ledger) == decision, why


def test_the_table_covers_every_outcome() -> None:
    covered = {type(decision) for _why, _view, decision in TABLE}
    assert covered == {New, Resume, Duplicate, Refused, TakeOver, Wait}
    assert {d.afresh for _w, _v, d in TABLE if isinstance(d, New)} == {True, False}
