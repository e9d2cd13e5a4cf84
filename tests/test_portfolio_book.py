"""The portfolio page kept as a book (issue 19): a page reached by changes — runs replacing a
project's lines, verdicts given, changed and taken away, projects arriving — is the page a book
built afresh from the same lines renders, and its headline figures are the sums of the lines."""

from __future__ import annotations

import json
import random
from decimal import Decimal
from pathlib import Path

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from portfolio_optimiser.config import load_config
from portfolio_optimiser.daemon.ledger import Ledger
from portfolio_optimiser.daemon.once import run_once
from portfolio_optimiser.daemon.portfolio_page import PortfolioPage
from portfolio_optimiser.daemon.processor import Processor
from portfolio_optimiser.daemon.stamps import iso
from portfolio_optimiser.daemon.workspace import Workspace
from portfolio_optimiser.outputs.portfolio import (
    PageCandidate,
    PageOutcome,
    PageVerdict,
    PortfolioBook,
)
from portfolio_optimiser.outputs.report import format_nok

from .synthetic_ns3451 import generate_ns3451

STAMP = "2026-12-03T00:00:00Z"
START = 1_790_000_000.0
ENV = {"PORTFOLIO_OPTIMISER_REASONING_MODE": "ci"}
THIN = [("23.1", "m2", 2)]
CODES = ("21", "22", "23.1", "25", "26")
DECISIONS = ("approved", "approved_with_adjustment", "rejected", "needs_more_info")


def _candidates(rng: random.Random, project_id: str, run: int) -> list[PageCandidate]:
    return [
        PageCandidate(
            project_id,
            f"r{run}",
            f"{project_id}-c{rng.randrange(6)}",  # ids recur across runs, as content ids do
            f"Measure {i} | of {project_id}",
            tuple(rng.sample(CODES, rng.randint(1, 2))),
            Decimal(rng.choice(["150000", "99999.5", "2500000", "150000", "0.25"])),
            rng.choice([None, "2026-11-01, before the tender", "2027-05-01", "forprosjekt", None]),
        )
        for i in range(rng.randint(0, 4))
    ]


def _verdict(rng: random.Random) -> PageVerdict | None:
    if rng.random() < 0.2:
        return None
    return PageVerdict(
        rng.choice(DECISIONS),
        rng.choice([None, Decimal("120000"), Decimal("3000000")]),
        rng.choice([None, Decimal("0.8"), Decimal("1")]),
    )


def _afresh(
    lines: dict[str, list[PageCandidate]], projects: set[str], verdicts: dict[str, PageVerdict]
) -> PortfolioBook:
    return PortfolioBook.of(
        (c for listed in lines.values() for c in listed), projects=projects, verdicts=verdicts
    )


@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=40, deadline=None)
def test_a_page_reached_by_changes_is_the_page_built_afresh(seed: int) -> None:
    rng = random.Random(seed)
    book = PortfolioBook()
    lines: dict[str, list[PageCandidate]] = {}
    projects: set[str] = set()
    verdicts: dict[str, PageVerdict] = {}
    for run in range(40):
        change = rng.random()
        project_id = f"p{rng.randrange(8)}"
        if change < 0.45:
            lines[project_id] = _candidates(rng, project_id, run)
            book.replace(project_id, lines[project_id])
        elif change < 0.9:
            candidate_id = f"p{rng.randrange(8)}-c{rng.randrange(6)}"
            verdict = _verdict(rng)
            if verdict is None:
                verdicts.pop(candidate_id, None)
            else:
                verdicts[candidate_id] = verdict
            book.set_verdict(candidate_id, verdict)
        else:
            projects.add(project_id)
            book.set_projects(projects)
        kept = book.render(thin=THIN, stamp=STAMP)
        assert kept == _afresh(lines, projects, verdicts).render(thin=THIN, stamp=STAMP)


def test_the_headline_is_the_sum_of_the_lines_counted_once() -> None:
    a1 = PageCandidate("a", "r1", "a-1", "Cheaper facade", ("25",), Decimal("100000"))
    a2 = PageCandidate("a", "r1", "a-2", "Less glazing", ("25", "26"), Decimal("50000.5"))
    b1 = PageCandidate("b", "r1", "b-1", "Lower unit price", ("21",), Decimal("200000"))
    book = PortfolioBook.of([a1, a2, b1], projects=["a", "b", "c"], verdicts={})
    book.set_verdict("a-1", PageVerdict("approved", Decimal("80000"), Decimal("0.5")))
    book.set_verdict("b-1", PageVerdict("rejected"))
    # A rerun of a: a-2 is gone from its latest run, and must no longer count.
    book.replace("a", [a1])
    text, svg = book.render(thin=[], stamp=STAMP)
    assert (
        "3 projects; 2 validated candidates in their latest runs, **300 000 NOK** in all: "
        "0 NOK await a verdict, experts approved 100 000 NOK and expect 40 000 NOK to be realised."
    ) in text
    assert f"| a | {format_nok(100000)} | 0 | {format_nok(100000)} | 0 | 40 000 |" in text
    assert "| c | 0 | 0 | 0 | 0 | 0 |" in text
    assert "25 + 26" not in text
    assert "None: every validated candidate has a verdict." in text
    assert "Validated savings by project" in svg


@pytest.mark.parametrize("taken", ["a-1", "a-2"])
def test_the_largest_open_candidates_follow_their_verdicts(taken: str) -> None:
    a1 = PageCandidate("a", "r1", "a-1", "One", ("25",), Decimal("100000"))
    a2 = PageCandidate("a", "r1", "a-2", "Two", ("26",), Decimal("100000"))
    book = PortfolioBook.of([a1, a2], projects=["a"], verdicts={})
    book.set_verdict(taken, PageVerdict("approved"))
    text, _svg = book.render(thin=[], stamp=STAMP)
    largest = text.split("## Largest candidates awaiting a verdict")[1]
    left = ({"a-1", "a-2"} - {taken}).pop()
    assert f"`{left}`" in largest and f"`{taken}`" not in largest
    book.set_verdict(taken, None)
    again = book.render(thin=[], stamp=STAMP)[0].split("## Largest candidates")[1]
    assert again.index("`a-1`") < again.index("`a-2`")  # equal savings: in the run's order


# --- through the daemon -----------------------------------------------------------------------


def _processor(ws: Workspace, ledger: Ledger) -> Processor:
    return Processor(
        ws, load_config(), ledger, lambda: START, structlog.get_logger("test"), environ=ENV
    )


def _fill(ws: Workspace, path: Path, **fields: object) -> Path:
    data = json.loads(path.read_text("utf-8")) | {"rationale": "Checked.", "reviewer": "KE"}
    data.update(fields)
    target = ws.inbox_verdicts / path.name
    tmp = target.with_name(".tmp-" + target.name)
    tmp.write_text(json.dumps(data), encoding="utf-8")
    tmp.rename(target)
    return target


@pytest.mark.loadbearing
def test_the_daemons_page_after_runs_and_verdicts_is_the_page_built_afresh(
    tmp_path: Path,
) -> None:
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    for project in generate_ns3451(7, 10).projects:
        project.write(ws.inbox_projects / project.project_id)
    run_once(ws, load_config(), log=structlog.get_logger("test"), environ=ENV)
    templates = sorted(ws.outbox.glob("runs/*/*/verdicts/*.json"))
    assert len(templates) >= 4, "the generated portfolio gives candidates to judge"
    with Ledger.open(ws.ledger_file) as ledger:
        processor = _processor(ws, ledger)
        page = processor.desk.page
        page.publish(ledger, stamp=STAMP)  # built from the ledger
        decisions = [
            {"decision": "approved", "realization_rate": 0.8},
            {"decision": "approved_with_adjustment", "adjusted_saving_nok": 10_000_000},
            {"decision": "rejected"},
            {"decision": "approved"},
        ]
        for template, fields in zip(templates, decisions, strict=False):
            processor.observe(_fill(ws, template, **fields))  # each changes one candidate
        # An approval edited into a rejection: the page follows the latest word.
        processor.observe(_fill(ws, templates[0], decision="rejected"))
        kept = (ws.outbox / "portfolio.md").read_text("utf-8")
        assert "## Approved above the claim" in kept
        fresh = PortfolioPage(ws, processor.portfolio, structlog.get_logger("test"))
        afresh = fresh.publish(ledger, stamp=iso(START)).read_text("utf-8")
        assert kept == afresh
        # A ledger from before the page was kept there: each run read once, and recorded.
        ledger._db.write("DELETE FROM project_pages")
        again = PortfolioPage(ws, processor.portfolio, structlog.get_logger("test"))
        assert again.publish(ledger, stamp=iso(START)).read_text("utf-8") == afresh
        assert all(page.candidates is not None for page in ledger.records.project_pages())
        processor.close()


def test_open_candidates_whose_decision_point_has_passed_are_listed_until_decided() -> None:
    late = PageCandidate("a", "r1", "a-1", "Standard windows", ("25",), Decimal("640000"),
                         "2026-11-15, before the facade contract")  # fmt: skip
    later = PageCandidate("b", "r1", "b-1", "Reuse masses", ("21",), Decimal("90000"), "2026-10-01")
    future = PageCandidate(
        "b", "r1", "b-2", "Defer the court", ("26",), Decimal("1000"), "2027-09-01"
    )
    phase = PageCandidate(
        "c", "r1", "c-1", "Simpler zoning", ("22",), Decimal("5000"), "forprosjekt"
    )
    book = PortfolioBook.of([late, later, future, phase], projects={"a", "b", "c"}, verdicts={})
    page, _svg = book.render(thin=[], stamp=STAMP)
    section = page.split("## Decision points passed")[1].split("##")[0]
    assert (
        "2 candidate(s) awaiting a verdict whose measure had to be decided before 2026-12-03"
        in section
    )
    rows = [row for row in section.splitlines() if row.startswith("| ") and "`" in row]
    assert [row.split("`")[1] for row in rows] == ["b-1", "a-1"]  # the earliest first
    assert "b-2" not in section and "c-1" not in section
    book.set_verdict("b-1", PageVerdict("approved"))
    page, _svg = book.render(thin=[], stamp=STAMP)
    section = page.split("## Decision points passed")[1].split("##")[0]
    assert "1 candidate(s)" in section and "b-1" not in section
    book.set_verdict("a-1", PageVerdict("rejected"))
    assert "## Decision points passed" not in book.render(thin=[], stamp=STAMP)[0]


def test_outcomes_taken_out_and_put_in_leave_the_page_built_afresh() -> None:
    under = PageOutcome(Decimal("1400000"), Decimal("1500000"), Decimal("1700000"))
    over = PageOutcome(Decimal("1800000"), Decimal("1500000"), Decimal("1700000"))
    between = PageOutcome(Decimal("1600000"), Decimal("1500000"), Decimal("1700000"))
    on = PageOutcome(Decimal("1500000"), Decimal("1500000"), Decimal("1700000"))
    book = PortfolioBook()
    book.replace("u", [], under)
    book.replace("o", [], over)
    book.replace("o", [])  # its latest run has no outcome any more
    book.replace("b", [], between)
    for name, outcome in (("u2", under), ("b2", between), ("p", on)):
        book.replace(name, [], outcome)
    outcomes = {"u": under, "b": between, "u2": under, "b2": between, "p": on}
    afresh = PortfolioBook.of([], projects=set(), verdicts={}, outcomes=outcomes)
    kept = book.render(thin=[], stamp=STAMP)[0]
    assert kept == afresh.render(thin=[], stamp=STAMP)[0]
    assert "5 finished projects: **0 (0%) ended above their P85**" in kept
    assert "the final cost stood +0.0% from P50 on average" in kept
