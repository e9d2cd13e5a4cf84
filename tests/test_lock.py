"""One daemon per workspace: the flock on <state>/daemon.lock, in this process and across processes."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from portfolio_optimiser.daemon.lock import LOCK_NAME, Holder, LockHeld, WorkspaceLock, read_holder

# A second process that takes the lock; it prints "locked <pid>" and holds it until killed.
HOLD = """
import sys, time
from pathlib import Path
from portfolio_optimiser.daemon.lock import WorkspaceLock
lock = WorkspaceLock(Path(sys.argv[1]))
lock.acquire()
print("locked", flush=True)
time.sleep(60)
"""
# A second process that tries once; exit 3 and the message when refused, 0 when it got the lock.
TRY = """
import sys
from pathlib import Path
from portfolio_optimiser.daemon.lock import LockHeld, WorkspaceLock
try:
    with WorkspaceLock(Path(sys.argv[1])):
        pass
except LockHeld as exc:
    print(exc)
    sys.exit(3)
"""


def _python(code: str, state: Path) -> list[str]:
    return [sys.executable, "-c", code, str(state)]


@pytest.fixture
def holder_process(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        _python(HOLD, tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "locked", proc.stderr.read() if proc.stderr else line
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_second_lock_in_the_same_process_is_refused_naming_the_pid(tmp_path: Path) -> None:
    with WorkspaceLock(tmp_path) as first:
        assert first.held
        second = WorkspaceLock(tmp_path)  # its own open file description: flock conflicts
        with pytest.raises(LockHeld) as refused:
            second.acquire()
        assert not second.held
    message = str(refused.value)
    assert f"another portfolio-optimiser (pid {os.getpid()}, started " in message
    assert "runs on this workspace; stop it first" in message
    assert str(tmp_path / LOCK_NAME) in message
    assert refused.value.holder.pid == os.getpid()


def test_the_lock_file_says_who_holds_it(tmp_path: Path) -> None:
    with WorkspaceLock(tmp_path) as lock:
        holder = read_holder(lock.path)
        assert holder.pid == os.getpid()
        assert holder.started is not None
        assert datetime.fromisoformat(holder.started).utcoffset() is not None
        assert holder.command  # this interpreter's command line
        assert (lock.path.stat().st_mode & 0o777) == 0o600


def test_it_is_released_on_close_and_close_is_idempotent(tmp_path: Path) -> None:
    lock = WorkspaceLock(tmp_path)
    lock.acquire()
    lock.acquire()  # already held: a no-op, not a self-conflict
    lock.close()
    lock.close()
    assert not lock.held
    with WorkspaceLock(tmp_path) as again:
        assert again.held
    assert read_holder(tmp_path / LOCK_NAME) == Holder()  # cleared while still held


def test_the_context_manager_releases_on_an_exception(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), WorkspaceLock(tmp_path):
        raise RuntimeError("boom")
    with WorkspaceLock(tmp_path) as again:
        assert again.held


def test_another_process_is_refused_while_we_hold_it(tmp_path: Path) -> None:
    with WorkspaceLock(tmp_path):
        refused = subprocess.run(_python(TRY, tmp_path), capture_output=True, text=True, timeout=60)
    assert refused.returncode == 3, refused.stderr
    assert f"(pid {os.getpid()}, started " in refused.stdout
    assert "stop it first" in refused.stdout
    after = subprocess.run(_python(TRY, tmp_path), capture_output=True, text=True, timeout=60)
    assert after.returncode == 0, after.stdout + after.stderr


def test_we_are_refused_while_another_process_holds_it_and_its_death_releases_it(
    tmp_path: Path, holder_process: subprocess.Popen[str]
) -> None:
    with pytest.raises(LockHeld) as refused:
        WorkspaceLock(tmp_path).acquire()
    assert refused.value.holder.pid == holder_process.pid
    assert f"pid {holder_process.pid}" in str(refused.value)

    holder_process.send_signal(signal.SIGKILL)  # no cleanup runs: the kernel drops the flock
    holder_process.wait(timeout=10)
    with WorkspaceLock(tmp_path) as lock:
        assert read_holder(lock.path).pid == os.getpid()


def test_a_stale_lock_file_does_not_block_a_start(tmp_path: Path) -> None:
    (tmp_path / LOCK_NAME).write_text(
        json.dumps({"pid": 999999, "started": "2000-01-01T00:00:00+00:00", "command": "old"})
    )
    with WorkspaceLock(tmp_path) as lock:
        assert read_holder(lock.path).pid == os.getpid()


def test_a_holder_that_wrote_nothing_is_an_unknown_pid(tmp_path: Path) -> None:
    path = tmp_path / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(LockHeld, match=r"\(pid unknown\) runs on this workspace"):
            WorkspaceLock(tmp_path).acquire()
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "content",
    ["", "not json", "[1, 2]", '{"pid": "12"}', '{"pid": true, "started": 5}'],
)
def test_a_garbled_record_reads_as_an_unknown_holder(tmp_path: Path, content: str) -> None:
    path = tmp_path / LOCK_NAME
    path.write_text(content)
    assert read_holder(path) == Holder()


def test_a_record_cannot_put_control_sequences_in_the_message(tmp_path: Path) -> None:
    path = tmp_path / LOCK_NAME
    path.write_text(json.dumps({"pid": 7, "started": "now\x1b[2J", "command": "x\x1b]0;t\x07"}))
    assert read_holder(path) == Holder(pid=7, started="now", command="x")


def test_a_child_process_does_not_inherit_the_lock(tmp_path: Path) -> None:
    lock = WorkspaceLock(tmp_path)
    lock.acquire()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock.close()  # the child still runs, but holds no copy of the descriptor (close-on-exec)
        with WorkspaceLock(tmp_path) as again:
            assert again.held
    finally:
        child.kill()
        child.wait(timeout=10)


def test_the_state_directory_is_created(tmp_path: Path) -> None:
    state = tmp_path / "workspace" / "state"
    with WorkspaceLock(state) as lock:
        assert lock.path == state / LOCK_NAME
        assert lock.path.exists()
