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
    """A concept's structured data (project, cost line, measure option) is malformed."""


class IngestStampError(UserError):
    """A curated writer tried to forge the ingest stamp (``generated: true`` + ``ingest_manifest``)."""
