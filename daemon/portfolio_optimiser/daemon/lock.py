"""One daemon per workspace: an exclusive ``flock`` on ``<state>/daemon.lock``.

Decides: whether this process may work on the workspace. The holder writes its pid, start time and
command line into the file so a refused second start can say who holds it. The kernel, not the
file's content, is the truth: the lock belongs to the open file description, so it goes away when
the holder closes it or dies (even by SIGKILL) and a stale file never blocks a new start.

Never unlinks the lock file (unlink-then-recreate lets two processes each lock a different inode),
never waits for the lock (a second daemon is refused at once), never kills the holder. The
descriptor is close-on-exec, so a child process started with ``subprocess`` does not keep the
workspace locked; a ``fork()`` without ``exec`` would share it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from portfolio_optimiser._text import strip_control
from portfolio_optimiser.errors import UserError

__all__ = ["LOCK_NAME", "Holder", "LockHeld", "WorkspaceLock", "read_holder"]

LOCK_NAME = "daemon.lock"


@dataclass(frozen=True)
class Holder:
    """Who holds (or last held) the lock, as written into the file; fields may be unknown."""

    pid: int | None = None
    started: str | None = None
    command: str | None = None


class LockHeld(UserError, RuntimeError):
    """Another process holds the workspace lock; the message says who and what to do."""

    def __init__(self, path: Path, holder: Holder) -> None:
        self.path = path
        self.holder = holder
        who = f"pid {holder.pid}" if holder.pid is not None else "pid unknown"
        if holder.started:
            who += f", started {holder.started}"
        super().__init__(
            f"another portfolio-optimiser ({who}) runs on this workspace; stop it first "
            f"(lock: {path})"
        )


def read_holder(path: Path) -> Holder:
    """Parse what a holder wrote; an empty, partial or foreign file gives an unknown holder."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return Holder()
    if not isinstance(data, dict):
        return Holder()
    pid = data.get("pid")
    started = data.get("started")
    command = data.get("command")
    return Holder(
        pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
        started=strip_control(started) if isinstance(started, str) else None,
        command=strip_control(command) if isinstance(command, str) else None,
    )


def _command_line() -> str:
    try:
        raw = Path("/proc/self/cmdline").read_bytes()
    except OSError:
        return shlex.join([sys.executable, *sys.argv])
    args = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
    return shlex.join(args)


class WorkspaceLock:
    """``with WorkspaceLock(state_dir):`` — hold the workspace for the life of the block.

    ``acquire()`` raises :class:`LockHeld` when another process (or another open of the same file
    in this process) holds it; ``close()`` releases it and is idempotent.
    """

    def __init__(self, state_dir: Path) -> None:
        self.path = Path(state_dir) / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LockHeld(self.path, read_holder(self.path)) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        # A full disk must not stop the daemon: the flock is what counts, not the record.
        with contextlib.suppress(OSError):
            self._write_holder(fd)

    @staticmethod
    def _write_holder(fd: int) -> None:
        record = {
            "pid": os.getpid(),
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": _command_line(),
        }
        data = (json.dumps(record) + "\n").encode("utf-8")
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)

    def close(self) -> None:
        """Release the lock (a no-op when not held). The file stays; its content is cleared."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)  # while still holding it, so we never clear a new holder's record
        os.close(fd)  # closing the last descriptor of the open file description releases the flock

    def __enter__(self) -> WorkspaceLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"WorkspaceLock({str(self.path)!r}, held={self.held})"
