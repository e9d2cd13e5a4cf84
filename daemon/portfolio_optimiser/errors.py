"""The one family of errors a person sees: what went wrong, where, and what to do, in a sentence.

Every expected failure of an input, a file or a store derives from :class:`UserError` (beside
its own base, so callers that catch ``ValueError`` or ``FileExistsError`` still do). The CLI prints
``str(exc)`` and exits 1 for any of them; whatever is not one is a defect, reported as an internal
error. A new error class joins the family by deriving from it: nothing else lists them.
"""

from __future__ import annotations

__all__ = ["UserError"]


class UserError(Exception):
    """An expected failure a person can act on; ``str(exc)`` is that one sentence."""
