"""The IR projection of a bundle: what loads, and the one sentence every malformed concept gets."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from portfolio_optimiser.context.errors import (
    BundleError,
    BundleEscapeError,
    FrontmatterError,
    IRError,
)
from portfolio_optimiser.context.ir import bundle_files, load_ir_projections
from portfolio_optimiser.resources import commons_dir

EXAMPLES = commons_dir() / "examples" / "portfolio"
EXAMPLE_BUNDLES = sorted(p for p in EXAMPLES.iterdir() if p.is_dir())


# --- building bundles ---------------------------------------------------------------------------


def concept(kind: str, *lines: str, body: str = "Some prose.\n") -> str:
    """A concept file with the frontmatter lines exactly as given (so unquoted values stay so)."""
    header = "".join(f"{line}\n" for line in lines)
    return f"---\ntype: {kind}\n{header}---\n\n{body}"


def project_md(*extra: str) -> str:
    return concept("project", "id: demo", "name: Demo project", "currency: NOK", *extra)


def cost_line(code: str = '"01"', amount: str = "1000", *extra: str) -> str:
    lines = [f"code: {code}"] if code else []
    return concept("cost-line", *lines, "title: A cost line", f"amount_nok: {amount}", *extra)


def measure(*lines: str) -> str:
    return concept("measure-option", *lines)


def make_bundle(
    root: Path, files: dict[str, str | bytes], *, project: bool = True, index: bool = True
) -> Path:
    """A bundle folder with index.md, project.md (unless told not to) and the given files."""
    root.mkdir(parents=True, exist_ok=True)
    if index:
        (root / "index.md").write_text("# Demo\n\n* [Project](project.md)\n", encoding="utf-8")
    if project and "project.md" not in files:
        (root / "project.md").write_text(project_md(), encoding="utf-8")
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def expect_error(root: Path, kind: type[BundleError], *needles: str) -> str:
    """Loading ``root`` raises exactly ``kind`` with one sentence holding every needle, and
    changes nothing in the bundle."""
    before = snapshot(root)
    with pytest.raises(BundleError) as caught:
        load_ir_projections(root)
    assert type(caught.value) is kind, f"{type(caught.value).__name__}: {caught.value}"
    message = str(caught.value)
    assert "\n" not in message
    assert "Traceback" not in message
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    assert snapshot(root) == before
    return message


# --- the example portfolio ----------------------------------------------------------------------


def test_there_are_three_example_bundles() -> None:
    assert [p.name for p in EXAMPLE_BUNDLES] == [
        "e39-road-section",
        "hospital-it-system",
        "lillevik-school",
    ]


@pytest.mark.parametrize("bundle", EXAMPLE_BUNDLES, ids=lambda p: p.name)
def test_each_example_bundle_loads_with_cost_lines_and_a_kuttliste(bundle: Path) -> None:
    project = load_ir_projections(bundle)
    assert project.id == bundle.name
    assert project.currency == "NOK"
    assert project.cost_lines
    assert project.measure_options


@pytest.mark.parametrize("bundle", EXAMPLE_BUNDLES, ids=lambda p: p.name)
def test_each_example_bundles_cost_lines_add_up_to_its_base_estimate(bundle: Path) -> None:
    project = load_ir_projections(bundle)
    assert project.base_estimate_nok is not None
    assert math.isclose(
        math.fsum(line.amount_nok for line in project.cost_lines),
        project.base_estimate_nok,
        abs_tol=0.5,
    )


@pytest.mark.parametrize("bundle", EXAMPLE_BUNDLES, ids=lambda p: p.name)
def test_each_example_bundles_codes_are_strings_and_every_affected_code_exists(
    bundle: Path,
) -> None:
    project = load_ir_projections(bundle)
    assert all(isinstance(line.code, str) and line.code for line in project.cost_lines)
    for option in project.measure_options:
        assert all(isinstance(code, str) for code in option.affected_codes)
        assert set(option.affected_codes) <= project.codes


def test_an_example_code_with_a_leading_zero_keeps_it() -> None:
    project = load_ir_projections(EXAMPLES / "lillevik-school")
    assert "02.3" in project.codes
    assert "09" in project.codes


# --- a minimal bundle ---------------------------------------------------------------------------


def test_a_minimal_bundle_built_here_loads(tmp_path: Path) -> None:
    root = make_bundle(
        tmp_path / "b",
        {
            "project.md": project_md("base_estimate_nok: 3000", "p50_nok: 3500", "p85_nok: 4000"),
            "cost/01.md": cost_line('"01"', "1000"),
            "cost/02.md": cost_line('"02.3"', "2000.0"),
            "kuttliste/k-01.md": measure(
                "id: k-01",
                "measure_type: standardisation",
                'affected_codes: ["02.3"]',
                "estimated_saving_nok: 500",
            ),
        },
    )
    project = load_ir_projections(root)
    assert project.id == "demo"
    assert [(line.code, line.amount_nok) for line in project.cost_lines] == [
        ("01", 1000),
        ("02.3", 2000.0),
    ]
    assert [line.source for line in project.cost_lines] == ["cost/01.md", "cost/02.md"]
    assert project.measure_options[0].affected_codes == ("02.3",)


def test_a_cost_line_nobody_links_to_still_counts(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", {"deep/er/unlinked.md": cost_line('"07"', "5")})
    assert load_ir_projections(root).codes == {"07"}


# --- amounts ------------------------------------------------------------------------------------


def test_an_amount_written_as_a_word_names_file_and_field(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", {"cost/01.md": cost_line('"01"', "twelve")})
    message = expect_error(root, IRError, "cost/01.md", "amount_nok", "'twelve'")
    assert "plain number" in message


def test_an_amount_with_thousands_separators_names_file_and_field(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", {"cost/01.md": cost_line('"01"', '"12 480 000"')})
    message = expect_error(root, IRError, "cost/01.md", "amount_nok", "12 480 000")
    assert "without spaces or thousands separators" in message


def test_a_boolean_amount_is_not_a_number(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", {"cost/01.md": cost_line('"01"', "true")})
    expect_error(root, IRError, "cost/01.md", "amount_nok", "not a number")


@pytest.mark.parametrize("written", [".nan", ".inf", "-.inf"])
def test_an_amount_that_is_not_finite_is_refused(tmp_path: Path, written: str) -> None:
    root = make_bundle(tmp_path / "b", {"cost/01.md": cost_line('"01"', written)})
    expect_error(root, IRError, "cost/01.md", "amount_nok")


def test_a_measure_saving_that_is_not_a_number_names_file_and_field(tmp_path: Path) -> None:
    root = make_bundle(
        tmp_path / "b",
        {
            "cost/01.md": cost_line(),
            "kuttliste/k-01.md": measure(
                "id: k-01",
                "measure_type: scope",
                'affected_codes: ["01"]',
                "estimated_saving_nok: 5 000",
            ),
        },
    )
    expect_error(root, IRError, "kuttliste/k-01.md", "estimated_saving_nok", "not a number")


# --- codes --------------------------------------------------------------------------------------


def test_a_cost_line_without_a_code_names_file_and_field(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", {"cost/01.md": cost_line(code="")})
    message = expect_error(root, IRError, "cost/01.md", "code", "missing")
    assert "add 'code:" in message


def test_an_unquoted_code_says_to_quote_it(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", {"cost/02.md": cost_line("02.3", "1000")})
    message = expect_error(root, IRError, "cost/02.md", "code")
    assert "quotes" in message
    assert 'code: "02.3"' in message


def test_an_unquoted_affected_code_says_to_quote_it(tmp_path: Path) -> None:
    root = make_bundle(
        tmp_path / "b",
        {
            "cost/02.md": cost_line('"02.3"'),
            "kuttliste/k-01.md": measure(
                "id: k-01",
                "measure_type: scope",
                "affected_codes: [02.3]",
                "estimated_saving_nok: 5",
            ),
        },
    )
    message = expect_error(root, IRError, "kuttliste/k-01.md", "affected_codes")
    assert "quotes" in message


def test_an_empty_quoted_code_is_reported_as_empty_not_as_unquoted(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", {"cost/01.md": cost_line('""')})
    message = expect_error(root, IRError, "cost/01.md", "field code", "empty")
    assert "not text" not in message


def test_duplicate_codes_name_both_files(tmp_path: Path) -> None:
    root = make_bundle(
        tmp_path / "b",
        {"cost/a.md": cost_line('"02.3"'), "cost/b.md": cost_line('"02.3"')},
    )
    message = expect_error(root, IRError, "cost/a.md", "cost/b.md", "'02.3'")
    assert "unique" in message


def test_duplicate_measure_option_ids_name_both_files(tmp_path: Path) -> None:
    option = measure(
        "id: k-01", "measure_type: scope", 'affected_codes: ["01"]', "estimated_saving_nok: 5"
    )
    root = make_bundle(
        tmp_path / "b",
        {"cost/01.md": cost_line(), "k/one.md": option, "k/two.md": option},
    )
    expect_error(root, IRError, "k/one.md", "k/two.md", "'k-01'")


# --- the project header -------------------------------------------------------------------------


def test_a_base_estimate_that_does_not_match_the_sum_names_file_field_and_sum(
    tmp_path: Path,
) -> None:
    root = make_bundle(
        tmp_path / "b",
        {
            "project.md": project_md("base_estimate_nok: 5000"),
            "cost/01.md": cost_line('"01"', "1000"),
            "cost/02.md": cost_line('"02"', "2000"),
        },
    )
    expect_error(root, IRError, "project.md", "base_estimate_nok", "5000", "3000")


def test_p85_below_p50_names_file_and_both_fields(tmp_path: Path) -> None:
    root = make_bundle(
        tmp_path / "b",
        {"project.md": project_md("p50_nok: 100", "p85_nok: 90"), "cost/01.md": cost_line()},
    )
    expect_error(root, IRError, "project.md", "p85_nok", "p50_nok")


def test_a_bundle_without_a_project_concept_says_to_add_one(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", {"cost/01.md": cost_line()}, project=False)
    message = expect_error(root, IRError, "type: project")
    assert "add a project.md" in message


def test_two_project_concepts_name_both_files(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", {"project.md": project_md(), "other/p.md": project_md()})
    message = expect_error(root, IRError, "project.md", "other/p.md")
    assert "keep one" in message


def test_a_project_id_with_capitals_and_spaces_names_file_and_field(tmp_path: Path) -> None:
    root = make_bundle(
        tmp_path / "b", {"project.md": concept("project", "id: Demo Project", "name: D")}
    )
    expect_error(root, IRError, "project.md", "field id", "lowercase")


def test_a_currency_other_than_nok_names_file_and_field(tmp_path: Path) -> None:
    root = make_bundle(
        tmp_path / "b",
        {"project.md": concept("project", "id: demo", "name: D", "currency: EUR")},
    )
    expect_error(root, IRError, "project.md", "currency", "'EUR'")


# --- measure options ----------------------------------------------------------------------------


def test_empty_affected_codes_name_file_and_field(tmp_path: Path) -> None:
    root = make_bundle(
        tmp_path / "b",
        {
            "cost/01.md": cost_line(),
            "kuttliste/k-01.md": measure(
                "id: k-01",
                "measure_type: scope",
                "affected_codes: []",
                "estimated_saving_nok: 5",
            ),
        },
    )
    message = expect_error(root, IRError, "kuttliste/k-01.md", "affected_codes")
    assert "non-empty list" in message


def test_a_measure_option_without_measure_type_names_file_and_field(tmp_path: Path) -> None:
    root = make_bundle(
        tmp_path / "b",
        {
            "cost/01.md": cost_line(),
            "kuttliste/k-01.md": measure(
                "id: k-01", 'affected_codes: ["01"]', "estimated_saving_nok: 5"
            ),
        },
    )
    expect_error(root, IRError, "kuttliste/k-01.md", "measure_type", "missing")


# --- frontmatter --------------------------------------------------------------------------------


def test_frontmatter_that_is_a_list_names_file_and_line(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", {"notes/list.md": "---\n- a\n- b\n---\n\nBody\n"})
    message = expect_error(root, FrontmatterError, "notes/list.md", "line 2", "list")
    assert "key: value" in message


def test_a_python_object_tag_is_refused_and_never_run(tmp_path: Path) -> None:
    sentinel = tmp_path / "pwned"
    root = make_bundle(
        tmp_path / "b",
        {
            "notes/evil.md": "---\ntype: note\n"
            f'payload: !!python/object/apply:os.system ["touch {sentinel}"]\n---\n'
        },
    )
    message = expect_error(root, FrontmatterError, "notes/evil.md", "line 3", "!!python/object")
    assert "not allowed" in message
    assert not sentinel.exists()


def test_a_plain_python_object_tag_is_refused(tmp_path: Path) -> None:
    root = make_bundle(
        tmp_path / "b",
        {"notes/evil.md": "---\ntype: note\nx: !!python/object:builtins.dict {}\n---\n"},
    )
    expect_error(root, FrontmatterError, "notes/evil.md", "line 3", "!!python/object")


def test_frontmatter_that_never_closes_names_file_and_line(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", {"cost/01.md": "---\ntype: cost-line\ncode: '01'\n"})
    expect_error(root, FrontmatterError, "cost/01.md", "line 1", "closing '---'")


def test_non_utf8_bytes_name_file_and_line(tmp_path: Path) -> None:
    root = make_bundle(
        tmp_path / "b",
        {"notes/latin1.md": b"---\ntype: note\n---\nBl\xe5b\xe6r\n"},
    )
    message = expect_error(root, BundleError, "notes/latin1.md", "line 4", "0xe5")
    assert "UTF-8" in message


def test_a_bom_and_crlf_line_ends_are_accepted(tmp_path: Path) -> None:
    text = "\ufeff" + cost_line('"01"', "1000").replace("\n", "\r\n")
    root = make_bundle(tmp_path / "b", {"cost/01.md": text.encode("utf-8")})
    assert load_ir_projections(root).codes == {"01"}


def test_a_field_written_twice_in_frontmatter_is_refused(tmp_path: Path) -> None:
    root = make_bundle(
        tmp_path / "b",
        {"cost/01.md": cost_line('"01"', "1000", "amount_nok: 2000")},
    )
    message = expect_error(root, FrontmatterError, "cost/01.md", "line 6", "'amount_nok'")
    assert "twice" in message


# --- what is tolerated and what is ignored ------------------------------------------------------


def test_unknown_keys_and_unknown_types_are_tolerated(tmp_path: Path) -> None:
    root = make_bundle(
        tmp_path / "b",
        {
            "project.md": project_md("phase: forprosjekt", "price_level: '2025'"),
            "cost/01.md": cost_line('"01"', "1000", "supplier: Acme", "notes: [a, b]"),
            "context/r.md": concept("risk-register", "owner: KE", "score: 7"),
            "context/plain.md": "No frontmatter at all.\n",
        },
    )
    project = load_ir_projections(root)
    assert project.codes == {"01"}
    assert project.cost_lines[0].amount_nok == 1000


def test_verdict_files_are_ignored_by_the_ir(tmp_path: Path) -> None:
    root = make_bundle(
        tmp_path / "b",
        {
            "cost/01.md": cost_line('"01"', "1000"),
            "verdicts/v-001.md": concept(
                "verdict", "code: 02.3", "amount_nok: twelve", "decision: approved"
            ),
        },
    )
    project = load_ir_projections(root)
    assert project.codes == {"01"}
    assert project.cost_total_nok == 1000


def test_hidden_folders_and_files_are_skipped(tmp_path: Path) -> None:
    broken = cost_line("02.3", "twelve")
    root = make_bundle(
        tmp_path / "b",
        {
            "cost/01.md": cost_line('"01"', "1000"),
            ".git/x.md": broken,
            ".obsidian/deep/y.md": broken,
            "cost/.draft.md": broken,
        },
    )
    project = load_ir_projections(root)
    assert project.codes == {"01"}
    assert not any("/." in f"/{rel}" for rel in project.files)


def test_index_and_log_are_never_concepts(tmp_path: Path) -> None:
    root = make_bundle(
        tmp_path / "b",
        {
            "cost/01.md": cost_line('"01"', "1000"),
            "cost/index.md": cost_line('"99"', "5"),
            "log.md": cost_line('"98"', "5"),
        },
    )
    assert load_ir_projections(root).codes == {"01"}


# --- symlinks -----------------------------------------------------------------------------------


def test_a_symlink_to_a_file_outside_the_bundle_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text(cost_line('"66"', "1"), encoding="utf-8")
    root = make_bundle(tmp_path / "b", {"cost/01.md": cost_line()})
    (root / "cost" / "link.md").symlink_to(outside)
    expect_error(root, BundleEscapeError, "cost/link.md", "outside the bundle")


def test_a_symlink_to_a_file_inside_the_bundle_counts_it_once(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", {"cost/01.md": cost_line('"01"', "1000")})
    (root / "alias.md").symlink_to(root / "cost" / "01.md")
    project = load_ir_projections(root)
    assert project.codes == {"01"}
    assert project.cost_total_nok == 1000


def test_bundle_files_lists_every_markdown_file_sorted_by_relative_path(tmp_path: Path) -> None:
    root = make_bundle(
        tmp_path / "b",
        {"z.md": "z\n", "a/b.md": "b\n", "a/c.txt": "not markdown\n", ".h/x.md": "x\n"},
    )
    assert [rel for _, rel in bundle_files(root)] == ["a/b.md", "index.md", "project.md", "z.md"]


def test_a_dangling_symlink_names_the_file(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", {"cost/01.md": cost_line()})
    (root / "cost" / "dangling.md").symlink_to(root / "nowhere.md")
    message = expect_error(root, BundleError, "cost/dangling.md", "does not exist")
    assert "nowhere.md" in message


# --- every problem at once ------------------------------------------------------------------------


@pytest.mark.loadbearing
def test_every_problem_of_a_bundle_is_reported_at_once_sorted_by_file(tmp_path: Path) -> None:
    # Found by a new user: check-bundle named the missing id in one file, then after the fix the
    # missing measure_type, then the next file: one round trip per problem.
    root = make_bundle(
        tmp_path / "b",
        {
            "cost/01.md": cost_line('"01"', "twelve"),
            "cost/02.md": cost_line('"02"', "5000"),
            "k/b-second.md": measure('affected_codes: ["02"]', "estimated_saving_nok: 100"),
            "k/a-first.md": measure(
                "measure_type: reuse", 'affected_codes: ["02"]', "estimated_saving_nok: lots"
            ),
            "notes.md": "---\n- not\n- a mapping\n---\n",
        },
    )
    with pytest.raises(IRError) as caught:
        load_ir_projections(root)
    problems = caught.value.problems
    assert len(problems) == 4, problems
    assert [p.split(":")[0].split(" ")[0] for p in problems] == [
        "cost/01.md",
        "k/a-first.md",
        "k/b-second.md",
        "notes.md",
    ]
    assert str(caught.value).startswith("4 problems in b; fix them all")
    assert "measure_type is missing" in problems[2] and "types already used: reuse" in problems[2]


def test_a_missing_measure_type_is_offered_the_types_experts_judged(tmp_path: Path) -> None:
    root = make_bundle(
        tmp_path / "b",
        {
            "cost/02.md": cost_line('"02"', "5000"),
            "k/k-01.md": measure("id: k-01", 'affected_codes: ["02"]', "estimated_saving_nok: 100"),
        },
    )
    with pytest.raises(IRError) as caught:
        load_ir_projections(root, known_types=["standardisation", "phasing"])
    assert "types already used: phasing, standardisation" in str(caught.value)


@pytest.mark.loadbearing
def test_a_measure_option_without_an_id_gets_one_minted_from_its_path(tmp_path: Path) -> None:
    files = {
        "cost/02.md": cost_line('"02"', "5000"),
        "kuttliste/K 01 Windows.md": measure(
            "measure_type: standardisation", 'affected_codes: ["02"]', "estimated_saving_nok: 100"
        ),
    }
    first = load_ir_projections(make_bundle(tmp_path / "a", files))
    again = load_ir_projections(make_bundle(tmp_path / "b", files))
    [option] = first.measure_options
    assert option.id == "kuttliste-k-01-windows" and option.id_minted
    assert again.measure_options[0].id == option.id  # stable: the same path, the same id
