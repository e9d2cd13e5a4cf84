"""A candidate's id: ``c-`` and 16 hex digits of its key, minted from the saving *literal*."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from portfolio_optimiser.context.models import Candidate, Money, mint_candidate_id

ID_FORMAT = re.compile(r"c-[0-9a-f]{16}")

loadbearing = pytest.mark.loadbearing


def candidate(
    *,
    project_id: str = "lillevik",
    codes: tuple[str, ...] = ("02.3",),
    measure_type: str = "standardisation",
    saving: Money = 30000,
) -> Candidate:
    return Candidate(
        project_id=project_id,
        affected_codes=codes,
        measure_type=measure_type,
        claimed_saving_nok=saving,
    )


@loadbearing
def test_30000_and_30000_point_0_are_different_candidates() -> None:
    whole = candidate(saving=30000)
    point = candidate(saving=30000.0)
    assert whole.saving_literal == "30000"
    assert point.saving_literal == "30000.0"
    assert whole.id != point.id


def test_the_id_is_minted_from_the_saving_literal() -> None:
    cand = candidate(saving=30000.0)
    assert cand.id == mint_candidate_id("lillevik", ("02.3",), "standardisation", "30000.0")
    assert cand.id != mint_candidate_id("lillevik", ("02.3",), "standardisation", "30000")


def test_an_explicit_saving_literal_is_what_is_minted() -> None:
    written = Candidate(
        project_id="lillevik",
        affected_codes=("02.3",),
        measure_type="standardisation",
        claimed_saving_nok=30000,
        saving_literal="30000.0",
    )
    assert written.id == candidate(saving=30000.0).id


@loadbearing
def test_the_id_is_stable() -> None:
    assert candidate().id == candidate().id
    minted = mint_candidate_id("lillevik", ("02.3", "02.4"), "standardisation", "30000")
    assert minted == mint_candidate_id("lillevik", ("02.3", "02.4"), "standardisation", "30000")


def test_the_id_is_the_documented_hash_of_the_key() -> None:
    key = json.dumps(["lillevik", ["02.3", "02.4"], "standardisation", "30000"], ensure_ascii=False)
    expected = "c-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
    assert candidate(codes=("02.4", "02.3")).id == expected


@loadbearing
def test_the_order_of_affected_codes_does_not_change_the_id() -> None:
    assert (
        candidate(codes=("02.3", "02.4", "07.1")).id == candidate(codes=("07.1", "02.3", "02.4")).id
    )


def test_a_code_named_twice_does_not_change_the_id() -> None:
    assert candidate(codes=("02.3", "02.3")).id == candidate(codes=("02.3",)).id


@loadbearing
@pytest.mark.parametrize(
    "changed",
    [
        {"project_id": "e39-road-section"},
        {"measure_type": "simplification"},
        {"saving": 30001},
        {"saving": 30000.5},
        {"codes": ("02.4",)},
        {"codes": ("02.3", "02.4")},
    ],
    ids=["project", "measure_type", "saving", "float-saving", "other-code", "extra-code"],
)
def test_a_different_key_field_changes_the_id(changed: dict[str, object]) -> None:
    assert candidate(**changed).id != candidate().id  # type: ignore[arg-type]


def test_title_rationale_evidence_and_origin_are_not_part_of_the_id() -> None:
    plain = candidate()
    dressed = Candidate(
        project_id="lillevik",
        affected_codes=("02.3",),
        measure_type="standardisation",
        claimed_saving_nok=30000,
        title="Standard windows",
        rationale="fewer formats",
        evidence=("cost/02.3.md",),
        origin="measure-option:k-01",
    )
    assert dressed.id == plain.id


@pytest.mark.parametrize("saving", [30000, 30000.0, 0.1, -5, 1e21])
def test_the_id_is_c_dash_and_16_hex_digits(saving: Money) -> None:
    assert ID_FORMAT.fullmatch(candidate(saving=saving).id)


@loadbearing
def test_a_matching_id_key_is_accepted_by_model_validate() -> None:
    expected = candidate().id
    cand = Candidate.model_validate(
        {
            "id": expected,
            "project_id": "lillevik",
            "affected_codes": ("02.3",),
            "measure_type": "standardisation",
            "claimed_saving_nok": 30000,
        }
    )
    assert cand.id == expected


def test_a_dumped_candidate_validates_back_to_the_same_candidate() -> None:
    cand = candidate(codes=("02.4", "02.3"), saving=30000.0)
    dumped = cand.model_dump()
    assert dumped["id"] == cand.id
    assert Candidate.model_validate(dumped) == cand


@loadbearing
@pytest.mark.parametrize(
    "stated",
    ["c-0000000000000000", "", "not-an-id"],
    ids=["other-hex", "empty", "garbage"],
)
def test_a_mismatching_id_key_is_refused_by_model_validate(stated: str) -> None:
    with pytest.raises(ValidationError, match="does not match the candidate's key") as info:
        Candidate.model_validate(
            {
                "id": stated,
                "project_id": "lillevik",
                "affected_codes": ("02.3",),
                "measure_type": "standardisation",
                "claimed_saving_nok": 30000,
            }
        )
    assert candidate().id in str(info.value)


@loadbearing
def test_an_id_minted_from_30000_is_refused_for_30000_point_0() -> None:
    with pytest.raises(ValidationError):
        Candidate.model_validate(
            {
                "id": candidate(saving=30000).id,
                "project_id": "lillevik",
                "affected_codes": ("02.3",),
                "measure_type": "standardisation",
                "claimed_saving_nok": 30000.0,
            }
        )


@settings(max_examples=200, deadline=None)
@given(
    codes=st.lists(st.text(alphabet="0123456789.ABC", min_size=1, max_size=6), min_size=1),
    saving=st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False)),
    data=st.data(),
)
def test_the_id_is_stable_under_any_permutation_of_the_codes(
    codes: list[str], saving: Money, data: st.DataObject
) -> None:
    shuffled = data.draw(st.permutations(codes))
    a = candidate(codes=tuple(codes), saving=saving)
    b = candidate(codes=tuple(shuffled), saving=saving)
    assert a.id == b.id
    assert ID_FORMAT.fullmatch(a.id)


@loadbearing
def test_a_code_containing_a_separator_does_not_collide() -> None:
    assert candidate(codes=("a,b",)).id != candidate(codes=("a", "b")).id


@loadbearing
def test_a_literal_that_does_not_write_the_saving_is_refused() -> None:
    with pytest.raises(ValidationError, match="does not write the claimed saving"):
        Candidate(
            project_id="p",
            affected_codes=("02.3",),
            measure_type="x",
            claimed_saving_nok=100,
            saving_literal="999",
        )
    assert candidate(saving=30000.0).saving_literal == "30000.0"
