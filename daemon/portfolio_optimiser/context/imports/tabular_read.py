"""What the rows of a cost breakdown became, told for the import report: the lines, the problems
(at most ``MAX_PROBLEMS`` listed, the rest counted), and the rows skipped or taken as context (the
first ``_LISTED`` of each named, the rest counted), so that a file of millions of rows is told
in a few lines and held in none of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from .posts import Origin, Post, Problem

__all__ = ["MAX_PROBLEMS", "Listed", "Problems", "RowsRead", "spaced"]

MAX_PROBLEMS: Final = 1_000
"""Problems kept to be listed; past them a file's further problems are counted, not held (a
file whose every one of millions of rows is wrong must not take its size in memory)."""
_LISTED: Final = 200
"""Skipped and context rows named one by one in the import report; the rest are counted."""


def spaced(count: int) -> str:
    """1 000 000, as the report writes a count."""
    return f"{count:,}".replace(",", " ")


@dataclass
class Listed:
    """Entries for the import report: the first ``_LISTED`` kept, the rest counted."""

    kept: list[str] = field(default_factory=list)
    count: int = 0

    def add(self, entry: str) -> None:
        self.count += 1
        if len(self.kept) < _LISTED:
            self.kept.append(entry)

    def sentence(self, what: str) -> list[str]:
        if not self.count:
            return []
        more = (
            f", and {spaced(self.count - len(self.kept))} more"
            if self.count > len(self.kept)
            else ""
        )
        return [f"{what} taken as context, not as lines: {', '.join(self.kept)}{more}."]


@dataclass
class Problems:
    kept: list[Problem] = field(default_factory=list)
    more: int = 0

    def add(self, found: Iterable[Problem]) -> None:
        for problem in found:
            if len(self.kept) < MAX_PROBLEMS:
                self.kept.append(problem)
            else:
                self.more += 1

    def listed(self) -> list[Problem]:
        if not self.more:
            return self.kept
        last = self.kept[-1].origin
        return [
            *self.kept,
            Problem(
                Origin(last.file),
                None,
                f"and {spaced(self.more)} more problem(s) after {last}, not listed; fix these and "
                "import it again to see them",
            ),
        ]


@dataclass
class RowsRead:
    """What the rows became: the lines, every problem, and what the import report says of the
    rows that are not lines (each as its place and what it said)."""

    posts: list[Post] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    skipped: Listed = field(default_factory=Listed)
    headings: Listed = field(default_factory=Listed)
    notes: Listed = field(default_factory=Listed)

    def report(self) -> list[str]:
        """The import report's sentences on the rows."""
        context = self.headings.count + self.notes.count
        shown = [f"Skipped {s}." for s in self.skipped.kept]
        if self.skipped.count > len(self.skipped.kept):
            shown.append(f"Skipped {spaced(self.skipped.count - len(self.skipped.kept))} more.")
        return [
            f"{len(self.posts)} line(s) imported; {self.skipped.count} row(s) skipped"
            + (f"; {context} row(s) taken as context" if context else "")
            + ".",
            *shown,
            *self.headings.sentence("Headings"),
            *self.notes.sentence("Notes"),
        ]
