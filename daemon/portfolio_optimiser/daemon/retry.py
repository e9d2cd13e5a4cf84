"""``retry NAME``: a quarantined bundle goes back into the inbox, its report goes away."""

from __future__ import annotations

import contextlib
from pathlib import Path

from .claim import content_digest, release
from .filters import InboxFilter
from .ledger import Ledger
from .workspace import Workspace

__all__ = ["retry_quarantined"]


def retry_quarantined(workspace: Workspace, ledger: Ledger, name: str, *, now_iso: str) -> Path:
    """Put a quarantined bundle back into the inbox (``retry NAME``)."""
    if not name or name in {".", ".."} or "/" in name or "\\" in name or name.endswith(".txt"):
        raise FileNotFoundError(
            f"{name!r} is not the name of a quarantined bundle; give a name as `ls outbox/failed/` shows it"
        )
    source = workspace.failed / name
    if not source.exists() or source.is_symlink():
        known = (
            sorted(p.name for p in workspace.failed.iterdir() if not p.name.endswith(".txt"))
            if workspace.failed.is_dir()
            else []
        )
        raise FileNotFoundError(
            f"nothing named {name!r} is quarantined in outbox/failed/ (there: {', '.join(known) or 'nothing'})"
        )
    not_taken = InboxFilter().not_taken(source)
    if not_taken is not None:  # a PDF, a symlink: back in the inbox it is only set aside again
        raise FileNotFoundError(
            f"{not_taken.split(';')[0]}, so a retry would set it aside again; drop the bundle or "
            f"estimate it belongs to instead, and delete outbox/failed/{name} once you no longer "
            "need it"
        )
    # The ledger knows it by where it was set aside: by its run identity when it failed in its
    # run, by its content when it failed before it had one.
    keys = {item.digest for item in ledger.items("failed") if item.output == str(source)}
    keys.add(content_digest(source))
    for digest in sorted(keys):
        if ledger.get(digest) is not None:
            ledger.mark(digest, "retry", now=now_iso, error=None)
        ledger.finish_run(digest)  # a bundle put back by hand gets a fresh count of crashes
    destination = release(source, workspace.inbox_projects / name)
    with contextlib.suppress(FileNotFoundError):
        (workspace.failed / f"{name}.error.txt").unlink()
    return destination
