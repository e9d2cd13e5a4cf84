"""``demo`` goes through the daemon's own path and leaves a real workspace; the persona is read,
never inlined, and the learned signal reaches the learning run's prompt and not the control's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from portfolio_optimiser.cli import main
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.invocation import command

from .conftest import EXAMPLES, REPO
from .daemon_helpers import config_with_local_server
from .fakes.llm_server import FakeLLMServer
from .ssh_keys import Key, ssh_keygen


def demo(
    target: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, list[str], str]:
    code = main(["demo", "--into", str(target), *extra])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def _by_age(project: Path) -> list[Path]:
    """A project's run folders, oldest first (a run id tells runs apart, not their order)."""
    return sorted(project.iterdir(), key=lambda run: (run / "report.md").stat().st_mtime_ns)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, list[str]]:
    target = tmp_path_factory.mktemp("demo") / "ws"
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("PORTFOLIO_OPTIMISER_REASONING_MODE", raising=False)
        import io
        from contextlib import redirect_stdout

        buffer = io.StringIO()
        with redirect_stdout(buffer):
            code = main(["demo", "--into", str(target)])
    return target, code, buffer.getvalue().splitlines()


@pytest.mark.loadbearing
def test_demo_leaves_the_workspace_a_user_gets(demo_run: tuple[Path, int, list[str]]) -> None:
    ws, code, _out = demo_run
    assert code == 0
    for project in ("lillevik-school", "e39-road-section", "hospital-it-system", "nordvik-school"):
        for run in (ws / "outbox" / "runs" / project).iterdir():
            assert (run / "report.md").is_file() and (run / "savings-by-code.svg").is_file()
            assert list((run / "verdicts").glob("c-*.json")), project
        assert (ws / "bundles" / "projects" / project / "index.md").is_file()
    runs = {p.name: len(list(p.iterdir())) for p in (ws / "outbox" / "runs").iterdir()}
    assert runs == {
        "lillevik-school": 2,  # and its revision
        "e39-road-section": 1,
        "hospital-it-system": 1,
        "nordvik-school": 1,
    }
    spend = json.loads((ws / "outbox" / "spend.json").read_text("utf-8"))
    assert len(spend["runs"]) == 5  # the examples, the learning run and the revision, once each
    assert [p.name for p in (ws / "bundles" / "wiki" / "verdicts").glob("*.md")] == [
        "c-d67b7045b6ae3f01.md"
    ]
    verdict = json.loads((ws / "inbox" / "verdicts" / "c-d67b7045b6ae3f01.json").read_text())
    assert verdict["$schema"].endswith("verdict.schema.json")  # the template, filled in
    assert verdict["reviewer"] == "KE" and verdict["decision"] == "approved"
    assert not [p for p in (ws / "inbox" / "projects").iterdir()]  # everything taken in


@pytest.mark.loadbearing
def test_the_learning_run_proposes_the_approved_measure_and_its_prompt_carries_the_marker(
    demo_run: tuple[Path, int, list[str]],
) -> None:
    ws, _code, out = demo_run
    [learning] = (ws / "outbox" / "runs" / "nordvik-school").iterdir()
    provenance = json.loads((learning / "provenance.json").read_text("utf-8"))
    assert "RX-7Q" in provenance["learned"]
    proposals = json.loads((learning / "proposals.json").read_text("utf-8"))
    learned = [c for c in proposals["candidates"] if c["origin"] == "verdict:c-d67b7045b6ae3f01"]
    assert [c["affected_codes"] for c in learned] == [["02.3"]]
    assert "RX-7Q" in (learning / "report.md").read_text("utf-8")
    [control] = (ws / ".demo-control" / "outbox" / "runs" / "nordvik-school").iterdir()
    assert "RX-7Q" not in json.loads((control / "provenance.json").read_text())["learned"]
    first, _revised = _by_age(ws / "outbox" / "runs" / "lillevik-school")
    assert json.loads((first / "provenance.json").read_text())["learned"] == ""
    assert any("reached nordvik-school's prompt: yes" in line for line in out)
    assert any("marker in its prompt: no" in line for line in out)


def test_the_demo_ends_with_the_file_to_open_and_the_next_command(
    demo_run: tuple[Path, int, list[str]],
) -> None:
    ws, _code, out = demo_run
    opened = out[-2].removeprefix("Open first: ")
    assert opened.endswith("report.md") and Path(opened).is_file()
    assert out[-1] == f"Next: {command('run', '--workspace', str(ws))}"
    assert "The runs were local: no model is configured" in "\n".join(out)
    assert "\x1b" not in "\n".join(out)


def test_every_example_project_is_reported(demo_run: tuple[Path, int, list[str]]) -> None:
    _ws, _code, out = demo_run
    for bundle in sorted(p for p in (EXAMPLES / "portfolio").iterdir() if p.is_dir()):
        assert any(line.strip().startswith(f"{load_ir_projections(bundle).id}: ") for line in out)


def test_without_the_fold_in_the_prompt_the_demo_fails_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The demo's claim is read from what the run recorded, not assumed: cut the fold and it fails.
    monkeypatch.setattr("portfolio_optimiser.pipeline.run.fold", lambda *_a, **_k: "")
    code, out, _err = demo(tmp_path / "ws", capsys)
    assert code == 1
    assert any("reached nordvik-school's prompt: NO" in line for line in out)


@pytest.mark.loadbearing
def test_the_demos_marker_follows_the_persona_artifact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A throwaway copy of the commons with another marker: the demo must follow the file.
    commons = tmp_path / "commons"
    shutil.copytree(REPO / "shared", commons, symlinks=True)
    example = commons / "skills" / "expert-reviewer" / "references" / "example-verdict.json"
    data = json.loads(example.read_text("utf-8"))
    data["rationale"] = data["rationale"].replace("(marker RX-7Q)", "(marker ZZ-42)")
    example.write_text(json.dumps(data, indent=2), encoding="utf-8")
    monkeypatch.setattr("portfolio_optimiser.persona.commons_dir", lambda: commons)
    monkeypatch.setattr("portfolio_optimiser.daemon.demo.commons_dir", lambda: commons)
    code, out, _err = demo(tmp_path / "ws", capsys)
    assert code == 0
    assert any("(marker ZZ-42) reached nordvik-school's prompt: yes" in line for line in out)


def test_the_marker_is_absent_from_every_bundle() -> None:
    for path in EXAMPLES.rglob("*.md"):
        assert "RX-7Q" not in path.read_text("utf-8"), path


def test_a_folder_with_something_in_it_is_refused_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "notes.txt").write_text("mine")
    code, _out, err = demo(tmp_path / "ws", capsys)
    assert code == 1
    assert "is not an empty folder" in err and "new or empty" in err
    assert [p.name for p in (tmp_path / "ws").iterdir()] == ["notes.txt"]


def test_without_into_the_demo_names_a_new_folder_and_workspace_is_taken_when_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "portfolio-optimiser-demo").mkdir()  # taken: the next name is used
    (tmp_path / "portfolio-optimiser-demo" / "x").write_text("")
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert f"Workspace: {tmp_path / 'portfolio-optimiser-demo-2'}" in out
    assert main(["demo", "--workspace", str(tmp_path / "given")]) == 0
    assert (tmp_path / "given" / "outbox" / "spend.json").is_file()


def test_the_demo_leaves_the_commons_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def tree(root: Path) -> dict[str, bytes]:
        return {
            p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()
        }

    before = tree(EXAMPLES)
    assert demo(tmp_path / "ws", capsys)[0] == 0
    assert tree(EXAMPLES) == before


def test_with_a_model_configured_the_demo_consults_it_and_says_which(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeLLMServer(content="The figures hold.\nVERDICT: APPROVE") as server:
        monkeypatch.setenv("PORTFOLIO_OPTIMISER_REASONING_MODE", "offline")
        config = config_with_local_server(tmp_path / "config.toml", server.base_url)
        code, out, _err = demo(tmp_path / "ws", capsys, "--config", str(config))
        assert server.requests  # the model was really asked
    assert code == 0
    assert any(line.startswith("Models consulted: ") and "local-model" in line for line in out)
    assert not any("The runs were local" in line for line in out)


@pytest.mark.loadbearing
def test_status_on_the_demo_is_short_and_its_counts_match_the_folders(
    demo_run: tuple[Path, int, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    ws, _code, _out = demo_run
    capsys.readouterr()
    assert main(["--workspace", str(ws), "status"]) == 0
    said = capsys.readouterr().out.splitlines()
    assert len(said) <= 25, "\n".join(said)
    decided = {p.stem for p in (ws / "inbox" / "verdicts").glob("*.json")}
    latest = [_by_age(p)[-1] for p in sorted((ws / "outbox" / "runs").iterdir())]
    templates = [t for run in latest for t in (run / "verdicts").glob("*.json")]
    waiting = len([t for t in templates if t.stem not in decided])
    projects = len({t.parent.parent.parent.name for t in templates if t.stem not in decided})
    assert f"awaiting a verdict: {waiting} candidate(s) in {projects} project(s)" in said
    failed = [p for p in (ws / "outbox" / "failed").glob("*") if not p.name.endswith(".txt")]
    assert f"failed: {len(failed) or 'nothing'}" in "\n".join(said)
    assert main(["--workspace", str(ws), "status", "--reasoning"]) == 0
    assert "# Reasoning handover" in capsys.readouterr().out


@pytest.mark.loadbearing
def test_the_learning_run_says_who_approved_what_it_learned_and_when(
    demo_run: tuple[Path, int, list[str]],
) -> None:
    ws, _code, _out = demo_run
    [run] = (ws / "outbox" / "runs" / "nordvik-school").iterdir()
    report = (run / "report.md").read_text("utf-8")
    verdict = json.loads(next((ws / "inbox" / "verdicts").glob("*.json")).read_text("utf-8"))
    when = verdict["decided_at"][:10]
    assert (
        f"- Learned from: {verdict['id']} (lillevik-school), approved by "
        f"{verdict['reviewer']} on {when}" in report
    )
    # No model ran: the report must not say a proposer's prompt carried the block.
    taught = report.split("## What experts taught this run")[1].split("\n## ")[0]
    assert "No model was asked in this run; had one been" in taught
    assert "The proposer's prompt carried" not in taught


@pytest.mark.loadbearing
def test_the_revised_school_shows_the_decided_candidate_and_asks_for_it_no_more(
    demo_run: tuple[Path, int, list[str]],
) -> None:
    ws, _code, out = demo_run
    verdict = json.loads(next((ws / "inbox" / "verdicts").glob("*.json")).read_text("utf-8"))
    first, revised = _by_age(ws / "outbox" / "runs" / "lillevik-school")
    assert (first / "verdicts" / f"{verdict['id']}.json").is_file()
    assert not (revised / "verdicts" / f"{verdict['id']}.json").exists()
    row = next(
        ln
        for ln in (revised / "report.md").read_text("utf-8").splitlines()
        if ln.startswith(f"| `{verdict['id']}`")
    )
    assert f"approved by {verdict['reviewer']} on {verdict['decided_at'][:10]}" in row
    assert any("lillevik-school again, revised" in line for line in out)


@pytest.mark.loadbearing
def test_the_signed_demo_refuses_the_unsigned_approval_then_promotes_it_signed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ssh_keygen()
    code, out, _err = demo(tmp_path / "ws", capsys, "--signed")
    assert code == 0, out
    ws = tmp_path / "ws"
    [verdict] = (ws / "inbox" / "verdicts").glob("c-*.json")
    assert verdict.with_name(verdict.name + ".sig").is_file()
    assert not verdict.with_name(verdict.name + ".error.txt").exists()  # cleared once signed
    key = Key(ws / ".state" / "demo-signing-key")
    page = (ws / "bundles" / "wiki" / "verdicts" / f"{verdict.stem}.md").read_text("utf-8")
    assert f"fingerprint: {key.fingerprint}" in page
    text = "\n".join(out)
    assert "saved unsigned" in text and "not promoted" in text and key.fingerprint in text
    allowed = (ws / "config" / "allowed_signers").read_text("utf-8")
    assert 'KE namespaces="portfolio-optimiser" ssh-ed25519 ' in allowed
