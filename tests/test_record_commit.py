"""Group commit of reasoning records (``reasoning/commit.py``): what a power cut or a kill leaves.

A power cut cannot be made in a test, so the commit's file system is a model of what one keeps
(as crash-consistency checkers model it), at its worst each way: a file's bytes are sure to
survive only once the file system was flushed after they were written; a name may survive as
soon as it is made (the journal commits on its own every few seconds), and is sure to once its
folder's names, or the whole file system, were flushed. The model does each step for real too,
and after every step asks: were the power cut now, could any record's name lead to bytes that
are not all there? After each commit: is every record it made sure to be on disk?

A kill is made for real: a process that stages records and is killed before it commits them
leaves every record whole or absent, and those it committed all there.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from portfolio_optimiser.reasoning.commit import Staging, SystemDisk
from portfolio_optimiser.reasoning.policy import Materiality
from portfolio_optimiser.reasoning.records import AssessmentInput, StoredRecord
from portfolio_optimiser.reasoning.store import _COMMITTER, Store

from .pipeline_helpers import CHECKER, PROPOSER, measure, proposal, session, small_bundle
from .test_pipeline_run import approve, run
from .test_record_store import TASK, Desk

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class PowerCut(SystemDisk):
    """The real file system, and beside it what a power cut would leave of it."""

    names: dict[Path, int] = field(default_factory=dict)
    """Each name now, to its file (an inode number of the model's own)."""
    data: dict[int, bytes] = field(default_factory=dict)
    maybe_names: dict[Path, int] = field(default_factory=dict)
    """Every name a power cut may keep: each one ever made."""
    sure_names: dict[Path, int] = field(default_factory=dict)
    sure_data: dict[int, bytes] = field(default_factory=dict)
    torn: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        super().__init__()

    def stage(self, path: Path, data: bytes) -> Path:
        tmp = super().stage(path, data)
        with self.lock:
            inode = len(self.data) + 1
            self.data[inode] = data
            self.names[tmp] = self.maybe_names[tmp] = inode
            self._cut_here("staged")
        return tmp

    def flush(self, folder: Path, files: list[Path]) -> None:
        """Only the files named are sure to be on disk after it (their names are not)."""
        super().flush(folder, files)
        with self.lock:
            self.sure_data |= {self.names[f]: self.data[self.names[f]] for f in files}
            self._cut_here("flushed")

    def link(self, tmp: Path, path: Path) -> None:
        super().link(tmp, path)
        with self.lock:
            self.names[path] = self.maybe_names[path] = self.names[tmp]
            self._cut_here(f"linked {path.name}")

    def flush_names(self, folder: Path) -> None:
        super().flush_names(folder)
        with self.lock:
            self.sure_names = {p: i for p, i in self.sure_names.items() if p.parent != folder}
            self.sure_names |= {p: i for p, i in self.names.items() if p.parent == folder}
            self._cut_here("names flushed")

    def remove(self, tmp: Path) -> None:
        super().remove(tmp)
        with self.lock:
            self.names.pop(tmp, None)
            self._cut_here("removed")

    def _cut_here(self, step: str) -> None:
        """Were the power cut now: every record name it may keep must lead to all its bytes."""
        for path, inode in self.maybe_names.items():
            if path.name.startswith("."):
                continue  # a temporary file: no reader takes it for a record
            if self.sure_data.get(inode, b"") != self.data[inode]:
                self.torn.append(f"after {step}: {path.name} would be torn")

    def kept(self, path: Path) -> bool:
        with self.lock:
            inode = self.sure_names.get(path)
            return inode is not None and self.sure_data.get(inode) == self.data[inode]


def _draft(n: int) -> AssessmentInput:
    return AssessmentInput(subject=f"Piles, option {n}", materiality=Materiality.LOW)


def _path(desk: Desk, record: StoredRecord) -> Path:
    return desk.root / "reasoning" / record.task / f"{record.seq:04d}-{record.id}.json"


@pytest.mark.loadbearing
def test_no_power_cut_tears_a_record_and_each_commit_leaves_its_records_on_disk(
    tmp_path: Path,
) -> None:
    desk = Desk(tmp_path)
    disk = PowerCut()
    store = Store(tmp_path, disk=disk)
    durable = store.record(TASK, _draft(0), desk.ctx())  # committed before it returns
    assert disk.kept(_path(desk, durable)), "a durable record is on disk when it is returned"
    staged = [store.record(TASK, _draft(n), desk.ctx(), durable=False) for n in range(1, 6)]
    store.commit()
    assert all(disk.kept(_path(desk, r)) for r in staged), "a commit leaves its batch on disk"
    assert not disk.torn, disk.torn
    assert Store(tmp_path).load().records == (durable, *staged)


class Held(SystemDisk):
    """The file system, with every write held until the test lets it go."""

    def __init__(self) -> None:
        self.go = threading.Event()

    def stage(self, path: Path, data: bytes) -> Path:
        assert self.go.wait(30), "never let go"
        return super().stage(path, data)


def test_a_record_staged_in_a_new_store_is_read_back_before_it_is_written(tmp_path: Path) -> None:
    """A staged record is held in memory until a commit writes it, and a new store has no
    folder yet: the writer reads its own record at once all the same (the next record of a run
    names it)."""
    desk = Desk(tmp_path)
    disk = Held()
    store = Store(tmp_path, disk=disk)
    staged = store.record(TASK, _draft(1), desk.ctx(), durable=False)
    assert store.load().by_id(staged.id) == staged
    assert not list((tmp_path / "reasoning").rglob("*.json")), "nothing written yet"
    disk.go.set()
    store.commit()
    assert Store(tmp_path).load().records == (staged,)


def test_a_batch_the_disk_refuses_stays_staged_and_is_committed_by_the_next(
    tmp_path: Path,
) -> None:
    desk = Desk(tmp_path)

    class Full(SystemDisk):
        full = True

        def flush(self, folder: Path, files: list[Path]) -> None:
            if self.full:
                raise OSError(28, "No space left on device")
            super().flush(folder, files)

    disk = Full()
    store = Store(tmp_path, disk=disk)
    staged = store.record(TASK, _draft(1), desk.ctx(), durable=False)
    with pytest.raises(OSError, match="No space left"):
        store.commit()
    assert store.load().by_id(staged.id) == staged, "this store still reads it"
    _COMMITTER.submit(lambda: None).result()  # the committer in the background refused too
    assert not list(tmp_path.rglob(".*.tmp")), "the refused batches' files are gone"
    disk.full = False
    store.commit()
    assert Store(tmp_path).load().records == (staged,)


def test_a_batch_retried_after_some_of_it_was_linked_is_published_whole(tmp_path: Path) -> None:
    """A batch that failed after linking some of its records (its folder's flush refused) is
    committed again: the names it had linked are its own, and are flushed and logged with the
    rest, not skipped as another writer's."""
    desk = Desk(tmp_path)

    class NamesRefusedOnce(PowerCut):
        refused = False

        def flush_names(self, folder: Path) -> None:
            if not self.refused:
                self.refused = True
                raise OSError(5, "Input/output error")
            super().flush_names(folder)

    disk = NamesRefusedOnce()
    store = Store(tmp_path, disk=disk)
    staged = [store.record(TASK, _draft(n), desk.ctx(), durable=False) for n in (1, 2)]
    with contextlib.suppress(OSError):  # refused here, or by the committer in the background
        store.commit()
    store.commit()
    _COMMITTER.submit(lambda: None).result()  # what the background took, logged
    logged = (tmp_path / "reasoning" / "records.log").read_text("utf-8").split()
    assert logged == [f"{TASK}/{_path(desk, r).name}" for r in staged]
    assert all(disk.kept(_path(desk, r)) for r in staged), "their names flushed"
    assert not disk.torn, disk.torn


KILLED = """
import os, signal, sys
from pathlib import Path
from tests.test_record_store import Desk, TASK
from tests.test_record_commit import _draft
from portfolio_optimiser.reasoning.store import Store

root = Path(sys.argv[1])
desk = Desk(root)
store = Store(root)
for n in range(3):
    store.record(TASK, _draft(n), desk.ctx())
for n in range(3, 40):
    store.record(TASK, _draft(n), desk.ctx(), durable=False)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.loadbearing
def test_a_process_killed_with_records_staged_leaves_each_whole_or_absent(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", KILLED, str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    loaded = Store(tmp_path).load()
    assert not loaded.unreadable, loaded.unreadable
    subjects = [r.body.subject for r in loaded.records if isinstance(r.body, AssessmentInput)]
    assert subjects[:3] == [f"Piles, option {n}" for n in range(3)], "the durable ones, all there"
    assert subjects == [f"Piles, option {n}" for n in range(len(subjects))], "a prefix, in order"


class BackgroundFails(PowerCut):
    """The committer in the background meets a full disk every time; the caller's own commit
    does not: whatever the run's records are, only its own commit can make them durable."""

    def flush(self, folder: Path, files: list[Path]) -> None:
        if threading.current_thread().name.startswith("record-commit"):
            raise OSError(28, "No space left on device")
        super().flush(folder, files)


@pytest.mark.loadbearing
def test_a_runs_records_are_on_disk_when_the_run_returns(tmp_path: Path) -> None:
    disk = BackgroundFails()
    reasoning = session(tmp_path, PROPOSER, CHECKER)
    reasoning = type(reasoning)(Store(tmp_path / "state", disk=disk), reasoning.ctx)
    result = run(
        small_bundle(tmp_path / "b"),
        reasoning,
        {"p1": lambda m, o: proposal(measure()), "k1": approve},
    )
    records = reasoning.store.load().records
    assert result.candidates and len(records) >= 5
    state = tmp_path / "state" / "reasoning"
    lost = [r.id for r in records if not disk.kept(state / r.task / f"{r.seq:04d}-{r.id}.json")]
    assert not lost, f"records the run returned without making durable: {lost}"
    assert not disk.torn, disk.torn


class Watched(Store):
    """The store, saying on which thread each record was made."""

    made: list[str]

    def _record(self, task: str, draft: Any, ctx: Any) -> StoredRecord:
        self.made.append(threading.current_thread().name)
        return super()._record(task, draft, ctx)


def test_a_record_is_made_on_the_event_loop_only_when_it_waits_for_nothing(
    tmp_path: Path,
) -> None:
    """``arecord`` makes a record on the caller's event loop once the store has been read; off
    it while a listing of every record is due (the first reads) or another writer holds the
    store, which the loop would wait for."""
    desk = Desk(tmp_path)
    store = Watched(tmp_path)
    store.made = []

    async def three() -> list[StoredRecord]:
        first = await store.arecord(TASK, _draft(1), desk.ctx())
        store.load()  # the folder is there now: this read lists it
        second = await store.arecord(TASK, _draft(2), desk.ctx())
        with store._lock:  # another run's record in hand: a thread waits for it, not the loop
            third = asyncio.create_task(store.arecord(TASK, _draft(3), desk.ctx()))
            await asyncio.sleep(0.05)
            assert not third.done()
        return [first, second, await third]

    records = asyncio.run(three())
    loop = threading.current_thread().name
    assert [name == loop for name in store.made] == [False, True, False], store.made
    assert [r.seq for r in records] == [1, 2, 3]
    store.commit()
    assert Store(tmp_path).load().records == tuple(records)


@pytest.mark.loadbearing
def test_a_runs_records_are_made_on_its_event_loop_once_the_store_is_read(tmp_path: Path) -> None:
    """A run's records are made on its event loop, but for the store's first reads (a new
    store: its first record, then a listing of every record)."""
    store = Watched(tmp_path / "state")
    store.made = []
    reasoning = session(tmp_path, PROPOSER, CHECKER)
    reasoning = type(reasoning)(store, reasoning.ctx)
    result = run(
        small_bundle(tmp_path / "b"),
        reasoning,
        {"p1": lambda m, o: proposal(measure()), "k1": approve},
    )
    assert result.candidates and len(store.made) >= 5
    loop = threading.current_thread().name
    assert [name == loop for name in store.made[2:]] == [True] * (len(store.made) - 2), store.made


@pytest.mark.loadbearing
def test_a_batch_with_a_record_that_cannot_be_rendered_stays_staged_and_the_commit_says_so(
    tmp_path: Path,
) -> None:
    root = tmp_path / "reasoning"
    staging = Staging(root)
    attempts: list[int] = []

    def render() -> bytes:
        attempts.append(1)
        if len(attempts) == 1:
            raise ValueError("cannot render this record")
        return b"{}\n"

    staging.stage(root / "t" / "0001-a.json", b"{}\n")
    staging.stage(root / "t" / "0002-b.json", render)
    with pytest.raises(ValueError, match="cannot render"):
        staging.commit()
    assert staging.names() == {"t/0001-a.json", "t/0002-b.json"}, "nothing dropped"
    assert not list((root / "t").iterdir()), "nothing published, no temporary left"
    assert [p.name for p in staging.commit()] == ["0001-a.json", "0002-b.json"]
