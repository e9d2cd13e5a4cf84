"""Reference classes: the portfolio's other projects price each line, robustly, leave-one-out."""

from __future__ import annotations

from pathlib import Path

import pytest

from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.models import Candidate, CostLine, Project
from portfolio_optimiser.context.reference import (
    MEASURE_TYPE,
    Comparable,
    ReferenceIndex,
    ReferenceRule,
    reference_candidates,
    reference_saving,
)
from portfolio_optimiser.context.validator import validate_candidate, validate_candidates
from portfolio_optimiser.context.vocabulary import normalise_unit

from .synthetic import generate


def project(
    pid: str, price: float, *, quantity: float = 1000, unit: str = "m2", category: str | None = None
) -> Project:
    return Project(
        id=pid,
        name=pid,
        category=category,
        cost_lines=(
            CostLine(
                code="02.3",
                amount_nok=price * quantity,
                quantity=quantity,
                unit=unit,
                unit_price_nok=price,
                source=f"cost/{pid}-02.3.md",
            ),
        ),
        files=frozenset({f"cost/{pid}-02.3.md"}),
    )


def candidates_of(p: Project, index: ReferenceIndex) -> list[Candidate]:
    return reference_candidates(p, index.assess(p))


def flagged(projects: list[Project], rule: ReferenceRule | None = None) -> set[str]:
    index = ReferenceIndex.of(projects, rule or ReferenceRule())
    return {c.project_id for p in projects for c in candidates_of(p, index)}


def test_one_unit_has_one_spelling() -> None:
    assert {normalise_unit(u) for u in ("m2", "m²", "kvm", " M2 ", "m^2")} == {"m2"}
    assert normalise_unit("m³") == normalise_unit("m3") == "m3"
    assert normalise_unit("Stk.") == "stk" and normalise_unit("") is None


@pytest.mark.loadbearing
def test_a_line_well_above_its_class_is_a_candidate_at_the_median() -> None:
    others = [project(f"p{i}", 6000 + 50 * i) for i in range(6)]  # median 6125
    dear = project("dear", 9000, quantity=480)
    [candidate] = candidates_of(dear, ReferenceIndex.of([*others, dear]))
    assert candidate.measure_type == MEASURE_TYPE and candidate.affected_codes == ("02.3",)
    assert candidate.grade == "likely" and candidate.unit == "m2"
    assert candidate.claimed_saving_nok == reference_saving(9000, 6125, 480) == 1_300_000
    assert candidate.evidence == ("cost/dear-02.3.md", "reference:02.3@m2")
    assert flagged([*others, dear]) == {"dear"}


@pytest.mark.loadbearing
def test_a_line_is_never_its_own_reference() -> None:
    # Four others: enough with min_comparables 4, but only if the line itself is not counted.
    rule = ReferenceRule(min_comparables=5)
    projects = [*(project(f"p{i}", 6000) for i in range(4)), project("dear", 9000)]
    assert flagged(projects, rule) == set()
    index = ReferenceIndex.of(projects, rule)
    [line] = index.assess(projects[-1]).lines
    assert line.n == 4 and line.median_nok == 6000 and line.grade is None


@pytest.mark.loadbearing
def test_the_rule_holds_when_several_lines_of_a_class_are_overpriced() -> None:
    # Three of ten at +50 %: the upper quartile would sit among them; the median and MAD do not.
    fair = [project(f"f{i}", 6000 * (0.95 + 0.01 * i)) for i in range(7)]
    dear = [project(f"d{i}", 9000 + 100 * i) for i in range(3)]
    assert flagged([*fair, *dear]) == {"d0", "d1", "d2"}


def test_units_are_folded_and_different_units_never_compared() -> None:
    others = [
        project(f"p{i}", 6000, unit=u) for i, u in enumerate(("m2", "m²", "kvm", "m2", "kvm"))
    ]
    assert flagged([*others, project("dear", 9000, unit="m²")]) == {"dear"}
    assert flagged([*others, project("per-piece", 9000, unit="stk")]) == set()


@pytest.mark.loadbearing
def test_comparables_come_from_the_same_category_first() -> None:
    schools = [project(f"s{i}", 6000, category="school") for i in range(5)]
    homes = [project(f"h{i}", 7100 + 10 * i, category="care home") for i in range(5)]
    # A care home at the care-home price is not dear; against the schools it would be (+18 %).
    assert flagged([*schools, *homes]) == set()
    dear_home = project("h-dear", 9900, category="care home")
    assert flagged([*schools, *homes, dear_home]) == {"h-dear"}


def test_the_saving_is_rounded_down_to_two_significant_figures_and_stable() -> None:
    assert reference_saving(9000, 6125, 480) == 1_300_000  # 1 380 000 exact
    assert reference_saving(9000, 6130, 480) == reference_saving(9000, 6120, 480)
    assert reference_saving(100, 99.5, 10) == 5 and reference_saving(100, 100, 10) == 0


@pytest.mark.loadbearing
def test_the_validator_recomputes_a_reference_candidate_against_the_classes() -> None:
    others = [project(f"p{i}", 6000) for i in range(5)]
    dear = project("dear", 9000, quantity=480)
    index = ReferenceIndex.of([*others, dear])
    [candidate] = candidates_of(dear, index)
    refs = index.assess(dear)
    assert validate_candidate(candidate, dear, references=refs).outcome == "accepted"
    inflated = candidate.model_copy(
        update={"claimed_saving_nok": 1_500_000, "saving_literal": "1500000"}
    )
    rejected = validate_candidate(inflated, dear, references=refs)
    assert rejected.outcome == "rejected" and "less than the 1500000 claimed" in rejected.reason
    assert validate_candidate(candidate, dear).outcome == "rejected"  # no classes: unresolved
    thin = ReferenceIndex.of([*others[:2], dear])
    assert validate_candidate(candidate, dear, references=thin.assess(dear)).outcome == "rejected"


@pytest.mark.loadbearing
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_generated_portfolio_finds_its_planted_lines(tmp_path: Path, seed: int) -> None:
    portfolio = generate(seed, n_projects=30)
    projects = [load_ir_projections(p.write(tmp_path / p.project_id)) for p in portfolio.projects]
    index = ReferenceIndex.of(projects)
    found: set[tuple[str, str]] = set()
    for p in projects:
        refs = index.assess(p)
        candidates = reference_candidates(p, refs)
        assert all(
            d.outcome == "accepted" for d in validate_candidates(candidates, p, references=refs)
        )
        found |= {(p.id, c.affected_codes[0]) for c in candidates}
    hits = found & portfolio.planted
    assert len(hits) >= 0.9 * len(portfolio.planted)
    assert len(hits) >= 0.8 * len(found)


@pytest.mark.loadbearing
def test_one_excess_cannot_be_claimed_twice_and_the_line_must_be_flagged() -> None:
    # Found in review: a second candidate citing the same class was accepted for the same excess.
    others = [project(f"p{i}", 6000) for i in range(5)]
    dear = project("dear", 9000, quantity=480)
    index = ReferenceIndex.of([*others, dear])
    [first] = candidates_of(dear, index)
    again = first.model_copy(update={"measure_type": "rationalise"})
    [ok, twice] = validate_candidates([first, again], dear, references=index.assess(dear))
    assert ok.outcome == "accepted" and twice.outcome == "rejected"
    assert "already claimed" in twice.reason
    fair = project("fair", 6100, quantity=480)
    index = ReferenceIndex.of([*others, fair])
    cited = first.model_copy(
        update={
            "project_id": "fair",
            "claimed_saving_nok": 10,
            "saving_literal": "10",
            "evidence": ("cost/fair-02.3.md", "reference:02.3@m2"),
        }
    )
    assert validate_candidate(cited, fair, references=index.assess(fair)).outcome == "rejected"


# -- issue 22: identity, the project's own level, materiality, grades ------------------------------

CODES = {"21": 2400.0, "22": 3800.0, "23": 6500.0, "25": 2600.0, "31": 1500.0, "36": 2300.0}


def building(
    pid: str, factor: float, *, wobble: int, dear: dict[str, float] | None = None
) -> Project:
    """A project pricing six codes at ``factor`` times their base, each line a little off (a
    deterministic ±3 %), some lines overpriced by ``dear``."""
    lines = []
    for n, (code, base) in enumerate(CODES.items()):
        price = round(base * factor * (1 + 0.03 * (((wobble + 3 * n) % 5) - 2) / 2))
        price = round(price * (dear or {}).get(code, 1.0))
        lines.append(
            CostLine(
                code=code,
                amount_nok=price * 1000,
                quantity=1000,
                unit="m2",
                unit_price_nok=price,
                source=f"cost/{code}.md",
            )
        )
    return Project(
        id=pid, name=pid, cost_lines=tuple(lines), files=frozenset(line.source for line in lines)
    )


@pytest.mark.loadbearing
def test_a_whole_project_fifteen_percent_dearer_yields_no_candidate() -> None:
    portfolio = [building(f"p{i}", 1.0, wobble=i) for i in range(12)]
    region = building("dear-region", 1.15, wobble=5)
    index = ReferenceIndex.of([*portfolio, region])
    assert candidates_of(region, index) == []
    assert all(1.05 < line.level < 1.25 for line in index.assess(region).lines)
    # The same project with one line a further +60 % is still found: its level is not the line's.
    planted = building("dear-region", 1.15, wobble=5, dear={"23": 1.6})
    [found] = candidates_of(planted, ReferenceIndex.of([*portfolio, planted]))
    assert found.affected_codes == ("23",) and found.grade == "likely"


@pytest.mark.loadbearing
def test_a_line_under_the_materiality_floor_is_never_flagged() -> None:
    others = [project(f"p{i}", 800 + 5 * i, quantity=79) for i in range(6)]
    tiny = project("tiny", 1300, quantity=79)  # +60 %, but 79 m2: about 39 000 NOK
    index = ReferenceIndex.of([*others, tiny])
    [line] = index.assess(tiny).lines
    assert line.grade == "likely"
    assert candidates_of(tiny, index) == []
    big = project("big", 1300, quantity=790)
    assert [c.affected_codes for c in candidates_of(big, ReferenceIndex.of([*others, big]))] == [
        ("02.3",)
    ]


@pytest.mark.loadbearing
def test_a_reference_candidates_id_stands_while_its_saving_moves() -> None:
    others = [project(f"p{i}", 6000 + 50 * i) for i in range(6)]  # median 6125
    dear = project("dear", 9000, quantity=100)
    [before] = candidates_of(dear, ReferenceIndex.of([*others, dear]))
    grown = [*others, *(project(f"q{i}", 6900 + 100 * i) for i in range(4))]  # median 6225
    [after] = candidates_of(dear, ReferenceIndex.of([*grown, dear]))
    assert (before.claimed_saving_nok, after.claimed_saving_nok) == (280_000, 270_000)
    assert after.id == before.id
    per_m3 = [project(f"m{i}", 6000, unit="m3") for i in range(6)]
    dear_m3 = project("dear", 9000, quantity=100, unit="m3")
    [other_line] = candidates_of(dear_m3, ReferenceIndex.of([*per_m3, dear_m3]))
    assert other_line.id != before.id


def test_a_smaller_excess_is_surfaced_as_possible_not_dropped() -> None:
    others = [project(f"p{i}", 6000 * (0.9 + 0.04 * i)) for i in range(6)]
    index = ReferenceIndex.of([*others, project("some", 7900)])
    [line] = index.assess(project("some", 7900)).lines
    assert line.grade == "possible" and 2.0 <= line.sigmas < 3.0


@pytest.mark.loadbearing
def test_a_revised_bundle_is_never_measured_against_its_own_earlier_version() -> None:
    others = [project(f"p{i}", 6000 + 50 * i) for i in range(6)]  # median 6125
    earlier = project("dear", 6000, quantity=480)
    index = ReferenceIndex.of([*others, earlier])
    [line] = index.assess(project("dear", 9000, quantity=480)).lines
    assert (line.n, line.median_nok) == (6, 6125)
    assert line.expected_nok == pytest.approx(6125, abs=0.1)
    assert line.grade == "likely"


@pytest.mark.loadbearing
def test_a_small_projects_own_overpriced_lines_never_set_its_level() -> None:
    # Four lines, two of them +40 %: too few to tell a dear project from dear lines.
    portfolio = [building(f"p{i}", 1.0, wobble=i) for i in range(12)]
    full = building("small", 1.0, wobble=3, dear={"23": 1.4, "31": 1.4})
    small = full.model_copy(update={"cost_lines": full.cost_lines[1:5]})
    index = ReferenceIndex.of([*portfolio, small])
    found = {c.affected_codes[0]: c.grade for c in candidates_of(small, index)}
    assert found == {"23": "likely", "31": "likely"}
    assert {line.level for line in index.assess(small).lines} == {1.0}


def test_a_reference_price_naming_no_unit_keeps_its_saving_in_its_id() -> None:
    def proposed(saving: int, unit: str | None) -> Candidate:
        return Candidate(
            project_id="p",
            affected_codes=("23",),
            measure_type=MEASURE_TYPE,
            claimed_saving_nok=saving,
            unit=unit,
        )

    assert proposed(1000, None).id != proposed(2000, None).id  # a model's, with no line named
    assert proposed(1000, "m2").id == proposed(2000, "m2").id != proposed(1000, "m3").id


def post(
    pid: str, postnr: str, price: float, ns3420: str | None, quantity: float = 1000
) -> CostLine:
    return CostLine(
        code=postnr,
        amount_nok=price * quantity,
        quantity=quantity,
        unit="m2",
        unit_price_nok=price,
        ns3420=ns3420,
        post=True,
        source=f"cost/{pid}-{postnr}.md",
    )


def posts_project(pid: str, *lines: CostLine) -> Project:
    return Project(
        id=pid, name=pid, cost_lines=lines, files=frozenset(line.source for line in lines)
    )


@pytest.mark.loadbearing
def test_posts_are_compared_by_their_ns3420_code_whatever_their_numbers() -> None:
    others = [
        posts_project(f"p{i}", post(f"p{i}", f"0{i}.22.{i}", 6000 + 50 * i, "AV1.1"))
        for i in range(6)
    ]
    dear = posts_project(
        "dear", post("dear", "04.31.2", 9000, "AV1.1", 480), post("dear", "04.31.3", 6100, "AV1.1")
    )
    index = ReferenceIndex.of([*others, dear])
    [candidate] = candidates_of(dear, index)
    assert candidate.affected_codes == ("04.31.2",)
    assert candidate.evidence[-1] == "reference:04.31.2@m2"
    refs = index.assess(dear)
    assert {line.code: (line.compared_as, line.n) for line in refs.lines} == {
        "04.31.2": ("AV1.1", 6),
        "04.31.3": ("AV1.1", 6),
    }
    assert validate_candidate(candidate, dear, references=refs).outcome == "accepted"
    assert "pricing NS 3420 AV1.1" in candidate.rationale


def test_a_post_without_an_ns3420_code_is_never_compared() -> None:
    others = [posts_project(f"p{i}", post(f"p{i}", "01.22.1", 6000, None)) for i in range(6)]
    dear = posts_project("dear", post("dear", "01.22.1", 9000, None))
    assert candidates_of(dear, ReferenceIndex.of([*others, dear])) == []
    assert ReferenceIndex.of([*others, dear]).classes == {}


def test_each_lines_median_is_the_median_of_the_other_projects_prices(tmp_path: Path) -> None:
    """The comparables' median each line reports is the plain median of every other project's
    price in its class (in its category when one is named) — for an indexed project, whose own
    line is left out, and for a new one."""
    import statistics

    from .synthetic_ns3451 import generate_ns3451

    loaded = [
        load_ir_projections(p.write(tmp_path / p.project_id))
        for p in generate_ns3451(5, 40).projects
    ]
    index = ReferenceIndex.of(loaded[:-3])
    checked = 0
    for one in loaded:
        for ref in index.assess(one).lines:
            prices = [
                c.unit_price_nok
                for c in index.classes[(ref.compared_as, ref.unit)]
                if c.project_id != one.id and (ref.category is None or c.category == ref.category)
            ]
            assert ref.median_nok == round(statistics.median(prices), 2), (one.id, ref.code)
            checked += 1
    assert checked > 500


def test_a_class_is_thin_by_its_projects_not_its_folders() -> None:
    """A class is too thin to price a line while it holds ``min_comparables`` projects or fewer,
    however many folders of one project it holds (each counted once)."""
    rule = ReferenceRule(min_comparables=3)

    def priced(*projects: str) -> tuple[Comparable, ...]:
        return tuple(Comparable(p, f"{p}.md", 100.0, None) for p in projects)

    index = ReferenceIndex(
        {
            ("A", "m2"): priced("p1", "p2", "p3"),
            ("B", "m2"): priced("p1", "p1", "p1", "p1", "p2"),
            ("C", "m2"): priced("p1", "p2", "p3", "p4"),
            ("D", "m2"): priced("p1", "p1", "p2", "p3", "p4"),
        },
        rule,
    )
    assert index.thin() == [("A", "m2", 3), ("B", "m2", 2)]
