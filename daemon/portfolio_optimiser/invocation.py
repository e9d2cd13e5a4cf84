"""How the user runs this command, so that a printed hint runs where they are.

Run through ``uv run`` in a source checkout, ``portfolio-optimiser`` is on the PATH only inside
that ``uv run``: a hint saying ``portfolio-optimiser run`` would fail in the user's shell, so it
says ``uv run --project <checkout> portfolio-optimiser run``. Installed (``uv tool install``, a
package, systemd), the plain command. And a workspace that is the source checkout itself (the
default workspace is the current folder) is almost always a mistake, said once on stderr.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path

__all__ = ["command", "source_checkout"]


def source_checkout() -> Path | None:
    """The source checkout this package runs from, or None when it is installed."""
    root = Path(__file__).resolve().parents[2]
    project = root / "pyproject.toml"
    if project.is_file() and 'name = "portfolio-optimiser"' in project.read_text("utf-8"):
        return root
    return None


def command(*args: str, environ: Mapping[str, str] | None = None) -> str:
    """``portfolio-optimiser ARGS…`` as the user can type it where they are."""
    env = os.environ if environ is None else environ
    checkout = source_checkout()
    if checkout is not None and "UV_RUN_RECURSION_DEPTH" in env:
        prefix = f"uv run --project {shlex.quote(str(checkout))} portfolio-optimiser"
    else:
        prefix = "portfolio-optimiser"
    return " ".join([prefix, *(shlex.quote(a) for a in args)])
