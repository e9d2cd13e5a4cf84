"""A bundle job's stored state and the publish stage's idempotence over its own bytes."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from portfolio_optimiser.daemon.job import Job, RunSummary, Stage
from portfolio_optimiser.outputs import OutputExists, folders
from portfolio_optimiser.outputs.folders import move_run_folder


def _folder(path: Path, text: str) -> Path:
    (path / "verdicts").mkdir(parents=True)
    (path / "proposals.json").write_text(text, encoding="utf-8")
    (path / "verdicts" / "c-1.json").write_text("{}", encoding="utf-8")
    return path


def test_a_job_survives_its_round_trip_through_the_ledger_text() -> None:
    job = Job("ab" * 32, "school", "/c/school", "/c/school", "2026-12-02T01:00:00Z", rerun=False)
    ran = job.at(Stage.RAN, RunSummary("school", 12, None, (("c-1", "{}", "a-1", None),)))
    assert Job.from_json(ran.to_json()) == ran
    assert ran.run_id == "20261202-abababab" + "ab"
    assert ran.done(Stage.CLAIMED) and ran.done(Stage.RAN) and not ran.done(Stage.PUBLISHED)


def test_moving_a_staged_run_twice_finds_its_own_bytes(tmp_path: Path) -> None:
    staged = _folder(tmp_path / "staged" / "r1", "same")
    target = tmp_path / "outbox" / "runs" / "p" / "r1"
    assert move_run_folder(staged, target) == target
    assert not staged.exists()
    assert move_run_folder(staged, target) == target  # cut off before its checkpoint: done
    # Staged again with the same bytes (a stage run twice): the copy goes, the target stays.
    _folder(staged, "same")
    assert move_run_folder(staged, target) == target
    assert not staged.exists()
    assert (target / "proposals.json").read_text(encoding="utf-8") == "same"


def test_other_bytes_at_the_target_are_never_replaced(tmp_path: Path) -> None:
    target = _folder(tmp_path / "runs" / "r1", "first")
    staged = _folder(tmp_path / "staged" / "r1", "second")
    with pytest.raises(OutputExists):
        move_run_folder(staged, target)
    assert (target / "proposals.json").read_text(encoding="utf-8") == "first"


def test_a_staging_area_on_another_file_system_is_published_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def cross_device(_src: Path, _dst: Path) -> bool:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(folders, "_rename_noreplace", cross_device)
    staged = _folder(tmp_path / "state" / "r1", "bytes")
    target = tmp_path / "outbox" / "runs" / "p" / "r1"
    with pytest.raises(OSError):  # the fallback publishes with the same rename: still refused
        move_run_folder(staged, target)
    monkeypatch.undo()
    real = folders._rename_noreplace
    calls: list[Path] = []

    def first_cross_device(src: Path, dst: Path) -> bool:
        calls.append(dst)
        if len(calls) == 1:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real(src, dst)

    monkeypatch.setattr(folders, "_rename_noreplace", first_cross_device)
    assert move_run_folder(staged, target) == target
    assert not staged.exists()
    assert (target / "verdicts" / "c-1.json").read_text(encoding="utf-8") == "{}"


def test_a_step_error_that_cannot_be_rebuilt_from_its_record_becomes_a_sentence() -> None:
    from portfolio_optimiser.daemon import durable
    from portfolio_optimiser.pipeline.budget import BudgetExceeded

    assert durable._survives_pickling(OSError(errno.ENOSPC, "No space left on device"))
    unpicklable = BudgetExceeded("the run spent 9 tokens, over its cap of 5", which="run_tokens")
    assert not durable._survives_pickling(unpicklable)
