"""The hand-edited verdict file: what parses, and the one sentence for each kind of damage."""

from __future__ import annotations

import json
from typing import Any

import pytest

from portfolio_optimiser.context.verdict import Decision, Verdict, VerdictError, parse_verdict
from portfolio_optimiser.resources import commons_dir

SOURCE = "inbox/verdicts/v-lillevik.json"
EXAMPLE_VERDICT = (
    commons_dir() / "skills" / "expert-reviewer" / "references" / "example-verdict.json"
)

TEMPLATE: dict[str, Any] = {
    "$schema": "../../shared/schemas/verdict.schema.json",
    "id": "c-d67b7045b6ae3f01",
    "decision": "approved",
    "rationale": "Recomputed the window area and the unit price; the saving holds.",
    "reviewer": "KE",
    "realization_rate": None,
    "adjusted_saving_nok": None,
    "decided_at": None,
    "candidate": {
        "project_id": "lillevik-school",
        "title": "Standard window sizes",
        "affected_codes": ["02.3"],
        "measure_type": "standardisation",
        "claimed_saving_nok": 798000,
    },
}


def verdict_bytes(**changes: Any) -> bytes:
    """The template as an editor saves it (indented, one field a line), with changes applied.

    A change to ``None`` is written as JSON null; pass ``drop=[...]`` to remove fields.
    """
    drop = changes.pop("drop", ())
    data = {**TEMPLATE, **changes}
    for name in drop:
        del data[name]
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def refused(data: bytes, *needles: str) -> str:
    """``data`` is refused with one sentence naming the source and every needle."""
    with pytest.raises(VerdictError) as caught:
        parse_verdict(data, SOURCE)
    message = str(caught.value)
    assert message.startswith(SOURCE)
    assert "\n" not in message
    assert "Traceback" not in message
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    return message


# --- what parses --------------------------------------------------------------------------------


def test_a_template_shaped_verdict_parses() -> None:
    verdict = parse_verdict(verdict_bytes(), SOURCE)
    assert isinstance(verdict, Verdict)
    assert verdict.id == "c-d67b7045b6ae3f01"
    assert verdict.decision is Decision.APPROVED
    assert verdict.approves
    assert verdict.reviewer == "KE"
    assert verdict.realization_rate is None
    assert verdict.candidate is not None
    assert verdict.candidate["affected_codes"] == ["02.3"]


def test_an_adjusted_approval_with_its_saving_parses() -> None:
    verdict = parse_verdict(
        verdict_bytes(
            decision="approved_with_adjustment",
            adjusted_saving_nok=600000,
            realization_rate=0.7,
            decided_at="2026-11-30T12:00:00+01:00",
        ),
        SOURCE,
    )
    assert verdict.decision is Decision.APPROVED_WITH_ADJUSTMENT
    assert verdict.adjusted_saving_nok == 600000
    assert verdict.approves


def test_a_rejection_with_a_rationale_parses_and_does_not_approve() -> None:
    verdict = parse_verdict(verdict_bytes(decision="rejected"), SOURCE)
    assert verdict.decision is Decision.REJECTED
    assert not verdict.approves


def test_the_skills_example_verdict_parses() -> None:
    verdict = parse_verdict(EXAMPLE_VERDICT.read_bytes(), str(EXAMPLE_VERDICT))
    assert verdict.id.startswith("c-")
    assert verdict.decision in set(Decision)


def test_a_utf8_bom_and_crlf_line_ends_are_accepted() -> None:
    data = b"\xef\xbb\xbf" + verdict_bytes(rationale="Rørvik \u2013 ok").replace(b"\n", b"\r\n")
    verdict = parse_verdict(data, SOURCE)
    assert verdict.rationale == "Rørvik \u2013 ok"


def test_the_id_is_read_verbatim_and_never_reminted() -> None:
    # The candidate block would mint some other id; the file's id is what counts.
    verdict = parse_verdict(verdict_bytes(id="c-0000000000000000"), SOURCE)
    assert verdict.id == "c-0000000000000000"


# --- damage to the JSON itself ------------------------------------------------------------------


def test_a_trailing_comma_is_reported_with_its_line_and_column() -> None:
    data = b'{\n  "id": "c-0123456789abcdef",\n  "decision": "approved",\n}\n'
    message = refused(data, "line 3, column 25", "trailing comma")
    assert "remove that comma" in message


def test_a_trailing_comma_in_a_list_is_reported_with_its_line_and_column() -> None:
    data = b'{\n  "x": [1, 2,]\n}'
    refused(data, "line 2, column 13", "trailing comma")


def test_a_trailing_comma_keeps_its_position_with_a_bom_and_crlf() -> None:
    data = b'\xef\xbb\xbf{\r\n  "decision": "approved",\r\n}\r\n'
    refused(data, "line 2, column 25", "trailing comma")


def test_other_broken_json_is_reported_with_its_line_and_column() -> None:
    refused(b'{\n  "id": c-1\n}', "line 2, column 9", "not valid JSON")


def test_a_duplicate_key_is_named() -> None:
    data = (
        b'{\n  "id": "c-0123456789abcdef",\n  "decision": "approved",\n  "decision": "rejected"\n}'
    )
    message = refused(data, "'decision'", "twice")
    assert "keep one" in message


def test_a_duplicate_key_is_reported_on_its_own_line() -> None:
    data = (
        b'{\n  "candidate": {"decision": "x"},\n  "id": "c-0123456789abcdef",\n'
        b'  "decision": "approved",\n  "decision": "rejected"\n}'
    )
    message = refused(data, "'decision'")
    assert "line 2" not in message


@pytest.mark.parametrize("data", [b"", b"  \n\t\n", b"\xef\xbb\xbf"], ids=["empty", "blank", "bom"])
def test_an_empty_file_is_told_to_fill_in_the_template(data: bytes) -> None:
    refused(data, "the file is empty", "template")


def test_a_json_array_is_told_a_verdict_is_an_object() -> None:
    refused(b'[{"id": "c-0123456789abcdef"}]', "line 1", "JSON object")


def test_non_utf8_bytes_name_the_line() -> None:
    data = verdict_bytes(rationale="Blåbær").replace("å".encode(), b"\xe5")
    refused(data, "line 5", "not UTF-8")


# --- damage to the fields -----------------------------------------------------------------------


def test_an_empty_decision_says_the_decision_is_empty() -> None:
    message = refused(
        verdict_bytes(decision=""), "line 4", "field decision", "the decision is empty"
    )
    assert "approved, approved_with_adjustment or rejected" in message


def test_a_null_decision_says_the_decision_is_empty() -> None:
    refused(verdict_bytes(decision=None), "the decision is empty")


def test_an_unknown_decision_is_named_with_the_choices() -> None:
    message = refused(verdict_bytes(decision="approve"), "line 4", "'approve'", "not a decision")
    assert "approved_with_adjustment" in message


def test_a_missing_decision_is_named() -> None:
    refused(verdict_bytes(drop=["decision"]), "decision", "missing")


def test_an_adjusted_approval_without_its_saving_says_what_to_add() -> None:
    data = verdict_bytes(decision="approved_with_adjustment", drop=["adjusted_saving_nok"])
    message = refused(data, "adjusted_saving_nok", "missing")
    assert "approved_with_adjustment" in message


def test_an_adjusted_approval_with_a_null_saving_is_refused() -> None:
    refused(verdict_bytes(decision="approved_with_adjustment"), "line 8", "adjusted_saving_nok")


def test_an_adjusted_saving_of_zero_is_refused() -> None:
    data = verdict_bytes(decision="approved_with_adjustment", adjusted_saving_nok=0)
    refused(data, "adjusted_saving_nok", "above zero")


@pytest.mark.parametrize("rationale", ["", "   \n  "], ids=["empty", "blank"])
def test_a_rejection_without_a_rationale_asks_for_one(rationale: str) -> None:
    data = verdict_bytes(decision="rejected", rationale=rationale)
    refused(data, "line 5", "field rationale", "a rejection needs a rationale")


def test_a_missing_rationale_is_named() -> None:
    refused(verdict_bytes(drop=["rationale"]), "the field rationale is missing")


def test_an_empty_reviewer_is_named() -> None:
    refused(verdict_bytes(reviewer=" "), "line 6", "the reviewer is empty")


def test_a_misspelt_field_is_named_with_a_spelling_hint() -> None:
    data = verdict_bytes(reviewr="KE")
    message = refused(data, "'reviewr'", "check its spelling")
    assert f"line {len(data.decode().splitlines()) - 1}" in message


def test_a_realization_rate_above_one_is_refused() -> None:
    refused(verdict_bytes(realization_rate=1.5), "line 7", "realization_rate", "1.5", "0 to 1")


def test_a_realization_rate_written_as_text_is_refused() -> None:
    refused(verdict_bytes(realization_rate="85 %"), "realization_rate", "0 to 1")


def test_a_decided_at_that_is_not_a_date_is_refused() -> None:
    message = refused(verdict_bytes(decided_at="yesterday"), "line 9", "decided_at", "'yesterday'")
    assert "2026-11-30T12:00:00Z" in message


def test_a_date_without_a_time_is_refused() -> None:
    refused(verdict_bytes(decided_at="2026-11-30"), "decided_at")


def test_an_id_that_is_not_a_candidate_id_is_refused() -> None:
    refused(verdict_bytes(id="k-01"), "line 3", "field id", "'k-01'", "verbatim")


def test_an_impossible_date_is_refused() -> None:
    refused(verdict_bytes(decided_at="2026-13-45T25:61:00Z"), "decided_at")


@pytest.mark.parametrize(
    ("field", "written"),
    [
        ("realization_rate", "NaN"),
        ("adjusted_saving_nok", "NaN"),
        ("adjusted_saving_nok", "Infinity"),
    ],
)
def test_a_number_that_is_not_finite_is_refused(field: str, written: str) -> None:
    changes: dict[str, Any] = {"decision": "approved_with_adjustment", "adjusted_saving_nok": 1000}
    data = verdict_bytes(**{**changes, field: "__number__"})
    data = data.replace(b'"__number__"', written.encode())
    refused(data, field)


@pytest.mark.parametrize(
    "data",
    [b"[" * 100_000, b'{"adjusted_saving_nok": 1' + b"0" * 5000 + b"}"],
    ids=["deep-nesting", "huge-integer"],
)
def test_pathological_json_gets_a_sentence_not_a_crash(data: bytes) -> None:
    refused(data)


@pytest.mark.loadbearing
def test_every_problem_of_a_verdict_is_named_at_once_by_its_line() -> None:
    text = (
        '{\n  "id": "c-0123456789abcdef",\n  "decision": "maybe",\n  "rationale": "x",\n'
        '  "reviewer": "",\n  "realization_rate": 3\n}\n'
    )
    with pytest.raises(VerdictError) as refused:
        parse_verdict(text.encode(), "v.json")
    said = str(refused.value)
    assert said.startswith("v.json: 3 problems; fix them all:")
    lines = said.splitlines()[1:]
    assert lines[0].startswith("- line 3, field decision: 'maybe' is not a decision")
    assert lines[1].startswith("- line 5, field reviewer: the reviewer is empty")
    assert lines[2].startswith("- line 6, field realization_rate: 3 must be a number from 0 to 1")


def test_two_commas_in_a_row_are_not_called_a_trailing_comma() -> None:
    text = '{"id": "c-0123456789abcdef", "decision": null,, "reviewer": "K"}'
    with pytest.raises(VerdictError) as refused:
        parse_verdict(text.encode(), "v.json")
    assert "line 1, column 47: a second comma here; remove one of the two" in str(refused.value)
    assert "trailing" not in str(refused.value)
    text = '{"id": "c-0123456789abcdef",\n  , "decision": "approved"}'
    with pytest.raises(VerdictError) as refused:
        parse_verdict(text.encode(), "v.json")
    assert "line 2, column 3: a second comma here" in str(refused.value)
