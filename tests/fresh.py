"""A script run in a fresh interpreter, as the daemon starts: what a test asks of ``sys.modules``
is then what the daemon's own imports load, not what earlier tests left behind."""

from __future__ import annotations

import subprocess
import sys


def fresh_python(script: str, *args: str, timeout: float = 120) -> str:
    """``script``'s standard output; a failure raises with its standard error in the message."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise AssertionError(f"the script failed ({done.returncode}):\n{done.stderr}")
    return done.stdout
