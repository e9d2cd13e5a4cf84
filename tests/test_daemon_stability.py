"""Stability: an entry is ready when its whole tree has been quiet, or when it arrived by rename.

No sleeps: ``now`` is a number the test steps, and mtimes are set with ``os.utime`` so that a
change is visible even when the file system's clock would not have ticked.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from portfolio_optimiser.daemon.stability import StabilityTracker, TreeSnapshot, snapshot

QUIET_S = 5.0


def write(path: Path, data: bytes, *, mtime_ns: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, ns=(mtime_ns, mtime_ns))


def snap(path: Path) -> TreeSnapshot:
    taken = snapshot(path)
    assert taken is not None
    return taken


def test_a_snapshot_of_a_file_is_its_size_and_mtime(tmp_path: Path) -> None:
    path = tmp_path / "v.json"
    write(path, b"{}", mtime_ns=1_000)
    assert snap(path).entries == ((".", 2, 1_000, False),)


def test_a_snapshot_of_a_folder_covers_the_whole_tree_sorted(tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    write(bundle / "index.md", b"# b\n", mtime_ns=1)
    write(bundle / "costs" / "02.md", b"x" * 10, mtime_ns=2)
    taken = snap(bundle)
    assert [(rel, size, is_dir) for rel, size, _, is_dir in taken.entries] == [
        (".", 0, True),
        ("costs", 0, True),
        ("costs/02.md", 10, False),
        ("index.md", 4, False),
    ]
    assert taken.total_bytes == 14


def test_a_snapshot_of_a_missing_path_is_none(tmp_path: Path) -> None:
    assert snapshot(tmp_path / "gone") is None


def test_a_snapshot_records_a_symlink_without_following_it(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write(outside / "big.md", b"x" * 1000, mtime_ns=1)
    bundle = tmp_path / "b"
    write(bundle / "index.md", b"#", mtime_ns=1)
    (bundle / "link").symlink_to(outside, target_is_directory=True)
    relpaths = [entry[0] for entry in snap(bundle).entries]
    assert "link" in relpaths
    assert "link/big.md" not in relpaths


def test_identical_trees_give_equal_snapshots_and_any_change_differs(tmp_path: Path) -> None:
    bundle = tmp_path / "b"
    write(bundle / "index.md", b"# b\n", mtime_ns=10)
    before = snap(bundle)
    assert snap(bundle) == before
    write(bundle / "index.md", b"# B\n", mtime_ns=11)  # same size, new mtime
    assert snap(bundle) != before


@pytest.mark.loadbearing
def test_a_partial_bundle_is_not_ready_while_files_keep_arriving(tmp_path: Path) -> None:
    tracker = StabilityTracker(QUIET_S)
    bundle = tmp_path / "b"
    write(bundle / "index.md", b"# b\n", mtime_ns=1)
    tracker.observe(bundle, snap(bundle), now=0.0)
    for step in range(1, 6):
        # A slow copy: one more file every 4 s, always inside the quiet period.
        write(bundle / f"cost-{step}.md", b"x", mtime_ns=1 + step)
        tracker.observe(bundle, snap(bundle), now=4.0 * step)
        assert tracker.ready(now=4.0 * step) == []
    assert tracker.ready(now=20.0 + QUIET_S - 0.1) == []
    assert tracker.ready(now=20.0 + QUIET_S) == [bundle]


@pytest.mark.loadbearing
def test_a_file_still_growing_deep_inside_a_bundle_holds_it_back(tmp_path: Path) -> None:
    # Appending to an existing file changes no folder's mtime: only the tree walk can see it.
    tracker = StabilityTracker(QUIET_S)
    bundle = tmp_path / "b"
    write(bundle / "index.md", b"#", mtime_ns=1)
    big = bundle / "costs" / "big.md"
    write(big, b"x" * 1000, mtime_ns=1)
    tracker.observe(bundle, snap(bundle), now=0.0)
    with big.open("ab") as handle:
        handle.write(b"y" * 1000)
    os.utime(big, ns=(1, 1))  # even with its mtime put back, the size gives it away
    tracker.observe(bundle, snap(bundle), now=4.0)
    assert tracker.ready(now=QUIET_S) == []
    assert tracker.ready(now=4.0 + QUIET_S) == [bundle]


@pytest.mark.loadbearing
def test_an_entry_is_ready_after_the_quiet_period_and_not_before(tmp_path: Path) -> None:
    tracker = StabilityTracker(QUIET_S)
    path = tmp_path / "v.json"
    write(path, b"{}", mtime_ns=1)
    tracker.observe(path, snap(path), now=100.0)
    tracker.observe(path, snap(path), now=103.0)  # same snapshot: no reset
    assert tracker.ready(now=104.9) == []
    assert tracker.ready(now=105.0) == [path]


@pytest.mark.loadbearing
def test_a_change_restarts_the_quiet_period(tmp_path: Path) -> None:
    tracker = StabilityTracker(QUIET_S)
    bundle = tmp_path / "b"
    write(bundle / "index.md", b"#", mtime_ns=1)
    tracker.observe(bundle, snap(bundle), now=0.0)
    write(bundle / "late.md", b"late", mtime_ns=2)
    tracker.observe(bundle, snap(bundle), now=4.0)
    assert tracker.ready(now=QUIET_S) == []
    assert tracker.ready(now=4.0 + QUIET_S) == [bundle]


@pytest.mark.loadbearing
def test_truncate_then_write_is_ready_only_after_the_full_file_is_quiet(tmp_path: Path) -> None:
    tracker = StabilityTracker(QUIET_S)
    path = tmp_path / "v.json"
    full = b'{"id": "c-0123456789abcdef", "decision": "approved"}'
    # An editor truncates, writes half, then the rest (VS Code, research F2).
    for now, data, mtime_ns in ((0.0, b"", 1), (1.0, full[:20], 2), (2.0, full, 3)):
        write(path, data, mtime_ns=mtime_ns)
        tracker.observe(path, snap(path), now=now)
        assert tracker.ready(now=now) == []
    assert tracker.ready(now=1.0 + QUIET_S) == []  # quiet since the half write, not the full
    assert tracker.ready(now=2.0 + QUIET_S) == [path]


@pytest.mark.loadbearing
def test_an_entry_moved_in_by_rename_is_ready_at_once(tmp_path: Path) -> None:
    tracker = StabilityTracker(QUIET_S)
    bundle = tmp_path / "b"
    write(bundle / "index.md", b"#", mtime_ns=1)
    tracker.moved_in(bundle, now=50.0)
    tracker.observe(bundle, snap(bundle), now=50.0)  # the first look records, does not reset
    assert tracker.ready(now=50.0) == [bundle]


def test_a_moved_in_entry_that_then_changes_waits_for_quiet(tmp_path: Path) -> None:
    tracker = StabilityTracker(QUIET_S)
    bundle = tmp_path / "b"
    write(bundle / "index.md", b"#", mtime_ns=1)
    tracker.moved_in(bundle, now=0.0, snapshot=snap(bundle))
    write(bundle / "more.md", b"more", mtime_ns=2)
    tracker.observe(bundle, snap(bundle), now=1.0)
    assert tracker.ready(now=1.0) == []
    assert tracker.ready(now=1.0 + QUIET_S) == [bundle]


def test_moved_in_makes_an_already_tracked_entry_ready(tmp_path: Path) -> None:
    tracker = StabilityTracker(QUIET_S)
    path = tmp_path / "v.json"
    write(path, b"{}", mtime_ns=1)
    tracker.observe(path, snap(path), now=0.0)
    tracker.moved_in(path, now=1.0)
    assert tracker.ready(now=1.0) == [path]


@pytest.mark.loadbearing
def test_ready_forgets_what_it_returns(tmp_path: Path) -> None:
    tracker = StabilityTracker(QUIET_S)
    path = tmp_path / "v.json"
    write(path, b"{}", mtime_ns=1)
    tracker.observe(path, snap(path), now=0.0)
    assert tracker.ready(now=QUIET_S) == [path]
    assert path not in tracker.tracking()
    assert tracker.pending_count == 0
    assert tracker.ready(now=QUIET_S * 10) == []


def test_ready_returns_the_longest_waiting_first(tmp_path: Path) -> None:
    tracker = StabilityTracker(QUIET_S)
    first, second = tmp_path / "z.json", tmp_path / "a.json"
    for path in (first, second):
        write(path, b"{}", mtime_ns=1)
    tracker.observe(first, snap(first), now=0.0)
    tracker.observe(second, snap(second), now=1.0)
    assert tracker.ready(now=10.0) == [first, second]


def test_a_vanished_entry_is_forgotten(tmp_path: Path) -> None:
    tracker = StabilityTracker(QUIET_S)
    path = tmp_path / "v.json"
    write(path, b"{}", mtime_ns=1)
    tracker.observe(path, snap(path), now=0.0)
    path.unlink()
    tracker.observe(path, snapshot(path), now=1.0)
    assert path not in tracker.tracking()
    assert tracker.ready(now=100.0) == []


def test_tracking_counting_and_forgetting(tmp_path: Path) -> None:
    tracker = StabilityTracker(QUIET_S)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for path in (a, b):
        write(path, b"{}", mtime_ns=1)
        tracker.observe(path, snap(path), now=0.0)
    assert tracker.pending_count == 2
    assert sorted(tracker.tracking()) == [a, b]
    assert a in tracker.tracking()
    tracker.forget(a)
    tracker.forget(a)  # forgetting twice is harmless
    assert a not in tracker.tracking()
    assert tracker.pending_count == 1


def test_seconds_until_next_tells_the_loop_how_long_it_may_wait(tmp_path: Path) -> None:
    tracker = StabilityTracker(QUIET_S)
    assert tracker.seconds_until_next(now=0.0) is None
    path = tmp_path / "v.json"
    write(path, b"{}", mtime_ns=1)
    tracker.observe(path, snap(path), now=0.0)
    assert tracker.seconds_until_next(now=2.0) == pytest.approx(QUIET_S - 2.0)
    assert tracker.seconds_until_next(now=99.0) == 0.0
    tracker.moved_in(tmp_path / "other", now=1.0)
    assert tracker.seconds_until_next(now=1.0) == 0.0


def test_a_zero_quiet_period_makes_an_observed_entry_ready_at_once(tmp_path: Path) -> None:
    tracker = StabilityTracker(0.0)
    path = tmp_path / "v.json"
    write(path, b"{}", mtime_ns=1)
    tracker.observe(path, snap(path), now=7.0)
    assert tracker.ready(now=7.0) == [path]


def test_a_negative_quiet_period_is_refused() -> None:
    with pytest.raises(ValueError, match="quiet_s"):
        StabilityTracker(-1.0)
