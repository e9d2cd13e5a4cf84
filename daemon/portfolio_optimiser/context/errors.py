"""Errors of the context layer. Each message is one sentence: what, where, and how to fix it."""

from __future__ import annotations

from portfolio_optimiser.errors import UserError

__all__ = [
    "BundleError",
    "BundleEscapeError",
    "FrontmatterError",
    "IRError",
    "IngestStampError",
]


class BundleError(UserError):
    """A bundle cannot be read as it is; ``str(exc)`` is the sentence to show the planner."""


class BundleEscapeError(BundleError):
    """A link or a symlink points outside the bundle; it is never followed."""


class FrontmatterError(BundleError):
    """A concept file's frontmatter is missing, unsafe or not a mapping."""


class IRError(BundleError):
    """A bundle's structured data (project, cost lines, measure options) is malformed.

    It carries every problem found, like a compiler: ``problems`` are sentences sorted by file,
    each naming the file and the field and saying what to write instead. One problem reads as its
    sentence alone; several read as a count and a list.
    """

    def __init__(self, problems: str | list[str] | tuple[str, ...], *, bundle: str = "") -> None:
        self.problems: tuple[str, ...] = (
            (problems,) if isinstance(problems, str) else tuple(problems)
        )
        if len(self.problems) == 1:
            text = self.problems[0]
        else:
            where = f" in {bundle}" if bundle else ""
            text = (
                f"{len(self.problems)} problems{where}; fix them all before dropping it again:\n"
                + ("\n".join(f"- {problem}" for problem in self.problems))
            )
        super().__init__(text)


class IngestStampError(UserError):
    """A curated writer tried to forge the ingest stamp (``generated: true`` + ``ingest_manifest``)."""
