"""The building owner's two jobs (issue 45): a tender dropped into the inbox is checked post by
post against the portfolio's other tenders and estimates (dear posts are candidates, cheap ones
unbalanced-bid risks that claim nothing), and a price request is priced from it (an expected sum
with P10–P90, the share priced, a bundle with triples). The portfolio is our own generator's
(``tender_portfolio``), shaped as ISY Linker and ISY Beskrivelse write their files, with a truth
the tests hold the figures to."""

from __future__ import annotations

import json
import random
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import structlog

from portfolio_optimiser.config import load_config
from portfolio_optimiser.context.decisions import Accepted, Rejected, Rule
from portfolio_optimiser.context.fit_arrays import quantile_without
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.models import UNBALANCED_BID
from portfolio_optimiser.context.reference import ProjectPrices, ReferenceIndex
from portfolio_optimiser.context.tender import unbalanced_bid_candidates
from portfolio_optimiser.context.validator import validate_candidate
from portfolio_optimiser.daemon.once import run_once
from portfolio_optimiser.daemon.workspace import Workspace

from .tender_portfolio import TenderPortfolio, make_portfolio

ENV = {"CI": "true"}
CHECKED = "tender-00"


def once(ws: Workspace) -> list[object]:
    report = run_once(ws, load_config(), log=structlog.get_logger("test"), environ=ENV)
    assert not report.pending
    return list(report.results)


def latest(ws: Workspace, project: str) -> Path:
    return max((ws.outbox / "runs" / project).iterdir(), key=lambda p: p.stat().st_mtime_ns)


@pytest.fixture(scope="module")
def owner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workspace, TenderPortfolio]]:
    """A workspace holding 12 tenders and estimates, then the tender to check and the price
    request, each dropped into the inbox as the files they are."""
    root = tmp_path_factory.mktemp("owner")
    portfolio = make_portfolio(root / "files", tenders=10, estimates=2)
    ws = Workspace.at(root / "ws", environ={})
    ws.ensure()
    for file in portfolio.files:
        if file.stem != CHECKED:
            shutil.copy(file, ws.inbox_projects / file.name)
    once(ws)
    shutil.copy(root / "files" / f"{CHECKED}.xml", ws.inbox_projects)
    assert portfolio.request is not None
    shutil.copy(portfolio.request, ws.inbox_projects)
    once(ws)
    yield ws, portfolio


def _rows(report: str, heading: str) -> list[str]:
    part = report.split(heading)[1].split("\n\n", 2)[1]
    return [row for row in part.splitlines() if row.startswith("| `c-")]


@pytest.mark.loadbearing
def test_a_tender_dropped_in_the_inbox_lists_dear_and_cheap_posts_with_their_comparables(
    owner: tuple[Workspace, TenderPortfolio],
) -> None:
    ws, portfolio = owner
    run = latest(ws, CHECKED)
    report = (run / "report.md").read_text("utf-8")
    planted = {p.postnr: p.kind for p in portfolio.planted if p.project == CHECKED}
    dear = _rows(report, "**Priced far above**")
    cheap = _rows(report, "**Priced far below**")
    assert dear and cheap
    said = re.compile(r"\d+ projects: median [\d ,]+, P10–P90 [\d ,]+–[\d ,]+ NOK/(m|m2|stk)")
    for row in dear + cheap:
        assert said.search(row), row  # each measured against its comparables, by number
    found_cheap = {row.split("| ")[2].split()[0] for row in cheap}
    assert found_cheap <= {n for n, kind in planted.items() if kind == "cheap"}
    found_dear = {row.split("| ")[2].split()[0] for row in dear}
    assert {n for n, kind in planted.items() if kind == "dear"} & found_dear
    assert "of the tender's sum**" in report
    assert "no NS 3420 code (36.369.99)" in report  # the lump sum without a code, named

    # A risk claims nothing: the validated saving is the dear posts' alone.
    proposals = json.loads((run / "proposals.json").read_text("utf-8"))
    risks = [c for c in proposals["candidates"] if c["measure_type"] == UNBALANCED_BID]
    assert len(risks) == len(cheap)
    assert all(c["claimed_saving_nok"] == 0 and c["at_stake_nok"] > 0 for c in risks)
    dear_total = sum(
        c["claimed_saving_nok"]
        for c in proposals["candidates"]
        if c["measure_type"] != UNBALANCED_BID and c["validator"]["outcome"] == "accepted"
    )
    shown = f"**{dear_total:,.0f} NOK**".replace(",", " ")
    assert (
        f"Validated saving (accepted by the validator and not blocked by the checker): {shown}"
        in report
    )
    assert all(
        c["affected_codes"][0] not in report.split("## Validated savings by cost code")[1]
        for c in risks
    )


@pytest.mark.loadbearing
def test_a_price_request_is_priced_from_the_portfolio_near_the_generators_truth(
    owner: tuple[Workspace, TenderPortfolio],
) -> None:
    ws, portfolio = owner
    run = latest(ws, "request")
    report = (run / "report.md").read_text("utf-8")
    section = report.split("## What this request should cost")[1].split("\n## ")[0]
    share = re.search(r"(\d+) of (\d+) posts with a quantity, \*\*(\d+) %\*\*", section)
    assert share is not None
    priced, whole = int(share[1]), int(share[2])
    assert whole == len(portfolio.request_truth) + 1  # and the lump sum without a code
    assert priced == len(portfolio.request_truth)
    figures = re.search(
        r"Expected sum of the priced posts \*\*([\d ]+) NOK\*\*, P10–P90 ([\d ]+)–([\d ]+) NOK",
        section,
    )
    assert figures is not None
    expected, low, high = (float(f.replace(" ", "")) for f in figures.groups())
    truth = sum(portfolio.request_truth.values())
    # The oracle: the generator's own prices at the portfolio's level. The median of twelve
    # projects' noisy prices lands within a few per cent of it; the truth inside P10–P90.
    assert abs(expected - truth) / truth < 0.06
    assert low < truth < high
    bundle = load_ir_projections(run / "priced")
    assert bundle.derived_from and bundle.derived_from.startswith("reference ")
    assert bundle.derived_from.removeprefix("reference ") in section
    priced_lines = [ln for ln in bundle.cost_lines if ln.amount_nok > 0]
    assert len(priced_lines) == priced
    assert all(ln.min_nok is not None and ln.max_nok is not None for ln in priced_lines)
    assert sum(ln.amount_nok for ln in priced_lines) == pytest.approx(expected, abs=1)
    assert ProjectPrices.of(bundle).classes == ()  # never a comparable of another project


@pytest.mark.loadbearing
def test_an_expert_rejects_an_unbalanced_bid_and_it_is_not_asked_again(
    owner: tuple[Workspace, TenderPortfolio],
) -> None:
    ws, portfolio = owner
    run = latest(ws, CHECKED)
    proposals = json.loads((run / "proposals.json").read_text("utf-8"))
    risk = next(c for c in proposals["candidates"] if c["measure_type"] == UNBALANCED_BID)
    template = json.loads((run / "verdicts" / f"{risk['id']}.json").read_text("utf-8"))
    assert template["candidate"]["at_stake_nok"] == risk["at_stake_nok"]
    template |= {"decision": "rejected", "rationale": "The quantity is fixed.", "reviewer": "KE"}
    (ws.inbox_verdicts / f"{risk['id']}.json").write_text(json.dumps(template), "utf-8")
    [taken] = once(ws)
    assert (taken.kind, taken.state) == ("verdict", "ingested")  # type: ignore[attr-defined]
    # Its run reused the conclusion standing on the candidate: the verdict validates that one.
    assert taken.message == "rejected by KE"  # type: ignore[attr-defined]
    # The consultant sends the tender again under a new name: a new version of the project.
    source = next(f for f in portfolio.files if f.stem == CHECKED)
    revised = source.read_text("utf-8").replace(f">{CHECKED}<", f">{CHECKED} rev B<", 1)
    assert revised != source.read_text("utf-8")
    (ws.inbox_projects / source.name).write_text(revised, "utf-8")
    once(ws)
    again = latest(ws, CHECKED)
    assert again != run
    report = (again / "report.md").read_text("utf-8")
    row = next(r for r in report.splitlines() if r.startswith(f"| `{risk['id']}`"))
    assert "not checked again" in row and "rejected" in row
    assert not (again / "verdicts" / f"{risk['id']}.json").exists()


def test_a_risk_is_checked_by_its_own_figures(owner: tuple[Workspace, TenderPortfolio]) -> None:
    """The validator recomputes a risk's sum at stake from the reference and refuses one that
    claims a saving or a sum its reference does not give."""
    ws, _portfolio = owner
    projects = {p.name: load_ir_projections(p) for p in ws.bundles_projects.iterdir()}
    tender = projects.pop(CHECKED)
    projects.pop("request")
    references = ReferenceIndex.of(projects.values()).assess(tender)
    risks = unbalanced_bid_candidates(tender, references)
    assert risks
    risk = risks[0]
    assert isinstance(validate_candidate(risk, tender, references=references), Accepted)
    more = risk.model_copy(update={"at_stake_nok": float(risk.at_stake_nok or 0) * 2})
    refused = validate_candidate(more, tender, references=references)
    assert isinstance(refused, Rejected) and refused.rule is Rule.EVIDENCE_INSIDE_BUNDLE
    assert "the sum at stake is" in refused.reason
    claims = risk.model_copy(update={"claimed_saving_nok": 1000, "saving_literal": "1000"})
    refused = validate_candidate(claims, tender, references=references)
    assert isinstance(refused, Rejected) and refused.rule is Rule.SAVING_POSITIVE
    estimate = tender.model_copy(update={"document": None})
    assert unbalanced_bid_candidates(estimate, references) == []  # a tender's job only


def test_a_percentile_without_one_value_is_numpys_on_the_rest() -> None:
    rng = random.Random(7)
    for _ in range(300):
        values = sorted(rng.uniform(1, 100) for _ in range(rng.randint(2, 40)))
        gone = rng.choice(values)
        rest = list(values)
        rest.remove(gone)
        for q in (0.1, 0.5, 0.9):
            assert quantile_without(values, gone, q) == pytest.approx(float(np.quantile(rest, q)))
            assert quantile_without(values, None, q) == pytest.approx(float(np.quantile(values, q)))
