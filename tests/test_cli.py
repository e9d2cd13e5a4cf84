"""The command line as a function of argv: exit codes, one line on stderr, clean stdout."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from portfolio_optimiser.cli import commands, main
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.resources import commons_dir

PORTFOLIO = commons_dir() / "examples" / "portfolio"
EXAMPLE_BUNDLES = sorted(p for p in PORTFOLIO.iterdir() if p.is_dir())
LILLEVIK = PORTFOLIO / "lillevik-school"
REPO = Path(__file__).resolve().parents[1]

GOOD_VERDICT = {
    "id": "c-d67b7045b6ae3f01",
    "decision": "approved",
    "rationale": "The saving holds.",
    "reviewer": "KE",
}


def one_stderr_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("portfolio-optimiser: ")
    return lines[0]


def tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# --- check-verdict ------------------------------------------------------------------------------


def test_check_verdict_accepts_a_good_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "v.json"
    path.write_text(json.dumps(GOOD_VERDICT, indent=2), encoding="utf-8")
    assert main(["check-verdict", str(path)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert "a valid verdict" in out
    assert GOOD_VERDICT["id"] in out


def test_check_verdict_reports_a_bad_file_on_one_line_with_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "v.json"
    path.write_bytes(b'{\n  "id": "c-0123456789abcdef",\n  "decision": "approved",\n}\n')
    before = path.read_bytes()
    assert main(["check-verdict", str(path)]) == 1
    out, err = capsys.readouterr()
    line = one_stderr_line(err)
    assert str(path) in line
    assert "line 3, column 25" in line
    assert out == ""
    assert path.read_bytes() == before


def test_check_verdict_reports_a_missing_file_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check-verdict", str(tmp_path / "nope.json")]) == 1
    assert "nope.json" in one_stderr_line(capsys.readouterr().err)


# --- check-bundle -------------------------------------------------------------------------------


@pytest.mark.parametrize("bundle", EXAMPLE_BUNDLES, ids=lambda p: p.name)
def test_check_bundle_accepts_each_example_bundle(
    bundle: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check-bundle", str(bundle)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.startswith(f"{bundle.name}: ")


def test_check_bundle_reports_a_missing_index_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = tmp_path / "no-index"
    shutil.copytree(LILLEVIK, bundle)
    (bundle / "index.md").unlink()
    assert main(["check-bundle", str(bundle)]) == 1
    out, err = capsys.readouterr()
    line = one_stderr_line(err)
    assert "index.md is missing" in line
    assert "no-index" in line
    assert "problem: " in out and "index.md is missing" in out


def test_check_bundle_reports_a_malformed_cost_line_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(LILLEVIK, bundle)
    walls = bundle / "cost" / "02-bygning" / "02.3-yttervegger.md"
    walls.write_text(
        walls.read_text(encoding="utf-8").replace("amount_nok: 29610000", "amount_nok: lots"),
        encoding="utf-8",
    )
    assert main(["check-bundle", str(bundle)]) == 1
    line = one_stderr_line(capsys.readouterr().err)
    assert "cost/02-bygning/02.3-yttervegger.md field amount_nok" in line


def test_check_bundle_reports_a_path_that_is_not_a_folder_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check-bundle", str(tmp_path / "nope")]) == 1
    assert "not a folder" in one_stderr_line(capsys.readouterr().err)


def test_check_bundle_reports_a_dangling_symlink_as_a_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(LILLEVIK, bundle)
    (bundle / "context" / "dangling.md").symlink_to(bundle / "gone.md")
    assert main(["check-bundle", str(bundle)]) == 1
    line = one_stderr_line(capsys.readouterr().err)
    assert "internal error" not in line
    assert "context/dangling.md" in line


# --- usage --------------------------------------------------------------------------------------


def test_an_unknown_command_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["frobnicate"])
    assert caught.value.code == 2
    assert "frobnicate" in capsys.readouterr().err


def test_no_command_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main([])
    assert caught.value.code == 2


def test_python_dash_m_help_works_as_a_subprocess() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "portfolio_optimiser", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for command in ("demo", "check-verdict", "check-bundle"):
        assert command in result.stdout


# --- terminal safety ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "hostile",
    ["\\x1b[31mred\\x1b[0m", "\\x1b]0;title\\x07"],
    ids=["csi-colour", "osc-window-title"],
)
def test_an_escape_sequence_in_a_bundle_title_never_reaches_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], hostile: str
) -> None:
    bundle = tmp_path / "b"
    shutil.copytree(LILLEVIK, bundle)
    # YAML double-quoted escapes, so the parsed title carries the real ESC and BEL characters.
    project = bundle / "project.md"
    project.write_text(
        project.read_text(encoding="utf-8").replace(
            "name: Lillevik skole, new school building", f'name: "Lillevik {hostile} skole"'
        ),
        encoding="utf-8",
    )
    option = bundle / "kuttliste" / "k-01-standard-window-sizes.md"
    option.write_text(
        option.read_text(encoding="utf-8").replace(
            "title: Standard window sizes", f'title: "Standard {hostile} windows"'
        ),
        encoding="utf-8",
    )
    assert "\x1b" in load_ir_projections(bundle).name  # the hostile bytes really are in the IR
    assert main(["check-bundle", str(bundle)]) == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out
    assert "\x07" not in out
    assert "lillevik-school: Lillevik" in out
    assert err == ""


def test_an_escape_sequence_in_a_bundle_path_never_reaches_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = tmp_path / "evil\x1b]0;pwned\x07"
    bundle.mkdir()
    assert main(["check-bundle", str(bundle)]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err
    assert "\x07" not in err


def test_check_bundle_unpacks_an_archive_as_the_inbox_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    archive = shutil.make_archive(
        str(tmp_path / "school"), "zip", root_dir=PORTFOLIO, base_dir="lillevik-school"
    )
    assert main(["check-bundle", archive]) == 0
    assert "lillevik-school: " in capsys.readouterr().out


def test_check_verdict_names_an_id_the_workspace_does_not_await(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from portfolio_optimiser.daemon.ledger import Ledger

    (tmp_path / ".state").mkdir()
    Ledger.open(tmp_path / ".state" / "ledger.sqlite").close()
    path = tmp_path / "v.json"
    path.write_text(json.dumps(GOOD_VERDICT), encoding="utf-8")
    assert main(["check-verdict", str(path), "--workspace", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "names no candidate awaiting a verdict" in err and err.count("\n") == 1


def _families() -> list[type[BaseException]]:
    import importlib
    import pkgutil

    import portfolio_optimiser
    from portfolio_optimiser.errors import UserError

    for module in pkgutil.walk_packages(portfolio_optimiser.__path__, "portfolio_optimiser."):
        if module.name.endswith(("__main__", ".simulation")):
            continue
        importlib.import_module(module.name)
    found, todo = [], list(UserError.__subclasses__())
    while todo:
        kind = todo.pop()
        found.append(kind)
        todo.extend(kind.__subclasses__())
    return sorted(found, key=lambda k: k.__qualname__)


@pytest.mark.loadbearing
@pytest.mark.parametrize("error", _families(), ids=lambda k: k.__qualname__)
def test_every_expected_failure_is_one_sentence_and_exit_1(
    error: type[BaseException], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by a new user: VerdictFrontmatterError and OutputExists reached the CLI as "internal
    # error ... please report it", because the CLI listed the user errors by hand.
    instance = error.__new__(error)
    Exception.__init__(instance, f"{error.__name__}: what went wrong, and what to do")

    def raising(_args: object) -> int:
        raise instance

    monkeypatch.setattr("portfolio_optimiser.cli.commands.check_verdict", raising)
    from portfolio_optimiser.cli import main

    assert main(["check-verdict", "x.json"]) == getattr(error, "exit_code", 1)
    err = capsys.readouterr().err
    assert err == f"portfolio-optimiser: {error.__name__}: what went wrong, and what to do\n"


def test_the_family_holds_the_errors_users_met() -> None:
    names = {kind.__name__ for kind in _families()}
    assert {"VerdictFrontmatterError", "OutputExists", "BundleError", "LedgerError"} <= names


def test_check_bundle_shows_an_id_it_minted_and_every_problem_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from portfolio_optimiser.cli import main

    bundle = tmp_path / "b"
    shutil.copytree(REPO / "shared" / "examples" / "portfolio" / "lillevik-school", bundle)
    first = next((bundle / "kuttliste").glob("k-01*.md"))
    first.write_text(first.read_text("utf-8").replace("id: k-01\n", ""), "utf-8")
    assert main(["check-bundle", str(bundle)]) == 0
    out = capsys.readouterr().out
    assert f"note: kuttliste/{first.name}: no id; it is 'kuttliste-{first.stem.lower()}'" in out
    for path in sorted((bundle / "kuttliste").glob("k-0[23]*.md")):
        text = path.read_text("utf-8")
        path.write_text(text.replace("measure_type:", "kind_of_measure:"), "utf-8")
    assert main(["check-bundle", str(bundle)]) == 1
    out, err = capsys.readouterr()
    assert err.startswith("portfolio-optimiser: 2 problems in b; fix them all")
    assert out.count("field measure_type is missing") == 2 and "types already used:" in out


def test_an_internal_error_is_one_line_naming_where_its_scrubbed_traceback_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key = "sk-" + "proj-" + "cR4" * 8

    def broken(_args: object) -> int:
        raise KeyError(f"boom {key}")

    monkeypatch.setattr(commands, "check_bundle", broken)
    (tmp_path / "inbox" / "projects").mkdir(parents=True)  # a workspace, to keep it in
    assert main(["--workspace", str(tmp_path), "check-bundle", str(tmp_path)]) == 70
    line = one_stderr_line(capsys.readouterr().err)
    assert "internal error (KeyError" in line and "please report it" in line and key not in line
    kept = Path(line.split("its traceback is in ", 1)[1].split(";", 1)[0])
    assert kept.parent == tmp_path / ".state" / "tracebacks"
    text = kept.read_text("utf-8")
    assert "Traceback (most recent call last)" in text and "def broken" not in line
    assert "in broken" in text and key not in text


# --- commands that run where the user is (issue 23, item 3) ----------------------------------


def test_every_subcommand_and_every_option_has_help() -> None:
    import argparse

    from portfolio_optimiser.cli import build_parser

    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in sub.choices.items():
        assert command.description, name
        for action in command._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, f"{name} {action.dest}"


def test_an_unknown_capability_is_refused_with_the_list(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["plan", "--materiality", "high", "--capabilities", "costreview"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "costreview is not a capability; give one or more of propose, cost_review" in err


def test_a_workspace_that_is_the_source_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--workspace", str(REPO), "status"]) == 64
    err = capsys.readouterr().err
    assert "is portfolio-optimiser's source folder, not a workspace of yours" in err
    assert not (REPO / ".state").exists()
    (tmp_path / "inbox" / "projects").mkdir(parents=True)
    assert main(["--workspace", str(tmp_path), "status"]) == 0
    assert "source folder" not in capsys.readouterr().err


def test_a_printed_hint_runs_where_the_user_is() -> None:
    from portfolio_optimiser.invocation import command, source_checkout

    checkout = source_checkout()
    assert checkout == REPO
    under_uv = command("run", "--workspace", "/w s", environ={"UV_RUN_RECURSION_DEPTH": "1"})
    assert under_uv == f"uv run --project {REPO} portfolio-optimiser run --workspace '/w s'"
    assert command("run", environ={}) == "portfolio-optimiser run"


def test_check_verdict_outside_a_workspace_says_the_id_was_not_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    verdict = tmp_path / "v.json"
    verdict.write_text(
        json.dumps(
            {
                "id": "c-0123456789abcdef",
                "decision": "approved",
                "rationale": "Fine.",
                "reviewer": "KE",
            }
        ),
        "utf-8",
    )
    monkeypatch.chdir(tmp_path)  # the default workspace, the current folder, is none
    assert main(["check-verdict", str(verdict)]) == 0
    out = capsys.readouterr().out
    assert "a valid verdict" in out and "was not checked" in out
