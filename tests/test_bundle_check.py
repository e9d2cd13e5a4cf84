"""``check-bundle`` checks what the bundle format promises, on every line, in one pass (issue 23):
arithmetic on lines no measure touches, units from the vocabulary, a measure's unit against its
line's, measure types from the documented list, a YAML error beside all the rest; exit 1 whenever
anything would be refused or rejected."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from portfolio_optimiser.cli import main

REPO = Path(__file__).resolve().parent.parent
LILLEVIK = REPO / "shared" / "examples" / "portfolio" / "lillevik-school"


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text("utf-8")
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1), "utf-8")


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    copy = tmp_path / "lillevik"
    shutil.copytree(LILLEVIK, copy)
    return copy


def _kuttliste(bundle: Path, item: str) -> Path:
    return next((bundle / "kuttliste").glob(f"{item}-*.md"))


@pytest.mark.loadbearing
def test_one_problem_of_each_kind_in_five_files_is_named_in_one_pass(
    bundle: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _edit(bundle / "cost" / "02-bygning" / "02.6-yttertak.md", "quantity: 3050", "quantity: 3500")
    _edit(bundle / "cost" / "02-bygning" / "02.2-baeresystemer.md", "unit: m2", "unit: kvadrat")
    _edit(_kuttliste(bundle, "k-01"), "unit: m2", "unit: m3")
    _edit(_kuttliste(bundle, "k-04"), "measure_type: simplification", "measure_type: cheaper")
    _edit(_kuttliste(bundle, "k-06"), "title: ", "title: [unclosed ")
    assert main(["check-bundle", str(bundle)]) == 1
    out, err = capsys.readouterr()
    assert "5 problems in lillevik" in err
    for named in (
        "cost/02-bygning/02.6-yttertak.md (code 02.6) field amount_nok: 17080000 but quantity × "
        "unit price is 3500 × 5600 = 19600000",
        "cost/02-bygning/02.2-baeresystemer.md (code 02.2) field unit: 'kvadrat' is not a unit",
        "k-01-standard-window-sizes.md field unit: 'm3', but line 02.3 is measured in 'm2'",
        "field measure_type: 'cheaper' is not a measure type; write one of standardisation",
        "kuttliste/k-06-furniture-framework-agreement.md",
    ):
        assert named in out, named


def test_a_kuttliste_item_the_validator_would_reject_exits_1(
    bundle: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _edit(
        _kuttliste(bundle, "k-01"), "estimated_saving_nok: 798000", "estimated_saving_nok: 800000"
    )
    assert main(["check-bundle", str(bundle)]) == 1
    out, _err = capsys.readouterr()
    assert "k-01-standard-window-sizes.md: the validator would reject it: 420 × 1900" in out


def test_a_wrong_base_estimate_does_not_hide_a_measure_on_no_line(
    bundle: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _edit(bundle / "project.md", "base_estimate_nok: 350395000", "base_estimate_nok: 350000000")
    _edit(_kuttliste(bundle, "k-03"), 'affected_codes: ["02.1"]', 'affected_codes: ["09.9"]')
    assert main(["check-bundle", str(bundle)]) == 1
    out, err = capsys.readouterr()
    assert "2 problems in lillevik" in err
    assert "field base_estimate_nok" in out
    assert "field affected_codes: 09.9 is no cost line of the bundle" in out


def test_the_examples_and_their_own_units_pass(capsys: pytest.CaptureFixture[str]) -> None:
    for example in sorted((REPO / "shared" / "examples" / "portfolio").iterdir()):
        assert main(["check-bundle", str(example)]) == 0, capsys.readouterr().out
