"""The run-output writer (DESIGN §3 "Outputs (RAW layer)", §7): contract, redaction, publication."""

from __future__ import annotations

import asyncio
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from portfolio_optimiser import outputs
from portfolio_optimiser._atomic import fsync_dir
from portfolio_optimiser.context.decisions import Accepted, Receipt, Rejected, Rule, RuleCheck
from portfolio_optimiser.context.models import Candidate
from portfolio_optimiser.context.verdict import VerdictError, parse_verdict
from portfolio_optimiser.learning import VerdictStore
from portfolio_optimiser.pipeline.checker import CheckerOutcome
from portfolio_optimiser.pipeline.outcome import CandidateRun, RunResult
from portfolio_optimiser.pipeline.run import run_project
from portfolio_optimiser.reasoning.modes import Mode
from portfolio_optimiser.resources import commons_dir, load_schema

from .conftest import EXAMPLES
from .fresh import fresh_python
from .pipeline_helpers import CHECKER, PROPOSER, budget, factory, session, settings

STAMP = "2026-11-30T12:00:00Z"
ESC = "\x1b[31mred\x1b[0m\x1b]0;owned\x07"
SCHEMAS = commons_dir() / "schemas"
SVG = "savings-by-code.svg"
# Built at run time, so no committed file carries a secret's shape.
KEY = "sk-ant-" + "bQ7" * 8
PRIVATE_KEY = "-----BEGIN " + "PRIVATE KEY-----\n" + "A" * 48 + "\n"


def receipt(cid: str) -> Receipt:
    check = RuleCheck(rule=Rule.CODES_EXIST, outcome="passed", detail="02.3 exists")
    return Receipt(candidate_id=cid, project_id="depot", checks=(check,))


def cand(saving: int | float = 144000, codes: tuple[str, ...] = ("02.3",), **kw: Any) -> Candidate:
    kw = {"measure_type": "standardisation", "title": "Standard panels", "rationale": "why"} | kw
    kw |= {"evidence": kw.get("evidence", ("cost/02.3.md",))}
    return Candidate(project_id="depot", affected_codes=codes, claimed_saving_nok=saving, **kw)


def accepted(c: Candidate, checker: CheckerOutcome | None = None) -> CandidateRun:
    ok = Accepted(candidate_id=c.id, receipt=receipt(c.id))
    checker = checker or CheckerOutcome(outcome="approved", advisors=("k1",))
    return CandidateRun(candidate=c, validator=ok, checker=checker, attempt=1, materiality="high")


def rejected(c: Candidate) -> CandidateRun:
    why, rule = "the saving exceeds what 02.3 costs", Rule.SAVING_WITHIN_COST
    no = Rejected(candidate_id=c.id, rule=rule, reason=why, receipt=receipt(c.id))
    not_run = CheckerOutcome(outcome="not_run")
    return CandidateRun(candidate=c, validator=no, checker=not_run, attempt=3, materiality="low")


def result(*runs: CandidateRun, **kw: Any) -> RunResult:
    kw = {"models": ("m-propose", "m-check"), "ran_locally": False} | kw
    prompts = ("Propose savings for the depot.",)
    return RunResult(**kw, project_id="depot", run_id="r1", task="t", proposer="p1",
                     candidates=runs, stop_reason="proposer_done", hypothesis_prompts=prompts,
                     attempts=2, tokens={"output_tokens": 40, "input_tokens": 900})  # fmt: skip


def mixed() -> RunResult:
    """Validator-accepted and checker-approved; accepted but checker-blocked; validator-rejected."""
    reuse = cand(90000, ("01",), measure_type="reuse", title="Reuse site masses")
    blocked = CheckerOutcome(outcome="rejected", reason="counts 01 twice", advisors=("k1",))
    walls = cand(9_000_000, measure_type="removal", title="Drop the walls")
    return result(accepted(cand(144000)), accepted(reuse, blocked), rejected(walls))


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """A real local run of the example school, as the daemon gets it in mode ci."""
    reasoning = session(tmp_path_factory.mktemp("local"), PROPOSER, CHECKER, mode=Mode.CI)
    bundle = EXAMPLES / "portfolio" / "lillevik-school"
    run = run_project(bundle, verdicts=VerdictStore(), budget=budget(), settings=settings(),
                      reasoning=reasoning, run_id="r1", client_factory=factory({}))  # fmt: skip
    return asyncio.run(run)


def write(res: RunResult, ws: Path, *, stamp: str = STAMP) -> Path:
    (ws / "outbox").mkdir(parents=True, exist_ok=True)
    ref = outputs.schema_ref_for(ws / "outbox" / "runs" / res.project_id / res.run_id, ws)
    return outputs.write_run_outputs(
        res, outbox=ws / "outbox", run_id=res.run_id, stamp=stamp, schema_ref=ref
    )


def build(res: RunResult, outbox: Path, *, run_id: str = "r1", stamp: str = STAMP) -> Any:
    return outputs.build_run_files(res, outbox=outbox, run_id=run_id, stamp=stamp, schema_ref="")


def read_json(path: Path) -> Any:
    return json.loads(path.read_text("utf-8"))


def leftovers(ws: Path) -> list[Path]:
    return sorted((ws / "outbox").rglob(".tmp-*"))


def tree(folder: Path) -> dict[str, bytes]:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in files}


def spy(log: list[Any], real: Any, key: Any = lambda x: x) -> Any:
    def call(arg: Any) -> Any:
        log.append(key(arg))
        return real(arg)

    return call


@pytest.mark.loadbearing
@pytest.mark.parametrize("which", ["local", "mixed"])
def test_proposals_match_the_schema(which: str, local_run: RunResult, tmp_path: Path) -> None:
    res = local_run if which == "local" else mixed()
    folder = write(res, tmp_path / "ws")
    doc = read_json(folder / "proposals.json")
    jsonschema.Draft202012Validator(load_schema("proposals.schema.json")).validate(doc)
    assert [c["id"] for c in doc["candidates"]] == [r.candidate.id for r in res.candidates]
    assert (folder / doc["$schema"]).resolve() == (SCHEMAS / "proposals.schema.json").resolve()
    assert doc["ran_locally"] is res.ran_locally
    keys = {"materiality", "attempt", "assessment", "conclusion", "disagreement", "checker"}
    assert all(keys <= c.keys() for c in doc["candidates"])


@pytest.mark.loadbearing
def test_provenance_mirrors_only_the_validator(tmp_path: Path) -> None:
    res = mixed()
    prov = read_json(write(res, tmp_path / "ws") / "provenance.json")
    by_id = {c["id"]: c for c in prov["candidates"]}
    ok, blocked, bad = (r.candidate.id for r in res.candidates)
    assert by_id[blocked]["validator_decision"] == dict(outcome="accepted", rule=None, reason=None)
    checker = by_id[blocked]["checker_outcome"]
    assert (checker["outcome"], checker["reason"]) == ("rejected", "counts 01 twice")
    assert by_id[ok]["validator_decision"]["outcome"] == "accepted"
    reason = "the saving exceeds what 02.3 costs"
    assert by_id[bad]["validator_decision"] == dict(
        outcome="rejected", rule="saving_within_cost", reason=reason
    )
    # The prompt is kept as a digest and a length, never as text.
    [prompt] = prov["hypothesis_prompts"]
    assert prompt["chars"] == len("Propose savings for the depot.") and len(prompt["sha256"]) == 64
    assert "Propose savings" not in json.dumps(prov)
    assert prov["budget_stop"] is None and prov["stamp"] == STAMP
    assert prov["models"] == ["m-propose", "m-check"]


@pytest.mark.loadbearing
def test_a_contract_breach_is_never_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = outputs.writer._candidate_doc
    broken = lambda run, frame: {  # noqa: E731
        k: v for k, v in real(run, frame).items() if k != "checker"
    }
    monkeypatch.setattr(outputs.writer, "_candidate_doc", broken)
    with pytest.raises(RuntimeError, match=r"proposals\.json does not match .* bug"):
        write(mixed(), tmp_path / "ws")
    assert not (tmp_path / "ws" / "outbox" / "runs" / "depot" / "r1").exists()
    assert leftovers(tmp_path / "ws") == []


@pytest.mark.loadbearing
def test_local_report_has_table_chart_no_model(local_run: RunResult, tmp_path: Path) -> None:
    folder = write(local_run, tmp_path / "ws")
    report = (folder / "report.md").read_text("utf-8")
    assert report.startswith("# Savings report: lillevik-school, run r1\n")
    assert "no model took part" in report and "## What to do next" in report
    assert "| id | title | from | codes | claimed saving (NOK) | validator | checker |" in report
    for run in local_run.candidates:
        assert f"| `{run.candidate.id}` |" in report
    assert "| 2 350 000 |" in report  # the wood cladding, grouped with spaces
    assert "**13 175 500 NOK**" in report  # every kuttliste item, uncapped, is validated
    bars = [line for line in report.splitlines() if "█" in line]
    assert [b.split()[0] for b in bars] == ["02.1", "02.3", "03", "07", "09"]
    largest = next(b for b in bars if b.startswith("07"))
    assert largest.count("█") == 30  # the largest saving fills the bar; the rest scale to it
    assert bars[0].count("█") == round(1_377_500 / 4_200_000 * 30)
    assert f"]({SVG})" in report and "href" not in (folder / SVG).read_text("utf-8")
    svg = ET.parse(folder / SVG).getroot()
    labels = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert "4 200 000 NOK" in labels and "02.1" in labels  # a well-formed SVG with text labels
    assert "inbox/verdicts/" in report


def test_model_report_sums_what_both_falsifiers_pass(tmp_path: Path) -> None:
    res = mixed().model_copy(update={"budget_stop": "run_tokens"})
    report = (write(res, tmp_path / "ws") / "report.md").read_text("utf-8")
    assert "no model took part" not in report
    assert "m-propose, m-check" in report
    assert "**144 000 NOK**" in report  # the checker-blocked 90 000 is shown, never summed
    assert "blocked: counts 01 twice" in report
    assert "rejected (`saving_within_cost`): the saving exceeds what 02.3 costs" in report
    assert "budget cap ended the run early (run\\_tokens)" in report
    blocked_id, bad_id = res.candidates[1].candidate.id, res.candidates[2].candidate.id
    assert f"The validator rejected `{bad_id}`" in report and "no verdict template" in report
    assert f"The checker blocked `{blocked_id}`" in report
    assert (outputs.format_nok(1234567), outputs.format_nok(0)) == ("1 234 567", "0")
    assert (outputs.format_nok(144000.0), outputs.format_nok(1234.5)) == ("144 000", "1 234,50")


def test_untrusted_text_cannot_break_the_table_or_inject_html(tmp_path: Path) -> None:
    res = result(accepted(cand(title="a | b <script>x</script>\n| evil |")))
    report = (write(res, tmp_path / "ws") / "report.md").read_text("utf-8")
    row = next(line for line in report.splitlines() if line.startswith("| `c-"))
    assert "<script>" not in report
    assert row.replace("\\|", "").count("|") == 9  # eight cells, the title's pipes escaped


@pytest.mark.loadbearing
def test_templates_only_for_validator_accepted(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    res = mixed()
    folder = write(res, ws)
    ok, blocked, bad = (r.candidate.id for r in res.candidates)
    names = sorted(p.name for p in (folder / "verdicts").iterdir())
    assert names == sorted([f"{ok}.json", f"{blocked}.json"])  # checker-blocked still reviewed
    assert f"{bad}.json" not in names
    with pytest.raises(ValueError, match="no verdict template"):
        outputs.template_for(res.candidates[2], schema_ref="")
    schema = load_schema("verdict.schema.json")
    for name in names:
        data = (folder / "verdicts" / name).read_bytes()
        assert data.endswith(b"}\n") and b'\n  "id": ' in data  # indent 2, trailing newline
        template = json.loads(data)
        assert set(template) == set(schema["properties"])  # every field of the schema
        assert template["id"] == name.removesuffix(".json")
        assert template["decision"] == "" and template["reviewer"] == ""
        assert template["candidate"]["validator"] == "accepted"
        # The expert moves the file into inbox/verdicts/: $schema must resolve from there.
        inbox = ws / "inbox" / "verdicts"
        schema_file = (inbox / template["$schema"]).resolve()
        assert schema_file == (SCHEMAS / "verdict.schema.json").resolve()
        with pytest.raises(VerdictError, match="decision is empty"):
            parse_verdict(data, name)
        template |= {"decision": "approved", "rationale": "sound", "reviewer": "KL"}
        verdict = parse_verdict(json.dumps(template).encode("utf-8"), name)
        assert verdict.id == template["id"] and verdict.approves
    summary = read_json(folder / "verdicts" / f"{blocked}.json")["candidate"]
    assert summary["claimed_saving_nok"] == 90000
    assert (summary["checker"], summary["checker_reason"]) == ("rejected", "counts 01 twice")


def test_schema_refs_prefer_the_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "shared" / "schemas").mkdir(parents=True)
    for name in ("proposals.schema.json", "verdict.schema.json"):
        (ws / "shared" / "schemas" / name).write_bytes((SCHEMAS / name).read_bytes())
    run_folder = ws / "outbox" / "runs" / "depot" / "r1"
    assert outputs.schema_ref_for(run_folder, ws) == "../../../../shared/schemas"
    folder = write(result(accepted(cand())), ws)
    ref = read_json(folder / "proposals.json")["$schema"]
    assert ref == "../../../../shared/schemas/proposals.schema.json"
    [template] = (folder / "verdicts").iterdir()
    assert read_json(template)["$schema"] == "../../shared/schemas/verdict.schema.json"


@pytest.mark.loadbearing
def test_no_secret_and_no_control_sequence_reaches_any_output(tmp_path: Path) -> None:
    dirty = cand(title=f"Panels {KEY} {ESC}", rationale=f"api_key={KEY}", evidence=(f"{KEY}.md",))
    checker = CheckerOutcome(outcome="approved", reason=f"fine {ESC}{KEY}")
    walls = cand(9_000_000, codes=(f"02.3{ESC}",), measure_type="removal", title=f"Walls {ESC}")
    res = result(accepted(dirty, checker), accepted(walls), notes=(f"n {KEY}",), models=(ESC,))
    folder = write(res, tmp_path / "ws")
    files = tree(folder)
    assert {"proposals.json", "provenance.json", "report.md", SVG} <= files.keys()
    for name, data in files.items():
        assert KEY.encode() not in data, name
        assert b"\x1b" not in data and b"\x07" not in data and b"\\u001b" not in data, name
        assert "\x9b" not in data.decode("utf-8"), name
    report = (folder / "report.md").read_text("utf-8")
    assert "Panels \\[redacted:anthropic-key\\]" in report
    assert "anthropic-key" in report and "control-sequence" in report
    prov = read_json(folder / "provenance.json")
    assert {"anthropic-key", "control-sequence"} <= set(prov["redaction"]["kinds"])


@pytest.mark.loadbearing
def test_refused_text_is_withheld_and_reported(tmp_path: Path) -> None:
    res = result(accepted(cand(title="Panels " + PRIVATE_KEY)))
    folder = write(res, tmp_path / "ws")
    for name, data in tree(folder).items():
        assert b"A" * 48 not in data, name
    report = (folder / "report.md").read_text("utf-8")
    assert f"Text of candidate {res.candidates[0].candidate.id} was withheld" in report
    assert "private key" in report
    doc = read_json(folder / "proposals.json")
    assert doc["candidates"][0]["title"].startswith("[withheld")


@pytest.mark.loadbearing
def test_an_existing_different_folder_is_never_replaced(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    target = ws / "outbox" / "runs" / "depot" / "r1"
    target.mkdir(parents=True)
    (target / "proposals.json").write_text("old", "utf-8")
    with pytest.raises(outputs.OutputExists) as caught:
        write(mixed(), ws)
    assert caught.value.folder == target and str(target) in str(caught.value)
    assert sorted(p.name for p in target.iterdir()) == ["proposals.json"]
    assert (target / "proposals.json").read_text("utf-8") == "old"
    assert leftovers(ws) == []


@pytest.mark.loadbearing
def test_a_rerun_is_accepted_only_if_identical(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    first = write(mixed(), ws)
    before = tree(first)
    assert write(mixed(), ws) == first  # same run id, same bytes: already done
    with pytest.raises(outputs.OutputExists):
        write(mixed(), ws, stamp="2026-12-01T08:00:00Z")
    assert tree(first) == before
    assert leftovers(ws) == []


@pytest.mark.loadbearing
def test_built_hidden_a_failure_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "ws"
    target = ws / "outbox" / "runs" / "depot" / "r1"
    real_write, seen = outputs.folders._write_file, []

    def failing_write(path: Path, data: bytes) -> None:
        assert not target.exists(), "the run folder appeared before it was complete"
        assert any(part.startswith(".tmp-r1-") for part in path.parts), path
        seen.append(path)
        if len(seen) == 3:
            raise OSError(28, "No space left on device")
        real_write(path, data)

    monkeypatch.setattr(outputs.folders, "_write_file", failing_write)
    with pytest.raises(OSError, match="No space"):
        write(mixed(), ws)
    assert not target.exists() and leftovers(ws) == []

    def failing_rename(src: Path, dst: Path) -> bool:
        raise OSError(5, "I/O error")

    monkeypatch.setattr(outputs.folders, "_write_file", real_write)
    monkeypatch.setattr(outputs.folders, "_rename_noreplace", failing_rename)
    with pytest.raises(OSError, match="I/O error"):
        write(mixed(), ws)
    assert not target.exists() and leftovers(ws) == []
    monkeypatch.undo()
    assert write(mixed(), ws) == target and leftovers(ws) == []


def test_every_file_and_folder_is_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dirs: list[str] = []
    files: list[int] = []
    real_dir, real_fsync = fsync_dir, os.fsync
    monkeypatch.setattr(outputs.folders, "fsync_dir", spy(dirs, real_dir, lambda d: d.name))
    monkeypatch.setattr(os, "fsync", spy(files, real_fsync))
    folder = write(mixed(), tmp_path / "ws")
    assert len(files) >= len(tree(folder)) + 2
    assert "verdicts" in dirs and "depot" in dirs  # the inner folder and the parent
    assert any(n.startswith(".tmp-r1-") for n in dirs)  # the built folder, before the rename


def test_unsafe_or_mismatched_run_ids_are_refused(tmp_path: Path) -> None:
    res = mixed()
    for bad in ("../escape", ".hidden", "a/b", ""):
        with pytest.raises(ValueError, match="cannot name a folder"):
            build(res.model_copy(update={"run_id": bad}), tmp_path, run_id=bad)
    with pytest.raises(ValueError, match="differs"):
        build(res, tmp_path, run_id="r2")


@pytest.mark.loadbearing
def test_the_same_input_and_stamp_give_the_same_bytes(local_run: RunResult, tmp_path: Path) -> None:
    for res in (local_run, mixed()):
        a = write(res, tmp_path / "a" / "ws")
        b = write(res, tmp_path / "b" / "ws")
        assert tree(a) == tree(b)
    no_schema = build(mixed(), tmp_path)
    assert "$schema" not in json.loads(no_schema["proposals.json"])
    assert no_schema == build(mixed(), tmp_path) != build(mixed(), tmp_path, stamp="other")


@pytest.mark.loadbearing
def test_importing_the_outputs_loads_no_model_framework() -> None:
    script = (
        "import sys\nimport portfolio_optimiser.outputs\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('agent_framework', 'mcp')))\n"
    )
    assert fresh_python(script).strip() == "[]"


def test_figures_beside_nok_or_arithmetic_are_norwegian_and_codes_and_years_are_not() -> None:
    from portfolio_optimiser.outputs.worksheet import norwegian_figures

    said = norwegian_figures(
        "cost line 02.3 says 29610000 NOK but 3150 × 9400.5 = 29611575 NOK; decide by 2027"
    )
    assert said == (
        "cost line 02.3 says 29 610 000 NOK but 3 150 × 9 400,50 = 29 611 575 NOK; decide by 2027"
    )
