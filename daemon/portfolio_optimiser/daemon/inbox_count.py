"""What lies in the inbox now, counted one way for ``status`` and ``once``.

Decides, by the intake's own filter (``filters``), what each top-level entry of inbox/projects/
and inbox/verdicts/ is: a bundle or estimate waiting, an entry the inbox does not take (set aside
at the next run), a verdict file, a verdict's signature, the daemon's own report beside a file,
or junk. Reads names and one ``lstat`` each; never a file's contents.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .filters import InboxFilter
from .signing import signed_verdict
from .verdicts import REPORT_SUFFIX
from .workspace import Workspace

__all__ = ["InboxCount", "count_inbox", "refusal_of"]


@dataclass
class InboxCount:
    bundles: list[str] = field(default_factory=list)
    """Bundles, archives and estimate files waiting in inbox/projects/."""
    not_taken: list[str] = field(default_factory=list)
    """Entries of inbox/projects/ the inbox does not take (a PDF, a symlink)."""
    verdicts: list[str] = field(default_factory=list)
    """Verdict files in inbox/verdicts/, read or not."""
    signatures: int = 0
    reports: list[str] = field(default_factory=list)
    """The files of inbox/verdicts/ with a report beside them (``NAME.error.txt``)."""
    not_verdicts: list[str] = field(default_factory=list)
    """Files of inbox/verdicts/ that are no verdict (a ``.json.txt``)."""


def _entries(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except OSError:
        return []


def count_inbox(workspace: Workspace) -> InboxCount:
    take = InboxFilter()
    count = InboxCount()
    for entry in _entries(workspace.inbox_projects):
        if take.is_bundle_candidate(entry):
            count.bundles.append(entry.name)
        elif take.not_taken(entry) is not None:
            count.not_taken.append(entry.name)
    for entry in _entries(workspace.inbox_verdicts):
        name = entry.name
        if name.endswith(REPORT_SUFFIX):
            subject = entry.with_name(name[: -len(REPORT_SUFFIX)])
            if subject.exists():
                count.reports.append(subject.name)
        elif signed_verdict(entry) is not None and not take.is_junk(name):
            count.signatures += 1
        elif take.is_verdict_candidate(entry):
            count.verdicts.append(name)
        elif take.not_taken(entry, verdicts=True) is not None:
            count.not_verdicts.append(name)
    return count


def refusal_of(workspace: Workspace, name: str) -> str:
    """The first line of the report beside a file of inbox/verdicts/: why it was not taken in."""
    report = workspace.inbox_verdicts / f"{name}{REPORT_SUFFIX}"
    try:
        return report.read_text("utf-8").splitlines()[0]
    except (OSError, UnicodeDecodeError, IndexError):
        return "see its report"
