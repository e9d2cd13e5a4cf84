"""A store's reads cost what was written since the last one (``reasoning/reading.py``).

Each test holds one warm ``Store`` (one process's view) while others write, as the daemon and its
workers do, and counts the folder listings a read makes.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from portfolio_optimiser.reasoning import reading
from portfolio_optimiser.reasoning.policy import Materiality
from portfolio_optimiser.reasoning.records import AssessmentInput
from portfolio_optimiser.reasoning.store import Store

from .test_record_store import Desk

TASK = "lillevik-school"


@pytest.fixture
def desk(tmp_path: Path) -> Desk:
    return Desk(tmp_path)


class Listings:
    """Counts the folders ``reading`` lists (``os.scandir``); ``after`` runs once the first
    listing (the store's own folder, around every task's) has ended."""

    def __init__(self) -> None:
        self.count = 0
        self.after: Any = None

    def scandir(self, path: Any) -> Any:
        self.count += 1
        return _Listing(self, os.scandir(path), first=self.count == 1)


class _Listing:
    def __init__(self, listings: Listings, inner: Any, *, first: bool) -> None:
        self.listings, self.inner, self.first = listings, inner, first

    def __enter__(self) -> Any:
        return self.inner.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.inner.__exit__(*exc)
        if self.first and self.listings.after is not None:
            after, self.listings.after = self.listings.after, None
            after()


class _Os:
    """``os`` as ``reading`` sees it, its listings counted (no other module's)."""

    def __init__(self, listings: Listings) -> None:
        self.scandir = listings.scandir

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> Iterator[Listings]:
    counted = Listings()
    monkeypatch.setattr(reading, "os", _Os(counted))
    yield counted


def _warm(desk: Desk) -> Store:
    """A store that has read everything once."""
    desk.assess()
    warm = Store(desk.root)
    warm.load()
    return warm


@pytest.mark.loadbearing
def test_a_read_after_nothing_was_written_lists_no_folder(desk: Desk, listings: Listings) -> None:
    warm = _warm(desk)
    first = warm.load()
    listings.count = 0
    assert warm.load() is first
    assert listings.count == 0


@pytest.mark.loadbearing
def test_a_record_another_store_wrote_is_read_from_the_log_without_a_listing(
    desk: Desk, listings: Listings
) -> None:
    warm = _warm(desk)
    written = desk.assess(subject="Cheaper facade panels", task="other-task")  # another process
    listings.count = 0
    assert written in warm.load().records
    assert warm.load().by_id(written.id) == written
    assert listings.count == 0


@pytest.mark.loadbearing
def test_a_record_published_during_a_listing_is_read_at_the_next_load(
    desk: Desk, listings: Listings
) -> None:
    """The log's size is taken before the listing: a record published once the folders were
    listed is read from the log next time."""
    desk.assess()
    reader = Store(desk.root)
    written: list[Any] = []
    listings.count = 0
    listings.after = lambda: written.append(desk.assess(subject="Piles", task="late-task"))
    assert not reader.load().by_id("none")
    assert written and written[0] in reader.load().records


@pytest.mark.loadbearing
def test_a_file_the_log_does_not_name_is_read_at_the_next_full_listing(
    desk: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [0.0]
    monkeypatch.setattr(reading.time, "monotonic", lambda: clock[0])
    warm = _warm(desk)
    # A writer that died between publishing and logging: its record is there, the log is not.
    other = desk.assess(subject="Cheaper facade panels", task="other-task")
    log = desk.root / "reasoning" / reading.LOG_NAME
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:-1]) + b" " * len(lines[-1]))  # same size, the name gone
    clock[0] = reading.FULL_LISTING_S - 1
    assert other not in warm.load().records
    clock[0] = reading.FULL_LISTING_S
    assert other in warm.load().records


def test_a_log_made_again_or_cut_short_makes_the_next_read_a_full_listing(
    desk: Desk, listings: Listings
) -> None:
    warm = _warm(desk)
    log = desk.root / "reasoning" / reading.LOG_NAME
    other = desk.assess(subject="Cheaper facade panels", task="other-task")
    log.unlink()
    log.write_bytes(b"")  # a new file: what was logged before it is not in it
    listings.count = 0
    assert other in warm.load().records
    assert listings.count >= 1


def test_a_line_still_being_appended_is_read_once_whole(desk: Desk) -> None:
    warm = _warm(desk)
    other = desk.assess(subject="Cheaper facade panels", task="other-task")
    log = desk.root / "reasoning" / reading.LOG_NAME
    whole = log.read_bytes()
    log.write_bytes(whole[:-10])  # the line's end not yet written
    stat = log.stat()
    assert other not in warm.load().records
    log.write_bytes(whole)
    os.utime(log, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert other in warm.load().records


def test_an_unreadable_file_is_reported_and_read_once_it_is_mended(desk: Desk) -> None:
    warm = _warm(desk)
    other = desk.assess(subject="Cheaper facade panels", task="other-task")
    path = next((desk.root / "reasoning" / "other-task").glob("*.json"))
    good = path.read_bytes()
    path.write_bytes(good[:20])
    fresh = Store(desk.root)
    loaded = fresh.load()
    assert other not in loaded.records
    assert [name for name, _ in loaded.unreadable] == [f"other-task/{path.name}"]
    path.write_bytes(good)
    loaded = fresh.load()
    assert other in loaded.records and not loaded.unreadable
    assert other in warm.load().records


@pytest.mark.loadbearing
def test_a_record_its_writer_publishes_while_listing_the_store_is_in_the_listing(
    desk: Desk, listings: Listings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh store's first record, staged, then published by the committer while the next
    read lists the folders: it is pending or on disk, and the read must find it in one of the
    two (the plan that cites it was refused as citing no record, about one run in five)."""
    from portfolio_optimiser.reasoning.records import AssessmentInput

    from .test_record_store import FILE_EVIDENCE, REVIEW

    monkeypatch.setattr(Store, "_commit_soon", lambda self: None)  # the test commits, below
    store = Store(desk.root)
    draft = AssessmentInput(subject="Piles", evidence=(FILE_EVIDENCE,), capabilities=REVIEW)
    staged = store.record(TASK, draft, desk.ctx(), durable=False)
    listings.count = 0
    listings.after = store.commit  # published once the folders are listed
    assert staged in store.load().records
    assert listings.count >= 1, "the read listed no folder: not the case under test"


@pytest.mark.loadbearing
def test_no_collection_runs_while_a_store_is_read_whole(desk: Desk) -> None:
    """Every record read, and its index, stays alive: each collection on the way walks them
    all for nothing (half of a first read at 48 000 records)."""
    writer = Store(desk.root)
    ctx = desk.ctx()
    for n in range(300):
        draft = AssessmentInput(subject=f"Measure {n}", materiality=Materiality.LOW)
        writer.record(TASK, draft, ctx, durable=False)
    writer.commit()
    collections: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.collect()
    gc.callbacks.append(seen)
    try:
        loaded = Store(desk.root).load()
    finally:
        gc.callbacks.remove(seen)
    assert len(loaded.records) == 300
    # One young collection may follow the read, once the collector is back on: one walk of
    # what the read made, instead of one every 700 objects made.
    assert len(collections) <= 1, collections
    assert gc.isenabled(), "the collector is back on"
