"""A project's uncertainty frame: read from its bundle, simulated, and carried into its outputs."""

from __future__ import annotations

import asyncio
import json
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
import structlog

from portfolio_optimiser import outputs
from portfolio_optimiser.cli import main
from portfolio_optimiser.config import load_config
from portfolio_optimiser.context.candidates import kuttliste_candidates
from portfolio_optimiser.context.decisions import Accepted, Decision, Rejected, Rule, RuleOutcome
from portfolio_optimiser.context.errors import IRError
from portfolio_optimiser.context.frame import FrameRule, backtest_of, candidate_delta, frame_of
from portfolio_optimiser.context.imports import ImportRefused, read_estimate, write_bundle
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.models import Candidate, Project
from portfolio_optimiser.context.uncertainty import STABLE_TO, Element, simulate
from portfolio_optimiser.context.validator import validate_candidate, validate_candidates
from portfolio_optimiser.daemon.ledger import Ledger
from portfolio_optimiser.daemon.once import run_once
from portfolio_optimiser.daemon.portfolio_page import PortfolioPage
from portfolio_optimiser.daemon.processor import Processor
from portfolio_optimiser.daemon.workspace import Workspace
from portfolio_optimiser.learning import VerdictStore
from portfolio_optimiser.outputs._markdown import format_nok
from portfolio_optimiser.outputs.frame_report import decision_date
from portfolio_optimiser.outputs.portfolio import (
    PortfolioBook,
    page_json,
    read_outcome,
    read_page,
)
from portfolio_optimiser.outputs.proposals import read_proposals
from portfolio_optimiser.pipeline.run import run_project
from portfolio_optimiser.reasoning.modes import Mode
from portfolio_optimiser.resources import load_schema

from .conftest import EXAMPLES
from .pipeline_helpers import CHECKER, PROPOSER, budget, factory, session, settings, write

SEED = 3459
CI = {"PORTFOLIO_OPTIMISER_REASONING_MODE": "ci"}
RULE = FrameRule(seed=SEED)
"""Lines without a triple estimate taken as certain, as a config with spread = [1, 1] has them."""


def line(code: str, amount: float, *, low: float | None = None, high: float | None = None,
         **extra: object) -> str:  # fmt: skip
    fields = [f'code: "{code}"', f"amount_nok: {amount}"]
    if low is not None and high is not None:
        fields += [f"min_nok: {low}", f"max_nok: {high}"]
    fields += [f"{key}: {value}" for key, value in extra.items()]
    return "---\ntype: cost-line\n" + "\n".join(fields) + "\n---\nA line.\n"


def bundle(root: Path, lines: dict[str, str], *, project: str = "") -> Path:
    links = "".join(f"* [{name}]({name})\n" for name in lines)
    write(root, "index.md", "# Hall\n\n* [Project](project.md)\n" + links)
    write(
        root,
        "project.md",
        f"---\ntype: project\nid: hall\nname: Hall\ncurrency: NOK\n{project}---\nA hall.\n",
    )
    for name, text in lines.items():
        write(root, name, text)
    return root


def cut(codes: tuple[str, ...], saving: float, title: str = "cut") -> Candidate:
    return Candidate(
        project_id="hall",
        affected_codes=codes,
        measure_type="standardisation",
        claimed_saving_nok=saving,
        title=title,
    )


def hall_with(tmp_path: Path, more: dict[str, str]) -> Project:
    """A hall: a frame (02) and a roof (03) with ranges, moving together at 0.7, and ``more``."""
    frame = line("02", 1_000_000, low=900_000, high=2_000_000, correlation_group="g")
    roof = line("03", 500_000, low=450_000, high=900_000, correlation_group="g")
    return load_ir_projections(
        bundle(
            tmp_path,
            {"frame.md": frame, "roof.md": roof, **more},
            project="correlation:\n  g: 0.7\n",
        )
    )


def hall(tmp_path: Path) -> Project:
    """The hall with a certain site (01) and a kuttliste item on it."""
    item = (
        "---\ntype: measure-option\nid: k-01\nmeasure_type: removal\n"
        'affected_codes: ["01"]\nestimated_saving_nok: 40000\n---\nCut.\n'
    )
    return hall_with(tmp_path, {"site.md": line("01", 300_000), "k.md": item})


def test_every_problem_of_a_frame_is_named_at_once_with_its_file_and_field(tmp_path: Path) -> None:
    root = bundle(
        tmp_path,
        {
            "a.md": line("01", 100, low=90, high=130, correlation_group="ground"),
            "b.md": line("02", 200, low=150, high=190),
            "c.md": line("03", 100, low=90, high=200, distribution="normal"),
        },
        project="correlation:\n  market: 1.5\n",
    )
    with pytest.raises(IRError) as caught:
        load_ir_projections(root)
    message = str(caught.value)
    assert "project.md" in message and "'market': 1.5 is not a coefficient from 0 to 1" in message
    assert "b.md" in message and "amount_nok 200 is outside min_nok 150 to max_nok 190" in message
    assert "c.md" in message and "distribution normal is symmetric" in message


def test_a_group_the_project_does_not_declare_is_named_with_the_fix(tmp_path: Path) -> None:
    root = bundle(tmp_path, {"a.md": line("01", 100, low=90, high=130, correlation_group="ground")})
    with pytest.raises(IRError, match=r"a\.md field correlation_group: 'ground' is not a group"):
        load_ir_projections(root)


def test_a_project_without_a_triple_estimate_has_no_frame(tmp_path: Path) -> None:
    project = load_ir_projections(bundle(tmp_path, {"a.md": line("01", 100)}))
    assert frame_of(project, [], accepted=frozenset(), rule=RULE) is None


def test_the_frame_says_what_it_assumed_and_holds_the_kuttliste_to_p85(tmp_path: Path) -> None:
    project = hall(tmp_path)
    items = kuttliste_candidates(project)
    frame = frame_of(project, items, accepted=frozenset(c.id for c in items), rule=RULE)
    assert frame is not None
    assert frame.uncertain == ("02", "03") and frame.certain == ("01",)
    assert frame.correlation == {"g": 0.7} and frame.groups == {"g": ("02", "03")}
    assert frame.kuttliste_nok == 40_000
    assert frame.kostnadsramme_nok == pytest.approx(frame.p85_nok - 40_000)
    assert frame.p10_nok < frame.p50_nok < frame.p85_nok < frame.p90_nok
    assert frame.contributors[0].code == "02"  # the widest line, largest first
    assert len(frame.curve) == 101 and list(frame.curve) == sorted(frame.curve)


def test_each_candidate_moves_p50_and_p85_and_the_accepted_ones_together(tmp_path: Path) -> None:
    site = cut(("01",), 60_000, "half the site")
    frame_cut = cut(("02",), 200_000, "a fifth of the frame")
    nowhere = cut(("99",), 10_000)
    again = cut(("02",), 900_000, "most of the frame again")
    candidates = [site, frame_cut, nowhere, again]
    accepted = frozenset({site.id, frame_cut.id, again.id})
    frame = frame_of(hall(tmp_path), candidates, accepted=accepted, rule=RULE)
    assert frame is not None
    # A measure is a sum off its lines unless it says otherwise (effect: fixed): its saving off
    # every quantile, exactly, on a certain line and on an uncertain one alike.
    for candidate, saving in ((site, 60_000), (frame_cut, 200_000)):
        assert frame.deltas[candidate.id].p50_nok == pytest.approx(-saving, abs=1e-6)
        assert frame.deltas[candidate.id].p85_nok == pytest.approx(-saving, abs=1e-6)
        assert frame.deltas[candidate.id].p85_error_nok == pytest.approx(0.0, abs=1e-6)
    assert nowhere.id not in frame.deltas
    # Together, a line is never cut past its amount: 200 000 + 900 000 off 02's 1 000 000 takes
    # 1 000 000 off it, once.
    assert frame.joint is not None and set(frame.adopted) == accepted
    assert frame.joint.p50_nok == pytest.approx(-1_060_000, abs=1e-6)
    assert frame.joint.p85_nok == pytest.approx(-1_060_000, abs=1e-6)


def test_a_proportional_measure_takes_its_share_of_the_spread_too(tmp_path: Path) -> None:
    project = hall_with(tmp_path, {"k2.md": option(200_000, effect="proportional")})
    [candidate] = kuttliste_candidates(project)
    delta = candidate_delta(project, candidate, RULE)
    assert delta is not None
    # A fifth of a right-skewed line: more off P85 than off P50, more than the saving at P85.
    assert delta.p85_nok < delta.p50_nok < 0 and delta.p85_nok < -200_000
    assert 0 < delta.p85_error_nok < 0.05 * abs(delta.p85_nok)


@pytest.fixture(scope="module")
def school_outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The example school run locally (mode ci, as CI runs it) and its files built."""
    reasoning = session(tmp_path_factory.mktemp("frame"), PROPOSER, CHECKER, mode=Mode.CI)
    run = run_project(EXAMPLES / "portfolio" / "lillevik-school", verdicts=VerdictStore(),
                      budget=budget(), settings=settings(), reasoning=reasoning, run_id="r1",
                      client_factory=factory({}))  # fmt: skip
    result = asyncio.run(run)
    outbox = tmp_path_factory.mktemp("outbox")
    files: dict[str, bytes] = outputs.build_run_files(
        result, outbox=outbox, run_id="r1", stamp="2026-12-05T08:00:00Z", schema_ref=""
    )
    return files


def test_the_example_school_reports_its_frame_with_both_charts(
    school_outputs: dict[str, bytes],
) -> None:
    doc = json.loads(school_outputs["proposals.json"])
    jsonschema.Draft202012Validator(load_schema("proposals.schema.json")).validate(doc)
    frame = doc["frame"]
    assert frame["seed"] == SEED and frame["certain"] and frame["uncertain"]
    # Lillevik states its approved frame: it governs, and the simulation is a cross-check.
    assert frame["basis"] == "stated" and frame["stated_p85_nok"] is not None
    assert frame["kostnadsramme_nok"] == pytest.approx(
        frame["stated_p85_nok"] - frame["kuttliste_nok"]
    )
    assert frame["simulated_kostnadsramme_nok"] == pytest.approx(
        frame["p85_nok"] - frame["kuttliste_nok"]
    )
    for candidate in doc["candidates"]:
        assert candidate["delta_p50_nok"] < 0 and candidate["delta_p85_nok"] < 0
        assert frame["deltas"][candidate["id"]]["p85_nok"] == candidate["delta_p85_nok"]
    report = school_outputs["report.md"].decode("utf-8")
    assert "## The uncertainty frame: P50 and P85" in report
    assert "| kostnadsramme (P85 less the kuttliste) |" in report
    assert "**Taken as certain, at their amount**" in report
    assert "![The S-curve: the cost at each probability](frame-s-curve.svg)" in report
    # Ranked as a kuttliste is read: the next decision point first, then the largest cut to P85.
    section = report.split("## The uncertainty frame")[1].split("![")[0]
    rows = [row for row in section.splitlines() if row.startswith("| `c-")]
    when = {c["id"]: decision_date(c["decide_by"]) for c in doc["candidates"]}
    cuts = {c["id"]: c["delta_p85_nok"] for c in doc["candidates"]}
    shown = [row.split("`")[1] for row in rows]
    assert len(shown) == len(doc["candidates"]) and None not in when.values()
    assert shown == sorted(shown, key=lambda cid: (when[cid], cuts[cid]))
    assert len(set(when.values())) > 2  # the order is the dates', not the table's by chance
    for name in ("frame-s-curve.svg", "frame-contributors.svg"):
        svg = ET.fromstring(school_outputs[name])
        assert svg.tag.endswith("svg") and not svg.findall(".//{*}script")


def test_the_frame_is_the_same_from_the_same_bundle_and_seed(
    school_outputs: dict[str, bytes],
) -> None:
    first = json.loads(school_outputs["proposals.json"])["frame"]
    project = load_ir_projections(EXAMPLES / "portfolio" / "lillevik-school")
    again = frame_of(project, [], accepted=frozenset(), rule=RULE)
    assert again is not None
    assert (again.p50_nok, again.p85_nok) == (first["p50_nok"], first["p85_nok"])


def option(saving: int, **claims: object) -> str:
    fields = "".join(f"{key}: {value}\n" for key, value in claims.items())
    return (
        "---\ntype: measure-option\nid: k-02\ntitle: Lighter frame\nmeasure_type: simplification\n"
        f'affected_codes: ["02"]\nestimated_saving_nok: {saving}\n{fields}---\nLighter.\n'
    )


def validated(project: Project, seed: int = SEED) -> Decision:
    [candidate] = kuttliste_candidates(project)
    return validate_candidate(candidate, project, frame=FrameRule(seed, 10_000))


@pytest.mark.loadbearing
def test_the_validator_reproduces_a_claimed_effect_on_p50_and_p85_or_refuses_it(
    tmp_path: Path,
) -> None:
    plain = hall_with(tmp_path / "plain", {"k2.md": option(150_000, effect="proportional")})
    [candidate] = kuttliste_candidates(plain)
    # An accurate figure, from another seed and many more samples than the validator draws.
    delta = candidate_delta(plain, candidate, FrameRule(SEED + 7, 160_000))
    assert delta is not None and delta.p85_nok < delta.p50_nok < 0
    p50, p85 = round(delta.p50_nok), round(delta.p85_nok)

    def claiming(name: str, **claims: object) -> Project:
        return hall_with(
            tmp_path / name, {"k2.md": option(150_000, effect="proportional", **claims)}
        )

    held = claiming("held", delta_p50_nok=p50, delta_p85_nok=p85)
    for seed in (SEED, SEED + 1, SEED + 2):
        decision = validated(held, seed=seed)
        assert isinstance(decision, Accepted), (seed, decision)
        check = decision.receipt.check(Rule.FRAME_REPRODUCED)
        assert check.outcome is RuleOutcome.PASSED and "reproduces delta_p50_nok" in check.detail
        assert "3 standard errors" in check.detail
    # One five of the validator's standard errors off is refused, with what the frame gives.
    own = candidate_delta(plain, candidate, FrameRule(SEED, 10_000))
    assert own is not None and own.p85_error_nok > 0
    wrong_by = round(5 * own.p85_error_nok)
    wrong = claiming("wrong", delta_p85_nok=round(own.p85_nok) - wrong_by)
    refused = validated(wrong)
    assert isinstance(refused, Rejected) and refused.rule is Rule.FRAME_REPRODUCED
    assert f"it claims delta_p85_nok {round(own.p85_nok) - wrong_by};" in refused.reason
    assert "gives delta_p85_nok " in refused.reason and "negative where" in refused.reason
    assert "correct the claim or remove it" in refused.reason


def test_a_claimed_effect_on_a_project_with_no_range_is_refused(tmp_path: Path) -> None:
    root = bundle(
        tmp_path,
        {"frame.md": line("02", 1_000_000), "k2.md": option(150_000, delta_p85_nok=-150_000)},
    )
    decision = validated(load_ir_projections(root))
    assert isinstance(decision, Rejected) and decision.rule is Rule.FRAME_REPRODUCED
    assert "no line of the project carries a triple estimate" in decision.reason


def test_a_candidate_that_claims_nothing_passes_the_frame_rule(tmp_path: Path) -> None:
    decision = validated(hall_with(tmp_path, {"k2.md": option(150_000)}))
    assert isinstance(decision, Accepted)
    assert decision.receipt.check(Rule.FRAME_REPRODUCED).detail == (
        "claims no delta_p50_nok or delta_p85_nok"
    )


def test_check_bundle_shows_the_frame_a_run_would_report(
    capsys: pytest.CaptureFixture[str],
) -> None:
    school = EXAMPLES / "portfolio" / "lillevik-school"
    assert main(["check-bundle", str(school)]) == 0
    out = capsys.readouterr().out
    rule = load_config().uncertainty.rule()  # the packaged config, as check-bundle reads it
    frame = frame_of(load_ir_projections(school), [], accepted=frozenset(), rule=rule)
    assert frame is not None
    shown = f"P85 {format_nok(round(frame.p85_nok))}, kostnadsramme"
    assert f"uncertainty frame: P50 {format_nok(round(frame.p50_nok))}, {shown}" in out
    assert "from 4 lines' triple estimates, 8 with an assumed spread, 0 taken as certain" in out


def test_an_uncertainty_element_and_an_event_are_drawn_beside_the_lines(tmp_path: Path) -> None:
    market = (
        "---\ntype: uncertainty\nid: u-market\ntitle: The market\nmin_nok: -50000\n"
        "likely_nok: 0\nmax_nok: 150000\ncorrelation_group: g\n---\nPrices.\n"
    )
    event = (
        "---\ntype: uncertainty\ntitle: Contaminated ground\nmin_nok: 400000\nlikely_nok: 500000\n"
        "max_nok: 900000\nprobability: 0.3\n---\nMaybe.\n"
    )
    project = load_ir_projections(
        bundle(
            tmp_path,
            {
                "frame.md": line(
                    "02", 1_000_000, low=900_000, high=2_000_000, correlation_group="g"
                ),
                "site.md": line("01", 300_000),
                "risk/market.md": market,
                "risk/ground.md": event,
            },
            project="correlation:\n  g: 0.5\n",
        )
    )
    assert [u.id for u in project.uncertainties] == ["risk-ground", "u-market"]  # minted, then own
    assert project.cost_total_nok == 1_300_000  # the base estimate is the lines'
    frame = frame_of(project, [], accepted=frozenset(), rule=RULE)
    assert frame is not None
    assert frame.uncertainties == {"risk-ground": 0.3, "u-market": 1.0}
    assert frame.groups == {"g": ("02", "u-market")}
    # A 30 % event of about 0.55 M moves the mean by about 0.165 M, and P85 by more than P50.
    lines_only = frame_of(
        load_ir_projections(
            bundle(
                tmp_path / "lines",
                {
                    "frame.md": line(
                        "02", 1_000_000, low=900_000, high=2_000_000, correlation_group="g"
                    ),
                    "site.md": line("01", 300_000),
                },
                project="correlation:\n  g: 0.5\n",
            )
        ),
        [],
        accepted=frozenset(),
        rule=RULE,
    )
    assert lines_only is not None
    market_mean = (-50_000 + 150_000) / 6  # PERT: (low + 4 likely + high) / 6
    expected = 0.3 * (400_000 + 4 * 500_000 + 900_000) / 6 + market_mean
    assert frame.mean_nok - lines_only.mean_nok == pytest.approx(expected, rel=0.08)
    assert frame.p85_nok - lines_only.p85_nok > frame.p50_nok - lines_only.p50_nok


def test_an_uncertainty_element_out_of_order_is_named_with_its_file(tmp_path: Path) -> None:
    bad = "---\ntype: uncertainty\nid: u-x\nmin_nok: 5\nlikely_nok: 1\nmax_nok: 9\n---\nX.\n"
    root = bundle(tmp_path, {"a.md": line("01", 100, low=90, high=130), "u.md": bad})
    with pytest.raises(IRError, match=r"u\.md.*rising order"):
        load_ir_projections(root)


def test_an_import_keeps_a_triple_estimate_and_names_a_broken_one(tmp_path: Path) -> None:
    rows = [
        "Konto;Tekst;Sum;Min;Sannsynlig;Maks",
        "21;Grunn;1 000 000;900 000;1 000 000;1 600 000",
        "22;Bæresystem;2 000 000;;;",
        "23;Yttervegger;500 000;450 000;;700 000",
    ]
    source = tmp_path / "hall.csv"
    source.write_text("\n".join(rows) + "\n", "utf-8")
    (tmp_path / "hall.toml").write_text('id = "hall"\nname = "Hall"\n', "utf-8")
    project = load_ir_projections(write_bundle(read_estimate(source), tmp_path / "ok"))
    lines = {
        line.code: (line.min_nok, line.likely_nok, line.max_nok) for line in project.cost_lines
    }
    assert lines == {
        "21": (900_000, 1_000_000, 1_600_000),
        "22": (None, None, None),
        "23": (450_000, None, 700_000),
    }
    frame = frame_of(project, [], accepted=frozenset(), rule=RULE)
    assert frame is not None and frame.uncertain == ("21", "23") and frame.certain == ("22",)
    broken = tmp_path / "broken.csv"
    broken.write_text(
        "Konto;Tekst;Sum;Min;Maks\n21;Grunn;1 000 000;1 100 000;1 600 000\n22;Tak;500;400;\n",
        "utf-8",
    )
    with pytest.raises(ImportRefused) as refused:
        read_estimate(broken)
    text = str(refused.value)
    assert "row 2, column Sum: the sum (no most likely figure given) 1 000 000 is outside" in text
    assert "row 3, column Min: a triple estimate without its max" in text


def test_a_line_without_a_range_gets_its_accounts_assumed_spread_and_is_named(
    tmp_path: Path,
) -> None:
    project = load_ir_projections(
        bundle(
            tmp_path,
            {
                "a.md": line("02.1", 1_000_000, low=900_000, high=1_500_000),
                "b.md": line("02.3", 2_000_000),
                "c.md": line("07", 500_000),
                "d.md": line("09", 300_000),
            },
        )
    )
    rule = FrameRule(seed=SEED, spread=(0.9, 1.25), spreads=(("0", (1.0, 1.0)), ("02", (0.8, 1.6))))
    frame = frame_of(project, [], accepted=frozenset(), rule=rule)
    certain = frame_of(project, [], accepted=frozenset(), rule=RULE)
    assert frame is not None and certain is not None
    # The longest key wins: 02.3 takes 02's range; 07 and 09 take 0's, which is no range at all.
    assert frame.assumed == {"02.3": (0.8, 1.6)}
    assert frame.certain == ("07", "09") and frame.uncertain == ("02.1",)
    assert certain.assumed == {} and certain.certain == ("02.3", "07", "09")
    # 02.3 drawn from 1.6 M to 3.2 M about its 2 M: the frame is wider, and says why.
    assert frame.p85_nok - frame.p50_nok > 2 * (certain.p85_nok - certain.p50_nok)
    assert [c.code for c in frame.contributors][:1] == ["estimate maturity 02"]
    assert [(d.id, d.lines, d.origin) for d in frame.drivers] == [
        ("estimate maturity 02", ("02.3",), "maturity")
    ]


def test_the_report_marks_an_assumed_spread_as_assumed(tmp_path: Path) -> None:
    reasoning = session(tmp_path / "r", PROPOSER, CHECKER, mode=Mode.CI)
    spread = FrameRule(seed=SEED, spread=(0.9, 1.25))
    run = run_project(EXAMPLES / "portfolio" / "lillevik-school", verdicts=VerdictStore(),
                      budget=budget(), settings=settings(frame=spread), reasoning=reasoning,
                      run_id="r1", client_factory=factory({}))  # fmt: skip
    files = outputs.build_run_files(
        asyncio.run(run), outbox=tmp_path / "o", run_id="r1", stamp="2026-12-05", schema_ref=""
    )
    frame = json.loads(files["proposals.json"])["frame"]
    assert frame["certain"] == [] and frame["assumed"]["01"] == [0.9, 1.25]
    report = files["report.md"].decode("utf-8")
    assert "**Assumed, not given**" in report and "01, 02.2, 02.6" in report


def test_the_portfolio_page_lists_the_measures_whose_decision_point_has_passed(
    school_outputs: dict[str, bytes], tmp_path: Path
) -> None:
    """The decision points travel from the run, through the ledger's page lines, to the page."""
    path = tmp_path / "proposals.json"
    path.write_bytes(school_outputs["proposals.json"])
    kept = page_json(read_proposals(path))  # what the ledger keeps beside the run
    lines = read_page(kept, "lillevik-school", "r1")
    assert {line.decide_by[:10] for line in lines if line.decide_by} >= {"2027-04-15", "2028-02-01"}
    book = PortfolioBook.of(lines, projects={"lillevik-school"}, verdicts={})
    before, _svg = book.render(thin=[], stamp="2027-01-01T00:00:00Z")
    assert "## Decision points passed" not in before
    after, _svg = book.render(thin=[], stamp="2027-06-15T00:00:00Z")
    section = after.split("## Decision points passed")[1].split("\n## ")[0]
    # Windows and cladding (15 April), ventilation (1 May), masses (1 June): the court and the
    # furniture are still to come.
    assert "4 candidate(s) awaiting a verdict" in section
    assert "2027-04-15, before the facade drawings are frozen" in section
    assert "2027-09-01" not in section


STAMP_PAGE = "2026-12-05T00:00:00Z"


def finished(tmp_path: Path, final: int, *, stated: bool = True, twice: bool = False) -> Path:
    outcome = f"---\ntype: outcome\nfinal_cost_nok: {final}\ncompleted: '2026'\n---\nDone.\n"
    header = "p50_nok: 1500000\np85_nok: 1700000\n" if stated else ""
    files = {
        "frame.md": line("02", 1_000_000, low=900_000, high=2_000_000),
        "site.md": line("01", 300_000),
        "outcome.md": outcome,
    }
    if twice:
        files["again.md"] = outcome
    return bundle(tmp_path, files, project=header)


def test_a_finished_project_is_judged_against_the_frames_it_states_else_its_simulated_ones(
    tmp_path: Path,
) -> None:
    stated = load_ir_projections(finished(tmp_path / "stated", 1_800_000))
    assert stated.outcome is not None and stated.outcome.completed == "2026"
    frame = frame_of(stated, [], accepted=frozenset(), rule=RULE)
    found = backtest_of(stated, frame)
    assert found is not None and found.basis == "stated"
    assert (found.p50_nok, found.p85_nok) == (1_500_000, 1_700_000)
    assert found.above_p85 and found.above_p50
    plain = load_ir_projections(finished(tmp_path / "plain", 1_400_000, stated=False))
    frame = frame_of(plain, [], accepted=frozenset(), rule=RULE)
    found = backtest_of(plain, frame)
    assert found is not None and frame is not None and found.basis == "simulated"
    assert (found.p50_nok, found.p85_nok) == (frame.p50_nok, frame.p85_nok)
    assert (
        backtest_of(load_ir_projections(bundle(tmp_path / "open", {"a.md": line("01", 9)})), None)
        is None
    )
    with pytest.raises(IRError, match="more than one 'type: outcome' concept"):
        load_ir_projections(finished(tmp_path / "twice", 1, twice=True))


def test_a_finished_projects_report_and_the_portfolio_page_judge_its_frames(
    tmp_path: Path,
) -> None:
    reasoning = session(tmp_path / "r", PROPOSER, CHECKER, mode=Mode.CI)
    pages: dict[str, str] = {}
    reports: dict[str, str] = {}
    finals = {"over": 1_800_000, "between": 1_600_000, "under": 1_400_000, "far": 2_000_000,
              "low": 1_300_000}  # fmt: skip
    for name, final in finals.items():
        root = finished(tmp_path / name, final)
        (root / "project.md").write_text(
            (root / "project.md").read_text("utf-8").replace("id: hall", f"id: {name}"), "utf-8"
        )
        run = run_project(root, verdicts=VerdictStore(), budget=budget(), settings=settings(),
                          reasoning=reasoning, run_id="r1", client_factory=factory({}))  # fmt: skip
        files = outputs.build_run_files(
            asyncio.run(run), outbox=tmp_path / "o", run_id="r1", stamp="2026-12-05", schema_ref=""
        )
        doc = json.loads(files["proposals.json"])
        jsonschema.Draft202012Validator(load_schema("proposals.schema.json")).validate(doc)
        assert doc["outcome"]["basis"] == "stated" and doc["outcome"]["final_cost_nok"] == final
        reports[name] = files["report.md"].decode("utf-8")
        assert (
            f"The project finished at **{format_nok(final)} NOK**, completed 2026" in reports[name]
        )
        path = tmp_path / f"{name}.json"
        path.write_bytes(files["proposals.json"])
        pages[name] = page_json(read_proposals(path))  # what the ledger keeps
    over = "above its P85 (1 700 000 NOK, +5.9%) and above its P50 (1 500 000 NOK, +20.0%)"
    assert over in reports["over"]
    assert "within its P85 (1 700 000 NOK, -5.9%) and above its P50" in reports["between"]
    book = PortfolioBook.of(
        [c for name, text in pages.items() for c in read_page(text, name, "r1")],
        projects=set(pages),
        verdicts={},
        outcomes={name: o for name, text in pages.items() if (o := read_outcome(text))},
    )
    history = book.render(thin=[], stamp=STAMP_PAGE)[0].split("## Frames against outcomes")[1]
    assert "5 finished projects: **2 (40%) ended above their P85**" in history
    assert "3 (60%) above their P50" in history
    # (+20 + 6.7 - 6.7 + 33.3 - 13.3) / 5
    assert "the final cost stood +8.0% from P50 on average" in history
    # The project's latest run without its outcome (a bundle edited back): it counts no more,
    # and four are too few for a rate.
    book.replace("over", read_page(pages["over"], "over", "r2"))
    history = book.render(thin=[], stamp=STAMP_PAGE)[0].split("## Frames against outcomes")[1]
    assert (
        "4 finished project(s), 1 of them above their P85 and 2 above their P50: too few" in history
    )
    assert "%" not in history.split("too few")[0]


def test_the_daemons_portfolio_page_counts_a_finished_project_from_its_ledger(
    tmp_path: Path,
) -> None:
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    finished(ws.inbox_projects / "hall", 1_800_000)
    run_once(ws, load_config(), log=structlog.get_logger("test"), environ=CI)
    page = (ws.outbox / "portfolio.md").read_text("utf-8")
    assert "1 finished project(s), 1 of them above their P85" in page
    assert "100%" not in page  # no rate from one project
    # Built again from the ledger alone, after a restart: the outcome is kept there.
    with Ledger.open(ws.ledger_file) as ledger:
        processor = Processor(ws, load_config(), ledger, time.time, structlog.get_logger("t"),
                              environ=CI)  # fmt: skip
        fresh = PortfolioPage(ws, processor.portfolio, structlog.get_logger("test"))
        again = fresh.publish(ledger, stamp=STAMP_PAGE).read_text("utf-8")
        processor.close()
    assert "1 finished project(s), 1 of them above their P85" in again


def test_a_measure_may_name_its_decision_point_decide_by_but_not_two(tmp_path: Path) -> None:
    project = hall_with(
        tmp_path / "one", {"k2.md": option(150_000, decide_by="'2027-03-01, forprosjekt'")}
    )
    [candidate] = kuttliste_candidates(project)
    assert candidate.decide_by == "2027-03-01, forprosjekt"
    root = bundle(
        tmp_path / "two",
        {
            "frame.md": line("02", 1_000_000),
            "k2.md": option(150_000, decide_by="2027-03-01", latest_decision_point="2027-04-01"),
        },
    )
    with pytest.raises(IRError, match=r"k2\.md.*name two decision points; keep one"):
        load_ir_projections(root)


def test_the_kuttliste_value_counts_only_the_items_the_validator_accepted(tmp_path: Path) -> None:
    def item(name: str, saving: int) -> str:
        return (
            f"---\ntype: measure-option\nid: {name}\nmeasure_type: removal\n"
            f'affected_codes: ["01"]\nestimated_saving_nok: {saving}\n---\nCut.\n'
        )

    root = bundle(
        tmp_path,
        {
            "a.md": line("01", 1_000_000, low=900_000, high=1_300_000),
            "k1.md": item("k-1", 800_000),
            "k2.md": item("k-2", 700_000),  # with k-1, more than the line costs: refused
        },
    )
    project = load_ir_projections(root)
    items = kuttliste_candidates(project)
    decisions = validate_candidates(items, project, frame=RULE)
    accepted = frozenset(
        c.id for c, d in zip(items, decisions, strict=True) if isinstance(d, Accepted)
    )
    assert len(accepted) == 1
    frame = frame_of(project, items, accepted=accepted, rule=RULE)
    assert frame is not None
    assert frame.kuttliste_nok == 800_000 and frame.kuttliste_left_out == ("k-2",)
    assert frame.kostnadsramme_nok == pytest.approx(frame.p85_nok - 800_000)
    assert main(["check-bundle", str(root)]) == 1  # k-2 is a problem of the bundle


def test_a_normal_line_without_a_range_and_one_off_centre_by_rounding_are_drawn(
    tmp_path: Path,
) -> None:
    project = load_ir_projections(
        bundle(
            tmp_path,
            {
                "a.md": line("01", 1_000_000, low=900_000, high=1_100_000.4, distribution="normal"),
                "b.md": line("02", 1_000, distribution="normal"),  # the assumed spread, symmetric
            },
        )
    )
    frame = frame_of(project, [], accepted=frozenset(), rule=FrameRule(spread=(0.9, 1.25)))
    assert frame is not None and frame.assumed == {"02": (0.9, 1.25)}


def test_half_a_triple_estimate_is_named_not_ignored(tmp_path: Path) -> None:
    root = bundle(
        tmp_path, {"a.md": line("01", 100, min_nok=90), "b.md": line("02", 100, likely_nok=100)}
    )
    with pytest.raises(IRError) as caught:
        load_ir_projections(root)
    message = str(caught.value)
    assert "a.md" in message and "b.md" in message
    assert "needs both min_nok and max_nok" in message


def test_an_event_on_p85_stops_the_samples_doubling_and_says_how_wide_p85_is() -> None:
    lines = [Element(f"l{i}", 90.0, 100.0, 125.0) for i in range(50)]
    event = Element("ground", 400.0, 500.0, 800.0, probability=0.15)
    found = simulate([*lines, event], seed=1)
    assert found.samples <= 160_000  # it stopped doubling: the interval did not narrow
    assert found.stable_to > STABLE_TO  # and the frame says so, not a false 0.5 %


def test_check_bundle_notes_a_decision_point_whose_date_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = bundle(
        tmp_path,
        {
            "a.md": line("01", 1_000_000),
            "k.md": "---\ntype: measure-option\nid: k-1\nmeasure_type: removal\n"
            'affected_codes: ["01"]\nestimated_saving_nok: 1000\n'
            "latest_decision_point: '01.03.2027, forprosjekt'\n---\nCut.\n",
        },
    )
    assert main(["check-bundle", str(root)]) == 0
    out = capsys.readouterr().out
    assert "k.md: its decision point '01.03.2027, forprosjekt' begins with no date" in out
