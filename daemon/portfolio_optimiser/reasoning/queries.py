"""What the records say, read back: the queries admission and reporting share.

Pure functions over what ``Store.load`` returned (``Loaded``): no file is read or written here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from portfolio_optimiser.errors import UserError

from .availability import AvailabilityInputs, derive_availability
from .catalogue import Catalogue, Presence
from .loaded import Loaded, normalise_subject
from .modes import ModeResolution
from .records import StoredRecord

__all__ = [
    "Admission",
    "Loaded",
    "Refusal",
    "availability_now",
    "consultations_of",
    "normalise_subject",
    "open_disagreements",
    "refuse",
    "resolutions_of",
    "standing_conclusion",
]


class Refusal(UserError):
    """One sentence a caller can act on; ``str(refusal)`` is that sentence."""


def refuse(sentence: str) -> Refusal:
    return Refusal(sentence)


@dataclass(frozen=True)
class Admission:
    """What admission may consult besides the records: the catalogue and the machine's state."""

    catalogue: Catalogue
    mode: ModeResolution
    now: datetime
    presence: Presence = field(default_factory=Presence)
    disabled: frozenset[str] = frozenset()
    cooldown_override_s: float | None = None
    clock: Callable[[], datetime] | None = None
    """The wall clock of a long-lived process; without one, ``now`` stands for every moment."""

    def current(self) -> datetime:
        return self.clock() if self.clock is not None else self.now


def availability_now(loaded: Loaded, ctx: Admission) -> list[Any]:
    return derive_availability(
        ctx.catalogue,
        AvailabilityInputs(
            mode=ctx.mode.mode,
            now=ctx.current(),
            history=loaded.breaker_history(),
            presence=ctx.presence,
            disabled=ctx.disabled,
            cooldown_override_s=ctx.cooldown_override_s,
        ),
    )


def standing_conclusion(loaded: Loaded, subject: str) -> StoredRecord | None:
    """The newest conclusion on this subject that no later conclusion supersedes."""
    return loaded.standing_conclusion(subject)


def consultations_of(loaded: Loaded, assessment_id: str) -> list[StoredRecord]:
    plans = (p.id for p in loaded.citing("plan", assessment_id))
    return loaded.citing_any("consultation", plans)


def resolutions_of(loaded: Loaded, disagreement_id: str) -> list[StoredRecord]:
    return loaded.citing("resolution", disagreement_id)


def open_disagreements(loaded: Loaded, assessment_id: str) -> list[StoredRecord]:
    return [
        r
        for r in loaded.citing("disagreement", assessment_id)
        if not loaded.citing("resolution", r.id)
    ]
