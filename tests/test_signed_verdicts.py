"""Signed verdicts in the daemon: ``[verdicts] require_signature`` against keys and signatures
``ssh-keygen`` makes in the test, through the processor's own intake."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from portfolio_optimiser.cli import main
from portfolio_optimiser.config import Verdicts, load_config
from portfolio_optimiser.context.frontmatter import read_concept
from portfolio_optimiser.context.signature import NAMESPACE
from portfolio_optimiser.daemon.ledger import Ledger
from portfolio_optimiser.daemon.processor import Processor
from portfolio_optimiser.daemon.workspace import Workspace

from .fresh import fresh_python
from .ssh_keys import Key, make_key
from .test_daemon_processor import Clock, drop_bundle, save_verdict, settle, template

CANDIDATE = "c-d67b7045b6ae3f01"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Key]:
    folder = tmp_path_factory.mktemp("keys")
    return {"ke": make_key(folder, "ke"), "ol": make_key(folder, "ol")}


def _processor(workspace: Workspace, clock: Clock, policy: str) -> Processor:
    config = load_config().model_copy(update={"verdicts": Verdicts(require_signature=policy)})
    return Processor(
        workspace,
        config,
        Ledger.open(workspace.ledger_file),
        clock,
        structlog.get_logger("test"),
        environ={"PORTFOLIO_OPTIMISER_REASONING_MODE": "ci"},
    )


@pytest.fixture
def ran(tmp_path: Path) -> Iterator[tuple[Workspace, Clock, list[Processor]]]:
    """A workspace whose school has run (under the default policy); ``open`` makes processors."""
    workspace = Workspace.at(tmp_path / "ws", environ={})
    workspace.ensure()
    clock = Clock()
    made = [_processor(workspace, clock, "off")]
    drop_bundle(workspace)
    settle(made[0], clock)
    yield workspace, clock, made
    for processor in made:
        processor.close()
        processor.ledger.close()


def _open(ran: tuple[Workspace, Clock, list[Processor]], policy: str) -> Processor:
    workspace, clock, made = ran
    made.append(_processor(workspace, clock, policy))
    return made[-1]


def _allow(workspace: Workspace, *lines: str) -> None:
    folder = workspace.root / "config"
    folder.mkdir(exist_ok=True)
    (folder / "allowed_signers").write_text("".join(f"{line}\n" for line in lines))


def _approve(workspace: Workspace, reviewer: str = "KE", candidate: str = CANDIDATE) -> Path:
    data = template(workspace, candidate) | {
        "decision": "approved",
        "rationale": "Checked against the framework agreement.",
        "reviewer": reviewer,
    }
    return save_verdict(workspace, data)


def _page(workspace: Workspace, candidate: str = CANDIDATE) -> dict[str, Any] | None:
    page = workspace.wiki / "verdicts" / f"{candidate}.md"
    if not page.is_file():
        return None
    return read_concept(page, f"verdicts/{candidate}.md").frontmatter


def _report(path: Path) -> str:
    report = path.with_name(path.name + ".error.txt")
    return report.read_text("utf-8") if report.exists() else ""


def _other_candidate(workspace: Workspace) -> str:
    ids = sorted(p.stem for p in workspace.outbox.glob("runs/*/*/verdicts/c-*.json"))
    return next(i for i in ids if i != CANDIDATE)


@pytest.mark.loadbearing
def test_an_unsigned_approval_waits_with_a_report_and_a_rejection_is_still_taken_in(
    ran: tuple[Workspace, Clock, list[Processor]], keys: dict[str, Key]
) -> None:
    workspace = ran[0]
    processor = _open(ran, "approvals")
    _allow(workspace, f"KE {keys['ke'].public}")
    path = _approve(workspace)
    processor.observe(path)
    assert _page(workspace) is None
    report = _report(path)
    assert "not signed" in report and f"ssh-keygen -Y sign -n {NAMESPACE}" in report
    other = _other_candidate(workspace)
    rejection = template(workspace, other) | {
        "decision": "rejected",
        "rationale": "The ground report rules it out.",
        "reviewer": "KE",
    }
    processor.observe(save_verdict(workspace, rejection))
    [row] = processor.ledger.records.verdict_history(other)
    assert row.decision == "rejected"
    assert processor.ledger.records.verdict_history(CANDIDATE) == []

    sig = keys["ke"].sign(path)
    processor.observe(sig)  # the signature's own hint looks at its verdict again
    front = _page(workspace)
    assert front is not None and front["signed"]["principal"] == "KE"
    assert front["signed"]["fingerprint"] == keys["ke"].fingerprint
    assert _report(path) == ""
    signed = processor.ledger.records.signature(
        processor.ledger.records.verdict_history(CANDIDATE)[-1].digest
    )
    assert signed is not None and signed.fingerprint == keys["ke"].fingerprint
    log = (workspace.wiki / "log.md").read_text("utf-8")
    assert f"signed with {keys['ke'].fingerprint}" in log


def test_a_bad_signature_is_reported_whatever_the_policy(
    ran: tuple[Workspace, Clock, list[Processor]], keys: dict[str, Key]
) -> None:
    workspace = ran[0]
    processor = _open(ran, "off")
    _allow(workspace, f"KE {keys['ke'].public}", f"OL {keys['ol'].public}")
    path = _approve(workspace, reviewer="OL")
    keys["ke"].sign(path)
    processor.observe(path)
    assert _page(workspace) is None
    assert "reviewer is 'OL'" in _report(path)
    keys["ke"].sign(path, namespace="git")
    processor.observe(path)
    assert "namespace 'git'" in _report(path)
    keys["ol"].sign(path)
    path.write_text(path.read_text("utf-8").replace("framework", "frame"), "utf-8")
    processor.observe(path)
    assert "edited after it was signed" in _report(path) and _page(workspace) is None
    keys["ol"].sign(path)
    processor.observe(path)
    front = _page(workspace)
    assert front is not None and front["signed"]["principal"] == "OL"


def test_a_verdict_refused_for_its_key_is_checked_again_when_the_signers_change(
    ran: tuple[Workspace, Clock, list[Processor]], keys: dict[str, Key]
) -> None:
    workspace = ran[0]
    processor = _open(ran, "approvals")
    _allow(workspace, f"OL {keys['ol'].public}")
    path = _approve(workspace)
    keys["ke"].sign(path)
    processor.observe(path)
    assert "does not list" in _report(path)
    processor.scan()
    assert _page(workspace) is None  # the same files: the report stands
    _allow(workspace, f"OL {keys['ol'].public}", f"KE {keys['ke'].public}")
    processor.scan()
    assert _page(workspace) is not None and _report(path) == ""


def test_a_signature_taken_away_after_reading_changes_nothing(
    ran: tuple[Workspace, Clock, list[Processor]], keys: dict[str, Key]
) -> None:
    workspace = ran[0]
    processor = _open(ran, "approvals")
    _allow(workspace, f"KE {keys['ke'].public}")
    path = _approve(workspace)
    sig = keys["ke"].sign(path)
    processor.observe(path)
    assert _page(workspace) is not None
    sig.unlink()
    processor.scan()
    front = _page(workspace)
    assert front is not None and front["status"] == "stable" and "signed" in front
    assert _report(path) == ""
    assert len(processor.ledger.records.verdict_history(CANDIDATE)) == 1


def test_under_all_a_rejection_needs_a_signature_too(
    ran: tuple[Workspace, Clock, list[Processor]], keys: dict[str, Key]
) -> None:
    workspace = ran[0]
    processor = _open(ran, "all")
    _allow(workspace, f"KE {keys['ke'].public}")
    data = template(workspace) | {"decision": "rejected", "rationale": "No.", "reviewer": "KE"}
    path = save_verdict(workspace, data)
    processor.observe(path)
    assert "rejected verdict is not signed" in _report(path)
    assert processor.ledger.records.verdict_history(CANDIDATE) == []


def test_off_takes_an_unsigned_verdict_and_says_when_a_signature_went_unchecked(
    ran: tuple[Workspace, Clock, list[Processor]], keys: dict[str, Key]
) -> None:
    workspace = ran[0]
    processor = _open(ran, "off")
    path = _approve(workspace)
    keys["ke"].sign(path)
    result = processor.intake.verdict(path, quiet=False)
    assert result.state == "ingested"
    assert "not checked" in result.message and "config/allowed_signers" in result.message
    front = _page(workspace)
    assert front is not None and "signed" not in front


def test_explain_the_next_runs_provenance_and_its_report_name_the_signer(
    ran: tuple[Workspace, Clock, list[Processor]],
    keys: dict[str, Key],
    capsys: pytest.CaptureFixture[str],
) -> None:
    workspace, clock, _made = ran
    processor = _open(ran, "approvals")
    _allow(workspace, f"KE {keys['ke'].public}")
    path = _approve(workspace)
    keys["ke"].sign(path)
    processor.observe(path)
    fingerprint = keys["ke"].fingerprint

    capsys.readouterr()
    assert main(["--workspace", str(workspace.root), "explain", CANDIDATE]) == 0
    out = capsys.readouterr().out
    assert f"by KE (signed by KE with {fingerprint})" in out
    assert f"verified by human:KE, signed with {fingerprint}" in out

    changed = drop_bundle(workspace, "lillevik-school-2")
    index = changed / "index.md"
    index.write_text(index.read_text("utf-8") + "\nRevised after the ground survey.\n", "utf-8")
    settle(processor, clock)
    newest = max(
        workspace.outbox.glob("runs/*/*/provenance.json"), key=lambda p: p.stat().st_mtime_ns
    )
    provenance = json.loads(newest.read_text("utf-8"))
    [decided] = [c["verdict"] for c in provenance["candidates"] if c["id"] == CANDIDATE]
    assert decided["reviewer"] == "KE" and decided["signed_with"] == fingerprint
    report = (newest.parent / "report.md").read_text("utf-8")
    assert "(signed, key SHA256:" in report


def test_check_verdict_says_what_the_signature_proves_before_the_file_is_dropped(
    ran: tuple[Workspace, Clock, list[Processor]],
    keys: dict[str, Key],
    capsys: pytest.CaptureFixture[str],
) -> None:
    workspace = ran[0]
    _allow(workspace, f"KE {keys['ke'].public}")
    path = _approve(workspace)
    draft = workspace.root / "draft.json"
    draft.write_bytes(path.read_bytes())
    path.unlink()  # a draft beside the workspace, not in the inbox
    keys["ke"].sign(draft)
    argv = ["--workspace", str(workspace.root), "check-verdict", str(draft)]
    capsys.readouterr()
    assert main(argv) == 0
    assert f"signed by KE with {keys['ke'].fingerprint}" in capsys.readouterr().out
    keys["ol"].sign(draft)
    assert main(argv) == 1
    assert "does not list" in capsys.readouterr().err


REASONS = {
    "another namespace": "namespace 'git'",
    "an expired key": "expired",
    "a revoked key": "revokes",
    "a principal not in the file": "does not list",
    "another file's signature": "another file's",
    "an edit after signing": "edited after it was signed",
}


@pytest.mark.parametrize("case", sorted(REASONS))
def test_each_bad_signature_is_refused_with_a_report_naming_its_reason(
    ran: tuple[Workspace, Clock, list[Processor]], keys: dict[str, Key], case: str
) -> None:
    workspace = ran[0]
    processor = _open(ran, "approvals")
    ke = keys["ke"]
    expiry = 'valid-before="20200101" ' if case == "an expired key" else ""
    _allow(workspace, f"KE {expiry}{ke.public}")
    if case == "a revoked key":
        (workspace.root / "config" / "revoked_keys").write_text(ke.public + "\n")
    path = _approve(workspace, reviewer="XY" if case == "a principal not in the file" else "KE")
    if case == "another namespace":
        ke.sign(path, namespace="git")
    elif case == "a principal not in the file":
        keys["ol"].sign(path)
    elif case == "another file's signature":
        other = workspace.root / "other.json"
        other.write_text('{"id": "c-0000000000000000"}\n')
        ke.sign(other, to=path.with_name(path.name + ".sig"))
    else:
        ke.sign(path)
    if case == "an edit after signing":
        path.write_text(path.read_text("utf-8").replace("Checked", "Re-checked"), "utf-8")
    processor.observe(path)
    assert REASONS[case] in _report(path), _report(path)
    assert _page(workspace) is None
    assert processor.ledger.records.verdict_history(CANDIDATE) == []


def test_doctor_names_a_damaged_allowed_signers_line(
    tmp_path: Path, keys: dict[str, Key], capsys: pytest.CaptureFixture[str]
) -> None:
    workspace = Workspace.at(tmp_path / "ws", environ={})
    workspace.ensure()
    _allow(workspace, f"KE {keys['ke'].public}")
    capsys.readouterr()
    main(["--workspace", str(workspace.root), "doctor"])
    assert "ok   signed verdicts: require_signature = off; 1 signer line(s)" in (
        capsys.readouterr().out
    )
    fido = "sk-ssh-ed25519@openssh.com AAAAGnNrLXNzaC1lZDI1NTE5QG9wZW5zc2guY29t"
    _allow(workspace, f"KE {keys['ke'].public}", f"OL {fido}")
    main(["--workspace", str(workspace.root), "doctor"])
    assert (
        "1 signer line(s) in config/allowed_signers; config/allowed_signers line 2 is skipped"
        in (capsys.readouterr().out)
    )
    _allow(workspace, f"KE {keys['ke'].public}", "OL ssh-ed25519")
    assert main(["--workspace", str(workspace.root), "doctor"]) != 0
    assert "FIX  signed verdicts: config/allowed_signers line 2:" in capsys.readouterr().out


@pytest.mark.loadbearing
def test_the_daemon_loads_the_key_libraries_only_for_a_workspace_with_keys(
    tmp_path: Path, keys: dict[str, Key]
) -> None:
    """``sshsig`` and ``cryptography`` hold 7 MB, which the idle daemon's 120 MB target has no
    room for where nobody signs; they load once a trust file exists. A fresh interpreter, as the
    daemon starts."""
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "import portfolio_optimiser.daemon.service, portfolio_optimiser.daemon.processor\n"
        "import portfolio_optimiser.cli\n"
        "from portfolio_optimiser.daemon.signing import Signing\n"
        "def loaded():\n"
        "    return sorted({m.split('.')[0] for m in sys.modules} & {'sshsig', 'cryptography'})\n"
        "signing = Signing('approvals', Path(sys.argv[1]))\n"
        "print(signing.trust()[0].present, loaded())\n"
        "Path(sys.argv[1], 'allowed_signers').write_text(sys.argv[2])\n"
        "print(signing.trust()[0].present, loaded())\n"
    )
    out = fresh_python(script, str(tmp_path), f"KE {keys['ke'].public}\n")
    assert out.splitlines() == [
        "False []",
        "True ['cryptography', 'sshsig']",
    ]
