"""What became of an inbox item, and what a failure costs the job it stopped: pure.

Decides the one mapping of an exception to its cost, for a bundle and a rerun alike: a bad input
(``BundleError``, ``ArchiveError``, ``ClaimError``) is **set aside** with its own sentence; a
resource busy, full or away for now is **put off**, to be tried again; a run that took the process
down too often is set aside, never started a third time; anything else is a **bug**, which costs
the one job and never the daemon.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from portfolio_optimiser.context.errors import BundleError

from .archive import ArchiveError
from .claim import ClaimError
from .db import database_unavailable
from .host import GivenUp

__all__ = ["UNDER_WAY", "Cost", "ItemResult", "cost_of", "transient"]

UNDER_WAY: Final = "under way"
"""A job left to its workflow by a stop: its claim stays, and the next start takes it up."""

TRANSIENT: Final = frozenset(
    {errno.ENOSPC, errno.EIO, errno.EBUSY, errno.EAGAIN, errno.EDQUOT, errno.ETIMEDOUT}
)


@dataclass(frozen=True)
class ItemResult:
    name: str
    kind: str
    state: str
    message: str = ""
    output: Path | None = None
    candidate_id: str | None = None
    """The candidate a verdict judged."""


def transient(exc: BaseException) -> str | None:
    """Why a failure is worth a retry (a resource busy, full or away for now), or None."""
    if isinstance(exc, OSError) and exc.errno in TRANSIENT:
        return str(exc.strerror)
    if database_unavailable(exc):
        return f"the database is unavailable ({exc})"
    return None


@dataclass(frozen=True)
class Cost:
    kind: Literal["set aside", "put off", "bug"]
    sentence: str


def cost_of(exc: BaseException, name: str, *, rerun: bool) -> Cost:
    reason = transient(exc)
    if reason is not None:
        return Cost("put off", reason)
    if isinstance(exc, GivenUp):
        if rerun:
            return Cost(
                "set aside",
                f"{name}: its rerun stopped the daemon {exc.crashes} times; not run again",
            )
        return Cost(
            "set aside",
            f"{name}: its run stopped the daemon {exc.crashes} times (killed, out of memory, or "
            "a crash in a library) and was set aside so it cannot do so a third time; the "
            "daemon's log (journalctl) says what ended the process",
        )
    if rerun:  # the ingested project stays where it is; only this identity is given up
        shown = str(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
        return Cost("set aside", f"{name}: its rerun failed ({shown})")
    if isinstance(exc, BundleError | ArchiveError | ClaimError):
        return Cost("set aside", str(exc))
    return Cost(
        "bug",
        f"{name}: an internal error stopped its run ({type(exc).__name__}: {exc}); this is a "
        "bug in portfolio-optimiser, please report it with the daemon's log",
    )
