"""The reference fit as a versioned artefact (DESIGN §12): a version is the exact global fit of one
set of projects, named by that set and the settings it was fitted under. The same set gives the
same version whatever order its projects arrived in, so a restart reaches it again and no figure
depends on arrival order.

Decides what a version is called (``version_id``) and when the next one is due
(``RefitPolicy``): an arriving or revised project is scored against the current version at once
(its lines measured leave-one-out, its own level fitted), and the refit waits until arrivals
have been quiet for ``quiet_s`` or ``every`` of them have come: a burst of a hundred projects costs
one refit, not a hundred, and a verdict never waits for one.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Final

from .reference import ReferenceRule

__all__ = ["ReferenceVersion", "RefitPolicy", "version_id"]

SCHEME: Final = 1
"""Bumped whenever what a fit computes from the same set changes: every version is new."""


def version_id(classes_digest: str, rule: ReferenceRule) -> str:
    """A version's name: the set's digest (``ReferenceClasses.digest``: each folder's project,
    summed as a multiset, so the order they arrived in never shows) and every setting of the
    rule, hashed. ``v-`` and twelve hex digits, as a report quotes it."""
    settings = sorted(dataclasses.asdict(rule).items())
    said = repr((SCHEME, settings, classes_digest)).encode()
    return "v-" + hashlib.sha256(said).hexdigest()[:12]


@dataclass(frozen=True)
class ReferenceVersion:
    """A published version as the ledger keeps it (``ledger.ingested.reference_version``)."""

    id: str
    projects: int
    """How many project folders it was fitted from."""
    fitted_at: str
    """When it was first fitted (UTC, ISO 8601): a restart that fits the same set keeps it."""


@dataclass(frozen=True)
class RefitPolicy:
    """When the next version is fitted: ``[reference] refit_quiet_s`` and ``refit_every``."""

    quiet_s: float
    every: int

    def due_in(self, arrivals: int, last_arrival: float, now: float) -> float | None:
        """Seconds until the refit (0.0: now), None while no project arrived since the current
        version. ``arrivals`` projects have settled since it, the last at ``last_arrival``."""
        if arrivals <= 0:
            return None
        if arrivals >= self.every:
            return 0.0
        return max(0.0, self.quiet_s - (now - last_arrival))
