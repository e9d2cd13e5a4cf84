"""The processor on a real workspace with an injected clock: no watcher, no sleeps (DESIGN §6)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import structlog

from portfolio_optimiser.config import load_config
from portfolio_optimiser.context.frontmatter import read_concept
from portfolio_optimiser.daemon import verdicts
from portfolio_optimiser.daemon.claim import STALE_TEMPORARY_S
from portfolio_optimiser.daemon.ledger import Ledger
from portfolio_optimiser.daemon.processor import RERUNS_QUIET_S, Processor
from portfolio_optimiser.daemon.retry import retry_quarantined
from portfolio_optimiser.daemon.workspace import Workspace
from portfolio_optimiser.pipeline.budget import read_spend
from portfolio_optimiser.reasoning.commit import SystemDisk

from .conftest import EXAMPLES

SCHOOL = EXAMPLES / "portfolio" / "lillevik-school"
START = 1_790_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    return ws


@pytest.fixture
def processor(workspace: Workspace, clock: Clock) -> Iterator[Processor]:
    ledger = Ledger.open(workspace.ledger_file)
    config = load_config().model_copy()
    # CI sets CI=true; the processor reads the mode from this environment, pinned here.
    yield Processor(
        workspace,
        config,
        ledger,
        clock,
        structlog.get_logger("test"),
        environ={"PORTFOLIO_OPTIMISER_REASONING_MODE": "ci"},
    )
    ledger.close()


def drop_bundle(ws: Workspace, name: str = "lillevik-school", source: Path = SCHOOL) -> Path:
    target = ws.inbox_projects / name
    shutil.copytree(source, target)
    return target


def settle(processor: Processor, clock: Clock, seconds: float = 10) -> list[Any]:
    processor.scan()
    clock.advance(seconds)
    return processor.step()


def template(ws: Workspace, candidate: str = "c-d67b7045b6ae3f01") -> dict[str, Any]:
    [path] = ws.outbox.glob(f"runs/*/*/verdicts/{candidate}.json")
    data: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return data


def save_verdict(ws: Workspace, data: dict[str, Any], name: str | None = None) -> Path:
    path = ws.inbox_verdicts / (name or f"{data['id']}.json")
    tmp = path.with_name(".tmp-" + path.name)
    tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    tmp.rename(path)
    return path


@pytest.mark.loadbearing
def test_a_bundle_created_in_place_waits_for_quiet_then_runs_once(
    workspace: Workspace, processor: Processor, clock: Clock
) -> None:
    entry = drop_bundle(workspace)
    processor.scan()
    assert processor.step() == []  # not quiet yet
    clock.advance(processor.config.daemon.stability_seconds + 0.1)
    [result] = processor.step()
    assert result.state == "done"
    assert not entry.exists()
    assert (workspace.bundles_projects / "lillevik-school" / "index.md").is_file()
    [run] = workspace.outbox.glob("runs/lillevik-school/*/proposals.json")
    assert json.loads(run.read_text("utf-8"))["ran_locally"] is True
    spend = read_spend(workspace.spend_file)
    assert [r.project_id for r in spend.runs] == ["lillevik-school"]
    assert processor.step() == []  # processed exactly once


@pytest.mark.loadbearing
def test_a_folder_moved_in_by_rename_is_ready_at_once(
    workspace: Workspace, processor: Processor
) -> None:
    outside = workspace.root / "staging" / "lillevik-school"
    shutil.copytree(SCHOOL, outside)
    entry = workspace.inbox_projects / "lillevik-school"
    outside.rename(entry)
    processor.observe(entry, moved_in=True)
    [result] = processor.step()
    assert result.state == "done"


@pytest.mark.loadbearing
def test_a_redrop_of_identical_content_is_reported_not_rerun_nor_recharged(
    workspace: Workspace, processor: Processor, clock: Clock
) -> None:
    drop_bundle(workspace)
    settle(processor, clock)
    spent = read_spend(workspace.spend_file)
    drop_bundle(workspace, "school-again")
    [result] = settle(processor, clock)
    assert result.state == "duplicate"
    assert (workspace.duplicates / "school-again.duplicate.txt").is_file()
    assert len(list(workspace.outbox.glob("runs/lillevik-school/*"))) == 1
    assert read_spend(workspace.spend_file) == spent


def test_changed_content_runs_again(
    workspace: Workspace, processor: Processor, clock: Clock
) -> None:
    drop_bundle(workspace)
    settle(processor, clock)
    changed = drop_bundle(workspace, "school-v2")
    (changed / "context" / "note.md").write_text(
        "---\ntype: note\n---\nA new note.\n", encoding="utf-8"
    )
    [result] = settle(processor, clock, seconds=86_400)  # a day later: another run id
    assert result.state == "done"
    assert len(list(workspace.outbox.glob("runs/lillevik-school/*"))) == 2


@pytest.mark.loadbearing
def test_a_bad_bundle_is_quarantined_with_a_report_and_retry_puts_it_back(
    workspace: Workspace, processor: Processor, clock: Clock
) -> None:
    entry = drop_bundle(workspace, "broken")
    (entry / "cost" / "07-utendors.md").write_text(
        '---\ntype: cost-line\ncode: "07"\namount_nok: twelve\n---\n', encoding="utf-8"
    )
    for stray in (entry / "cost").glob("07*"):
        if stray.name != "07-utendors.md":
            stray.unlink()
    [result] = settle(processor, clock)
    assert result.state == "failed"
    report = (workspace.failed / "broken.error.txt").read_text("utf-8")
    assert "amount_nok" in report and "not a number" in report and "retry broken" in report
    assert (workspace.failed / "broken" / "index.md").is_file()  # nothing lost
    retry_quarantined(workspace, processor.ledger, "broken", now_iso="2026-11-30T12:00:00Z")
    assert (workspace.inbox_projects / "broken").is_dir()
    assert not (workspace.failed / "broken.error.txt").exists()


@pytest.mark.loadbearing
def test_an_internal_error_in_a_run_costs_the_bundle_never_the_daemon(
    workspace: Workspace, processor: Processor, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: Any) -> Any:
        raise KeyError("a bug somewhere in a run")

    monkeypatch.setattr("portfolio_optimiser.daemon.job.run_pipeline", broken)
    drop_bundle(workspace)
    [result] = settle(processor, clock)
    assert result.state == "failed"
    report = (workspace.failed / "lillevik-school.error.txt").read_text("utf-8")
    assert "an internal error stopped its run (KeyError" in report and "report it" in report
    assert list(processor.desk.claimed_dir.iterdir()) == []
    assert processor.ledger.unfinished_starts(processor.ledger.items()[0].digest) == 0


def test_a_project_the_budget_cannot_fund_waits_unclaimed(
    workspace: Workspace, processor: Processor, clock: Clock
) -> None:
    processor.reload(
        processor.config.model_copy(
            update={
                "budget": processor.config.budget.model_copy(
                    update={"portfolio_tokens": 10, "run_tokens": 100}
                )
            }
        )
    )
    entry = drop_bundle(workspace)
    [result] = settle(processor, clock)
    assert result.state == "waiting"
    assert entry.is_dir()
    assert "waiting for budget" in processor.waiting["lillevik-school"]


@pytest.mark.loadbearing
def test_a_wave_starts_only_the_bundles_the_portfolio_can_fund(
    workspace: Workspace, processor: Processor, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from portfolio_optimiser.daemon import job

    real = job.RunSummary.of

    def spending(result: Any) -> Any:  # each run really spends 100 000 tokens
        return dataclasses.replace(real(result), tokens=100_000)

    monkeypatch.setattr(job.RunSummary, "of", staticmethod(spending))
    processor.reload(
        processor.config.model_copy(
            update={
                "budget": processor.config.budget.model_copy(
                    update={"portfolio_tokens": 250_000, "run_tokens": 100_000}
                )
            }
        )
    )
    for name in ("a-school", "b-school", "c-school"):
        copy = drop_bundle(workspace, name)
        project = copy / "project.md"
        project.write_text(
            project.read_text("utf-8").replace("id: lillevik-school", f"id: {name}"), "utf-8"
        )
    untouched = (workspace.inbox_projects / "c-school").stat().st_ctime_ns
    results = settle(processor, clock)
    assert sorted((r.name, r.state) for r in results) == [
        ("a-school", "done"),
        ("b-school", "done"),
        ("c-school", "waiting"),
    ]
    # Never started, nor even claimed and put back: a claim is a rename, which moves its ctime.
    assert (workspace.inbox_projects / "c-school").stat().st_ctime_ns == untouched
    assert "50000 portfolio tokens left" in processor.waiting["c-school"]
    assert read_spend(workspace.spend_file).spent_tokens == 200_000
    assert processor.ledger.budget.reserved_tokens() == 0, "each hold ended with its charge"


@pytest.mark.loadbearing
def test_an_unfinished_claim_is_finished_at_start_up(
    workspace: Workspace, processor: Processor
) -> None:
    from portfolio_optimiser.daemon.claim import claim

    claimed = claim(drop_bundle(workspace), processor.desk.claimed_dir)
    assert claimed is not None
    [result] = processor.recover()
    assert result.state == "done"
    assert not claimed.exists()


# --- verdicts in place ------------------------------------------------------------------------


@pytest.fixture
def processed(workspace: Workspace, processor: Processor, clock: Clock) -> Processor:
    drop_bundle(workspace)
    settle(processor, clock)
    return processor


@pytest.mark.loadbearing
def test_a_valid_verdict_is_ingested_at_once_and_promoted(
    workspace: Workspace, processed: Processor
) -> None:
    data = template(workspace) | {"decision": "approved", "rationale": "Checked.", "reviewer": "KE"}
    path = save_verdict(workspace, data)
    processed.observe(path)  # no quiet period for bytes that parse and validate
    page = workspace.wiki / "verdicts" / "c-d67b7045b6ae3f01.md"
    assert page.is_file()
    front = read_concept(page, "verdicts/c-d67b7045b6ae3f01.md").frontmatter
    assert front["verified"]["by"] == "human:KE"
    assert path.exists()  # never moved: the expert may still have it open
    assert "verdicts/c-d67b7045b6ae3f01.md" in (workspace.wiki / "index.md").read_text("utf-8")


@pytest.mark.loadbearing
def test_the_reruns_verdicts_call_for_wait_until_the_verdicts_are_quiet(
    workspace: Workspace, processed: Processor, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An expert saving verdicts one after another is answered first: the look at the reruns
    (which shares the interpreter with the verdicts' intake) is taken once, after the last."""
    looks: list[float] = []
    real = processed.desk.reruns

    def reruns(stop: Any) -> list[Any]:
        looks.append(clock())
        return real(stop)

    monkeypatch.setattr(processed.desk, "reruns", reruns)
    data = template(workspace) | {"decision": "approved", "reviewer": "KE"}
    for i in range(3):
        processed.observe(save_verdict(workspace, data | {"rationale": f"Checked, {i}."}))
        assert not processed.has_work()
        assert processed.seconds_until_next() == pytest.approx(RERUNS_QUIET_S)
        processed.step()
        clock.advance(RERUNS_QUIET_S * 0.8)
    assert looks == []  # each verdict came before the last one's quiet was over
    clock.advance(RERUNS_QUIET_S * 0.2)
    assert processed.has_work()
    processed.step()
    assert looks == [clock()]
    assert not processed.has_work()


def test_a_verdicts_wiki_files_and_records_are_flushed_together(
    workspace: Workspace, processed: Processor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The promotion's page, index and log are not each flushed (two fsyncs a file): they are
    staged, flushed with the verdict's reasoning records, then renamed into place."""
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: fsyncs.append(fd) or real_fsync(fd))
    data = template(workspace) | {"decision": "approved", "rationale": "Checked.", "reviewer": "KE"}
    fsyncs.clear()
    verdicts.ingest_verdict(
        save_verdict(workspace, data),
        ledger=processed.intake.ledger,
        store=processed.intake.store,
        admission=processed.intake._admission,
        wiki_root=workspace.wiki,
        now_iso="2026-12-04T00:00:00Z",
        quiet=False,
        signing=processed.intake.signing,
    )
    assert (workspace.wiki / "verdicts" / "c-d67b7045b6ae3f01.md").is_file()
    # Only folders: the wiki's two and the records' task folder (each file alone: six more).
    assert len(fsyncs) <= 3, f"{len(fsyncs)} fsyncs"


@pytest.mark.loadbearing
def test_half_saved_bytes_wait_for_quiet_then_get_a_report_that_goes_when_fixed(
    workspace: Workspace, processed: Processor, clock: Clock
) -> None:
    path = workspace.inbox_verdicts / "c-d67b7045b6ae3f01.json"
    path.write_bytes(b'{"id": "c-d67b7045b6ae3f01", "decision": "appr')  # an editor mid-write
    processed.observe(path)
    report = path.with_name(path.name + ".error.txt")
    assert not report.exists()  # inside the quiet window: not ready, not broken
    clock.advance(processed.config.daemon.verdict_quiet_seconds + 0.1)
    processed.step()
    assert report.is_file() and "line 1" in report.read_text("utf-8")
    data = template(workspace) | {
        "decision": "rejected",
        "rationale": "Deferral only.",
        "reviewer": "KE",
    }
    save_verdict(workspace, data)
    processed.observe(path)
    assert not report.exists()


def test_a_trailing_comma_is_reported_with_line_and_column(
    workspace: Workspace, processed: Processor, clock: Clock
) -> None:
    path = workspace.inbox_verdicts / "v.json"
    path.write_bytes(
        b'\xef\xbb\xbf{\r\n  "id": "c-d67b7045b6ae3f01",\r\n  "decision": "approved",\r\n}\r\n'
    )
    processed.observe(path)
    clock.advance(10)
    processed.step()
    assert "line 3, column 25: trailing comma" in path.with_name("v.json.error.txt").read_text(
        "utf-8"
    )


def test_an_unknown_candidate_id_is_named(workspace: Workspace, processed: Processor) -> None:
    data = template(workspace) | {
        "id": "c-0000000000000000",
        "decision": "approved",
        "rationale": "x",
        "reviewer": "KE",
    }
    path = save_verdict(workspace, data)
    processed.observe(path)
    assert "'c-0000000000000000' names no candidate" in path.with_name(
        path.name + ".error.txt"
    ).read_text("utf-8")


@pytest.mark.loadbearing
def test_an_edit_that_withdraws_an_approval_retracts_the_page(
    workspace: Workspace, processed: Processor
) -> None:
    base = template(workspace)
    processed.observe(
        save_verdict(
            workspace, base | {"decision": "approved", "rationale": "Fine.", "reviewer": "KE"}
        )
    )
    processed.observe(
        save_verdict(
            workspace,
            base | {"decision": "rejected", "rationale": "Not after all.", "reviewer": "KE"},
        )
    )
    page = workspace.wiki / "verdicts" / "c-d67b7045b6ae3f01.md"
    assert read_concept(page, "verdicts/x.md").frontmatter["status"] == "deprecated"
    assert "**Deprecation**" in (workspace.wiki / "log.md").read_text("utf-8")
    history = processed.ledger.records.verdict_history("c-d67b7045b6ae3f01")
    assert [row.decision for row in history] == ["approved", "rejected"]
    from portfolio_optimiser.learning import seed_store_from_bundle

    assert seed_store_from_bundle(workspace.wiki).approved() == []


def test_the_same_verdict_bytes_are_read_once(workspace: Workspace, processed: Processor) -> None:
    path = save_verdict(
        workspace,
        template(workspace) | {"decision": "approved", "rationale": "Fine.", "reviewer": "KE"},
    )
    processed.observe(path)
    log = (workspace.wiki / "log.md").read_text("utf-8")
    processed.observe(path)
    processed.scan()
    assert (workspace.wiki / "log.md").read_text("utf-8") == log


def test_junk_and_editor_temporaries_are_ignored(
    workspace: Workspace, processed: Processor, clock: Clock
) -> None:
    for name in (
        "4913",
        ".c-1.json.swp",
        "c-1.json~",
        ".#c-1.json",
        "#c-1.json#",
        ".goutputstream-AB12",
        "x.json.error.txt",
    ):
        (workspace.inbox_verdicts / name).write_text("{", encoding="utf-8")
    processed.scan()
    clock.advance(60)
    assert processed.step() == []
    assert not list(workspace.inbox_verdicts.glob("*.error.txt.error.txt"))


@pytest.mark.loadbearing
def test_a_verdict_resolves_the_candidates_open_disagreement(
    workspace: Workspace, processed: Processor
) -> None:
    """A checker's rejection leaves a disagreement open; the expert's verdict resolves it."""
    from portfolio_optimiser.daemon.verdicts import ingest_verdict
    from portfolio_optimiser.reasoning.records import (
        AssessmentInput,
        DisagreementInput,
        Evidence,
        EvidenceKind,
        Position,
    )
    from portfolio_optimiser.reasoning.store import open_disagreements

    store, ctx = processed.reasoning_store, _admission(processed)
    task = "manual"
    assessment = store.record(
        task,
        AssessmentInput(
            subject="candidate c-x", evidence=(Evidence(kind=EvidenceKind.FILE, reference="a.md"),)
        ),
        ctx,
    )
    store.record(
        task,
        DisagreementInput(
            assessment=assessment.id,
            positions=(
                Position(source="primary", position="saves"),
                Position(source="primary", position="also"),
            ),
            deciding_question="does it?",
        ),
        ctx,
    )
    processed.ledger.records.add_candidates(
        "r",
        "lillevik-school",
        [
            (
                "c-d67b7045b6ae3f01",
                json.dumps({"project_id": "lillevik-school"}),
                assessment.id,
                None,
            )
        ],
    )
    path = save_verdict(
        workspace,
        template(workspace) | {"decision": "approved", "rationale": "Fine.", "reviewer": "KE"},
    )
    ingest_verdict(
        path,
        ledger=processed.ledger,
        store=store,
        admission=ctx,
        wiki_root=workspace.wiki,
        now_iso="2026-11-30T12:00:00Z",
        quiet=True,
        signing=processed.intake.signing,
    )
    assert open_disagreements(store.load(), assessment.id) == []


def _admission(processor: Processor) -> Any:

    from portfolio_optimiser.reasoning.environment import admission_for

    return admission_for(
        processor.config,
        now=datetime.now(UTC),
        environ={"PORTFOLIO_OPTIMISER_REASONING_MODE": "ci"},
    )


@pytest.mark.loadbearing
def test_a_folder_without_a_root_index_is_quarantined_with_the_reason(
    workspace: Workspace, processor: Processor, clock: Clock
) -> None:
    entry = drop_bundle(workspace, "no-index")
    (entry / "index.md").unlink()
    [result] = settle(processor, clock)
    assert result.state == "failed"
    report = (workspace.failed / "no-index.error.txt").read_text("utf-8")
    assert "index.md is missing at the bundle root" in report
    assert ".state" not in report and "claimed" not in report  # named as the planner knows it


@pytest.mark.loadbearing
def test_a_slow_copy_into_a_folder_is_not_taken_before_it_ends(
    workspace: Workspace, processor: Processor, clock: Clock
) -> None:
    # The watch is on the inbox's top level: one hint when the folder appears, none while files
    # keep arriving inside it. Only a fresh look at the tree sees the copy still going.
    partial = workspace.inbox_projects / "slow"
    partial.mkdir()
    (partial / "index.md").write_text("# Slow\n", encoding="utf-8")
    processor.observe(partial)
    clock.advance(processor.config.daemon.stability_seconds + 1)
    shutil.copytree(SCHOOL, partial, dirs_exist_ok=True)  # the rest of the copy lands late
    assert processor.step() == []
    assert partial.is_dir()
    clock.advance(processor.config.daemon.stability_seconds + 1)
    [result] = processor.step()
    assert result.state == "done"


@pytest.mark.loadbearing
def test_a_secret_in_a_bad_field_never_reaches_the_report(
    workspace: Workspace, processor: Processor, clock: Clock
) -> None:
    secret = "sk-ant-" + "bQ7" * 8  # built at run time: no committed file carries one
    entry = drop_bundle(workspace, "leaky\x1b[31m")
    (entry / "cost" / "07-utendors.md").write_text(
        f'---\ntype: cost-line\ncode: "07"\namount_nok: "{secret}"\n---\n', encoding="utf-8"
    )
    for stray in (entry / "cost").glob("07*"):
        if stray.name != "07-utendors.md":
            stray.unlink()
    [result] = settle(processor, clock)
    assert result.state == "failed"
    [report] = workspace.failed.glob("*.error.txt")
    text = report.read_text("utf-8")
    assert "amount_nok" in text and "[redacted:anthropic-key]" in text
    assert secret not in text and "\x1b" not in text


@pytest.mark.loadbearing
def test_two_files_judging_one_candidate_do_not_take_turns(
    workspace: Workspace, processed: Processor
) -> None:
    base = template(workspace)
    processed.observe(
        save_verdict(
            workspace,
            base | {"decision": "rejected", "rationale": "No.", "reviewer": "KE"},
            "v1.json",
        )
    )
    processed.observe(
        save_verdict(
            workspace,
            base | {"decision": "approved", "rationale": "Yes.", "reviewer": "KE"},
            "v2.json",
        )
    )
    history = processed.ledger.records.verdict_history("c-d67b7045b6ae3f01")
    log = (workspace.wiki / "log.md").read_text("utf-8")
    for _ in range(3):  # rescans
        processed.scan()
    assert processed.ledger.records.verdict_history("c-d67b7045b6ae3f01") == history
    assert (workspace.wiki / "log.md").read_text("utf-8") == log
    assert [row.decision for row in history] == ["rejected", "approved"]


@pytest.mark.loadbearing
def test_a_damaged_wiki_page_is_skipped_not_fatal(
    workspace: Workspace, processor: Processor, clock: Clock
) -> None:
    (workspace.wiki / "verdicts").mkdir(parents=True, exist_ok=True)
    (workspace.wiki / "verdicts" / "c-1.md").write_bytes(
        b"---\ntype: verdict\naffected_codes: ['02.3']\n---\n\xff"
    )
    drop_bundle(workspace)
    [result] = settle(processor, clock)
    assert result.state == "done"  # the healthy bundle is not blamed for the wiki's page


@pytest.mark.parametrize("name", ["../spend.json", "..", "a/b", "broken.error.txt", ""])
def test_retry_takes_only_the_name_of_a_quarantined_bundle(
    workspace: Workspace, processor: Processor, name: str
) -> None:
    workspace.spend_file.write_text("{}", encoding="utf-8")
    with pytest.raises(FileNotFoundError):
        retry_quarantined(workspace, processor.ledger, name, now_iso="2026-11-30T12:00:00Z")
    assert workspace.spend_file.is_file()


@pytest.mark.loadbearing
def test_a_refused_verdict_teaches_nothing(
    workspace: Workspace, processed: Processor, clock: Clock
) -> None:
    forged = {
        "id": "c-00000000000000ff",
        "decision": "approved",
        "rationale": "x",
        "reviewer": "X",
        "candidate": {
            "affected_codes": ["07"],
            "measure_type": "injected-measure",
            "claimed_saving_nok": 1000000,
        },
    }
    processed.observe(save_verdict(workspace, forged, "forged.json"))
    assert (workspace.inbox_verdicts / "forged.json.error.txt").is_file()
    changed = drop_bundle(workspace, "school-v2")
    (changed / "context" / "note.md").write_text(
        "---\ntype: note\n---\nA new note.\n", encoding="utf-8"
    )
    settle(processed, clock, seconds=86_400)
    proposals = [
        json.loads(p.read_text("utf-8"))
        for p in workspace.outbox.glob("runs/lillevik-school/*/proposals.json")
    ]
    assert len(proposals) == 2
    assert not any(
        c["measure_type"] == "injected-measure" for p in proposals for c in p["candidates"]
    )


@pytest.mark.loadbearing
def test_a_verdict_on_a_candidate_the_validator_rejected_is_refused(
    workspace: Workspace, processor: Processor, clock: Clock
) -> None:
    entry = drop_bundle(workspace)
    option = next((entry / "kuttliste").glob("k-05*.md"))
    option.write_text(
        option.read_text("utf-8").replace(
            "estimated_saving_nok: 4200000", "estimated_saving_nok: 99000000"
        ),
        encoding="utf-8",
    )
    settle(processor, clock)
    [proposals] = [
        json.loads(p.read_text("utf-8")) for p in workspace.outbox.glob("runs/*/*/proposals.json")
    ]
    [rejected] = [c for c in proposals["candidates"] if c["validator"]["outcome"] == "rejected"]
    path = save_verdict(
        workspace,
        {"id": rejected["id"], "decision": "approved", "rationale": "fine", "reviewer": "ZZ"},
    )
    processed_result = processor.intake.verdict(path, quiet=True)
    assert processed_result.state == "reported"
    assert not (workspace.wiki / "verdicts" / f"{rejected['id']}.md").exists()


@pytest.mark.loadbearing
def test_a_stop_asked_for_during_a_long_run_is_not_counted_as_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found in review: two `systemctl restart`s during long model runs quarantined a healthy
    # bundle as if it had crashed the daemon twice.
    import threading
    import time

    from .daemon_helpers import service_on

    def slow(*_args: Any) -> Any:  # a run longer than the stop grace
        time.sleep(3)
        raise AssertionError("the daemon stopped before this")

    monkeypatch.setattr("portfolio_optimiser.daemon.job.run_pipeline", slow)
    monkeypatch.setenv("PORTFOLIO_OPTIMISER_REASONING_MODE", "ci")
    ws, service = service_on(tmp_path, tick_s=0.05)
    service.stop_grace_s = 0.3
    drop_bundle(ws)

    def stop_once_claimed() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(ws.claimed.glob("*")):
            time.sleep(0.05)
        time.sleep(0.3)
        service.request_stop()  # what the SIGTERM handler does

    threading.Thread(target=stop_once_claimed, daemon=True).start()
    assert service.run() == 0
    with Ledger.open(ws.ledger_file) as ledger:
        [item] = ledger.items()
        assert item.state == "claimed"  # finished at the next start, as before
        assert ledger.unfinished_starts(item.digest) == 0


def test_explain_shows_the_verdict_when_the_expert_decided_it_and_who(
    workspace: Workspace, processed: Processor, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by a new user: explain placed a verdict at the time the daemon read it, not at the
    # decided_at the expert wrote, and never said who decided.
    from portfolio_optimiser.cli import main

    data = template(workspace) | {
        "decision": "approved",
        "rationale": "Checked.",
        "reviewer": "KE",
        "decided_at": "2026-09-20T08:30:00Z",  # a day before the processor's clock (START)
    }
    processed.observe(save_verdict(workspace, data))
    assert (
        main(["--workspace", str(workspace.root), "explain", "c-d67b7045b6ae3f01", "--json"]) == 0
    )
    out = capsys.readouterr().out
    chain = json.loads(out[out.index("\n{") + 1 :] if not out.startswith("{") else out)
    [verdict] = [s for s in chain["steps"] if s["kind"] == "verdict"]
    assert (
        verdict["recorded_at"] == "2026-09-20T08:30:00.000000Z"
    )  # one time format, as explain shows
    assert "approved by KE, decided 2026-09-20T08:30:00Z" in verdict["summary"]


def break_three_files(bundle: Path) -> list[str]:
    """Three problems in three files of the example school; the files, bundle-relative."""
    changes = {
        "cost/07-utendors.md": ("amount_nok: ", "amount_nok: twelve #"),
        "kuttliste/k-02-simplified-cladding.md": ("measure_type: simplification\n", ""),
        "kuttliste/k-03-reuse-excavated-masses.md": (
            "estimated_saving_nok: ",
            "estimated_saving_nok: lots #",
        ),
    }
    for rel, (old, new) in changes.items():
        path = bundle / rel
        text = path.read_text("utf-8")
        assert old in text, rel
        path.write_text(text.replace(old, new, 1), "utf-8")
    return sorted(changes)


@pytest.mark.loadbearing
def test_three_problems_in_three_files_are_all_named_by_check_bundle_and_the_quarantine(
    workspace: Workspace, processor: Processor, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    from portfolio_optimiser.cli import main

    checked = workspace.root.parent / "checked"
    shutil.copytree(SCHOOL, checked)
    files = break_three_files(checked)
    assert main(["check-bundle", str(checked)]) == 1
    out, err = capsys.readouterr()
    assert "3 problems in checked" in err
    assert all(f in out for f in files), out

    files = break_three_files(drop_bundle(workspace, "broken"))
    [result] = settle(processor, clock)
    assert result.state == "failed"
    report = (workspace.failed / "broken.error.txt").read_text("utf-8")
    assert "3 problems in broken" in report
    assert all(f in report for f in files), report


def zip_of(folder: Path, target: Path) -> Path:
    import zipfile

    with zipfile.ZipFile(target, "w") as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(folder).as_posix())
    return target


@pytest.mark.loadbearing
def test_an_archive_runs_once_and_the_same_archive_again_is_a_duplicate(
    workspace: Workspace, processor: Processor, clock: Clock, tmp_path: Path
) -> None:
    # Found in review: the archive's own hash was its identity, so its unpacked folder looked
    # new to the portfolio (a second, charged run) and a re-drop replaced the project with a zip.
    archive = zip_of(SCHOOL, tmp_path / "school.zip")
    shutil.copy(archive, workspace.inbox_projects / "school.zip")
    assert [r.state for r in settle(processor, clock)] == ["done"]
    shutil.copy(archive, workspace.inbox_projects / "again.zip")
    assert [r.state for r in settle(processor, clock)] == ["duplicate"]
    assert len(read_spend(workspace.spend_file).runs) == 1
    assert (workspace.bundles_projects / "lillevik-school" / "index.md").is_file()
    assert not [p for p in processor.desk.claimed_dir.iterdir()]


@pytest.mark.loadbearing
def test_a_claim_keeps_the_identity_it_was_given(
    workspace: Workspace, processor: Processor, clock: Clock
) -> None:
    # Found in review: recomputed at recovery, a moved portfolio turned one claim into two runs.
    from portfolio_optimiser.daemon.claim import claim

    claimed = claim(drop_bundle(workspace), processor.desk.claimed_dir)
    assert claimed is not None
    processor.ledger.jobs.remember_claim(claimed.name, "f" * 64)
    [result] = processor.recover()
    assert result.state == "done"
    assert processor.ledger.get("f" * 64) is not None
    assert processor.ledger.get("f" * 64).state == "done"  # type: ignore[union-attr]


def test_a_finished_claim_leaves_no_remembered_identity(
    workspace: Workspace, processor: Processor, clock: Clock
) -> None:
    drop_bundle(workspace)
    assert [r.state for r in settle(processor, clock)] == ["done"]
    rows = processor.ledger._db.one("SELECT COUNT(*) FROM claims")
    assert tuple(rows) == (0,)


def test_a_job_left_without_its_input_does_not_make_the_next_drop_a_duplicate(
    workspace: Workspace, processor: Processor, clock: Clock
) -> None:
    """A kill while a bundle was being set aside can leave its job row behind; the same content
    dropped again is run, never reported as "already run"."""
    from portfolio_optimiser.daemon.claim import content_digest
    from portfolio_optimiser.daemon.job import Job

    entry = drop_bundle(workspace)
    identity, _snapshot = processor.portfolio.identity(entry, content_digest(entry))
    orphan = Job(
        identity,
        "old",
        str(workspace.state / "claimed" / "gone"),
        "x",
        "2026-12-01T00:00:00Z",
        rerun=False,
    )
    processor.ledger.jobs.save(
        identity, orphan.stage.value, orphan.to_json(), now="2026-12-01T00:00:00Z"
    )
    [result] = settle(processor, clock)
    assert result.state == "done", result


def test_a_retry_whose_claim_is_gone_is_not_waited_for(
    workspace: Workspace, processor: Processor
) -> None:
    processor.ledger.begin("d" * 64, kind="bundle", name="gone", now="2026-12-01T00:00:00Z")
    past = datetime.fromtimestamp(processor.clock() - 60, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    processor.ledger.schedule_retry("d" * 64, now=past, at=past)  # due a minute ago
    processor.ledger.mark(
        "d" * 64, "retry", now="2026-12-01T00:00:00Z", output=str(workspace.state / "nowhere")
    )
    processor.floor.retry_due_at = None
    processor.desk.reruns_due = False  # nothing else to do
    assert processor.seconds_until_next() != 0.0, "an idle daemon would wake every tick for it"


@pytest.mark.loadbearing
@pytest.mark.parametrize(("moved", "outputs_gone"), [(False, False), (True, False), (False, True)])
def test_a_bundle_set_aside_after_its_run_goes_on_from_its_stage_when_put_back(
    workspace: Workspace,
    processor: Processor,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
    moved: bool,
    outputs_gone: bool,
) -> None:
    """Its run stands: `retry` takes the job up where it stopped, never running or charging it
    twice, and never meeting its own published bytes as someone else's."""
    from portfolio_optimiser.cli.daemon_view import daemon_view
    from portfolio_optimiser.daemon import job
    from portfolio_optimiser.daemon.retry import retry_quarantined

    runs: list[str] = []
    real_run = job.run_pipeline

    def counted(inputs: Any, bundle: Path, run_id: str) -> Any:
        runs.append(run_id)
        return real_run(inputs, bundle, run_id)

    monkeypatch.setattr(job, "run_pipeline", counted)
    real_charged = job.STAGES[job.Stage.CHARGED]

    def broken(j: Any, ctx: Any) -> Any:
        raise KeyError("a bug in the charge")

    monkeypatch.setitem(job.STAGES, job.Stage.CHARGED, broken)
    drop_bundle(workspace)
    [first] = settle(processor, clock)
    assert first.state == "failed", first
    shown = daemon_view(workspace.root, processor.config)
    assert shown["jobs_in_flight"] == [], "set aside, waiting for `retry`: not in flight"
    assert processor.ledger.budget.reserved_tokens() == processor.config.budget.run_tokens, (
        "what it was billed is held until it is charged"
    )
    monkeypatch.setitem(job.STAGES, job.Stage.CHARGED, real_charged)
    if moved:  # the portfolio moved meanwhile: a fresh look gives the input another identity
        real_identity = processor.portfolio.identity
        monkeypatch.setattr(
            processor.portfolio, "identity", lambda b, c: "f" * 64 if c else real_identity(b, c)
        )
    if outputs_gone:
        shutil.rmtree(workspace.outbox / "runs")

    retry_quarantined(
        workspace, processor.ledger, "lillevik-school", now_iso="2026-12-02T00:00:00Z"
    )
    [second] = settle(processor, clock)
    assert second.state == "done", second
    assert processor.ledger.budget.reserved_tokens() == 0
    if outputs_gone:  # nothing of the first run stands: it runs afresh, once more
        assert len(runs) == 2
        return
    assert len(runs) == 1, "the pipeline ran once"
    runs_folder = workspace.outbox / "runs" / "lillevik-school"
    assert len([p for p in runs_folder.iterdir() if not p.name.startswith(".")]) == 1
    assert len(read_spend(workspace.spend_file).runs) == 1


def test_a_hold_whose_job_never_began_is_given_back_at_the_next_start(
    workspace: Workspace, processor: Processor
) -> None:
    """A kill between taking a run's hold and recording its job leaves a hold no one owns."""
    processor.ledger.budget.reserve("e" * 64, 100, cap=10**9, spent=0, now="2026-12-02T00:00:00Z")
    processor.recover()
    assert processor.ledger.budget.reserved_tokens() == 0


def test_a_rerun_put_off_is_given_up_with_its_hold_once_the_portfolio_moves_past_it(
    workspace: Workspace, processor: Processor
) -> None:
    from portfolio_optimiser.daemon.job import Job
    from portfolio_optimiser.daemon.reruns import supersede

    folder = workspace.bundles_projects / "lillevik-school"
    put_off = Job(
        "a" * 64, folder.name, str(folder), str(folder), "2026-12-02T00:00:00Z", rerun=True
    )
    processor.ledger.jobs.save(
        put_off.identity, "claimed", put_off.to_json(), now="2026-12-02T00:00:00Z"
    )
    processor.ledger.budget.reserve(
        put_off.identity, 100, cap=10**9, spent=0, now="2026-12-02T00:00:00Z"
    )
    supersede(processor.ledger, folder, "b" * 64)
    assert processor.ledger.jobs.get(put_off.identity) is None
    assert processor.ledger.budget.reserved_tokens() == 0


@pytest.mark.loadbearing
def test_a_killed_writers_temporary_files_are_swept_at_the_next_start_and_nothing_else(
    workspace: Workspace, processor: Processor
) -> None:
    """A process killed between writing a file beside its name and renaming it leaves a hidden
    temporary; the next start removes those an hour old, and nothing a writer still holds, nothing
    young, nothing of another name, nothing in a planner's own folders."""
    hour_and_more = time.time() - STALE_TEMPORARY_S - 60
    left = [
        workspace.wiki / "verdicts" / ".c-0123456789abcdef.md.abcd1234.tmp",
        workspace.outbox / ".portfolio.md.zz_9y8x7.tmp",
        workspace.state / ".status.json.q1w2e3r4.tmp",
        workspace.state / "reasoning" / "run-1" / ".0001-as-0123456789.json.k2j3h4g5.tmp",
    ]
    young = workspace.outbox / ".spend.json.young123.tmp"
    kept = [
        workspace.inbox_projects / "school" / ".cost.md.abcd1234.tmp",  # a planner's file
        workspace.outbox / ".notes.tmp",  # not a name this product writes
        workspace.wiki / "verdicts" / "c-0123456789abcdef.md",
    ]
    staged_as = workspace.state / "reasoning" / "run-2" / "0001-as-9876543210.json"
    store = processor.reasoning_store
    flushing, go_on = threading.Event(), threading.Event()

    class HeldAtTheFlush(SystemDisk):
        def flush(self, folder: Path, files: list[Path]) -> None:
            flushing.set()
            assert go_on.wait(30), "never let go"
            super().flush(folder, files)

    store._staging.disk = HeldAtTheFlush()
    store._staging.stage(staged_as, b"{}\n")
    committing = threading.Thread(target=store.commit)  # its temporary file written, not linked
    committing.start()
    try:
        assert flushing.wait(30)
        [staged] = store._staging.temporaries()
        for path in [*left, young, *kept]:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x", encoding="utf-8")
        for path in [*left, *kept, staged]:
            os.utime(path, (hour_and_more, hour_and_more))

        processor.recover()

        assert [path for path in left if path.exists()] == []
        assert young.exists() and staged.exists(), "a commit's own temporary file is left to it"
        assert all(path.exists() for path in kept)
    finally:
        go_on.set()
        committing.join(30)
    assert staged_as.read_bytes() == b"{}\n"
