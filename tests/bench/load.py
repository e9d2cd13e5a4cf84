"""Load a 2-core machine the way other work does, for a bounded time: two busy processes and a
disk writer (issue 47: the suite must hold under load).

    uv run python -m tests.bench.load --seconds 1800 &   # then run the suite beside it
    uv run python -m tests.bench.load --seconds 1800 -- uv run pytest -q   # or run a command

With a command, the load starts, the command runs beside it, and the load stops when the command
ends (or at ``--seconds``, whichever comes first); the exit code is the command's. The busy
processes spin on arithmetic, the writer writes and fsyncs 8 MiB files in a scratch folder it
removes. Nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

CHUNK = 8 << 20


def _busy(until: float) -> None:
    x = 0
    while time.monotonic() < until:
        for i in range(100_000):
            x = (x * 31 + i) % 1_000_003


def _writer(until: float, folder: str) -> None:
    block = os.urandom(1 << 20)
    n = 0
    while time.monotonic() < until:
        path = Path(folder) / f"load-{n % 4}.bin"
        with path.open("wb") as f:
            for _ in range(CHUNK // len(block)):
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
        n += 1
        time.sleep(0.05)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--seconds", type=float, default=1800.0, help="the load's longest life")
    parser.add_argument("--busy", type=int, default=2, help="busy processes")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- and a command to run")
    args = parser.parse_args(argv)
    until = time.monotonic() + args.seconds
    with tempfile.TemporaryDirectory(prefix="load-") as folder:
        load = [
            multiprocessing.Process(target=_busy, args=(until,), daemon=True)
            for _ in range(args.busy)
        ]
        load.append(multiprocessing.Process(target=_writer, args=(until, folder), daemon=True))
        for process in load:
            process.start()
        command = [part for part in args.command if part != "--"]
        try:
            if command:
                return subprocess.run(command, check=False).returncode
            for process in load:
                process.join()
            return 0
        finally:
            for process in load:
                process.terminate()
                process.join(5)


if __name__ == "__main__":
    sys.exit(main())
