"""What a claimed job is, decided from what the ledger knows of its identity: a pure function.

Decides, for a claim (a bundle claimed from the inbox, retried or recovered, or an ingested
project the portfolio moved under) and the ledger's view of its run identity, which one of these
it is — never by looking at the disk or the clock, so the whole table is tested as a table:

- **Resume**: the claim's own job, cut off or put off: it goes on from the stage it reached.
- **Duplicate**: its identity ran, or is under way from another claim that is still there; it is
  not run again and nothing is charged (an older version dropped again stays a duplicate too:
  reinstating it without a run would mislead every report).
- **Refused**: the same identity failed before; it fails again with that reason, not re-run.
- **TakeOver**: its job ran and was set aside (then put back by ``retry``): this claim takes the
  job over from its stage, never running or charging it twice.
- **Wait**: a new run the portfolio's budget cannot fund now; it waits, unclaimed.
- **New**: a job of its own, from the start (``afresh``: the job that ran before is forgotten
  first, because the outputs it left are gone).
"""

from __future__ import annotations

from dataclasses import dataclass

from .job import Job, Stage
from .ledger import Item

__all__ = [
    "ClaimView",
    "Decision",
    "Duplicate",
    "LedgerView",
    "New",
    "Refused",
    "Resume",
    "TakeOver",
    "Wait",
    "decide",
]


@dataclass(frozen=True)
class ClaimView:
    identity: str
    claimed: str
    """Where its input is held: the claimed path, or a rerun's ingested project folder."""
    tokens: int
    """What a run may use of the portfolio's budget (held from its start until it is charged)."""


@dataclass(frozen=True)
class LedgerView:
    job: Job | None
    """The identity's job, if one was recorded."""
    item: Item | None
    """The identity's item (its state: done, failed, retry, ...)."""
    job_input_here: bool
    """Whether the recorded job's claimed input is still where it was claimed."""
    outputs_stand: bool
    """Whether the run folder (or the staged one) of a job that ran is still there."""
    held: bool
    """Whether the identity already holds its share of the portfolio's budget."""
    budget_left: int
    """The portfolio's tokens neither spent nor held by a job in flight."""


@dataclass(frozen=True)
class New:
    afresh: bool = False


@dataclass(frozen=True)
class Resume:
    job: Job


@dataclass(frozen=True)
class Duplicate:
    first: str
    """The earlier run it duplicates, as people know it."""


@dataclass(frozen=True)
class Refused:
    reason: str


@dataclass(frozen=True)
class TakeOver:
    job: Job


@dataclass(frozen=True)
class Wait:
    left: int
    """The portfolio's tokens left, for the sentence that says why it waits."""


Decision = New | Resume | Duplicate | Refused | TakeOver | Wait


def decide(claim: ClaimView, ledger: LedgerView) -> Decision:
    job, item = ledger.job, ledger.item
    if job is not None and job.claimed == claim.claimed and not job.done(Stage.SETTLED):
        return Resume(job)
    # Another claim's job: a duplicate while that claim is still under way or once it ran; an
    # unsettled job whose input is gone (set aside by a kill mid-way) is no one's.
    taken = job is not None and (job.done(Stage.SETTLED) or ledger.job_input_here)
    if taken or (item is not None and item.state == "done"):
        first = (item.detail or item.name) if item is not None else claim.identity[:12]
        return Duplicate(first)
    if item is not None and item.state == "failed":
        return Refused(item.error or "it failed before with the same content")
    afresh = job is not None and job.done(Stage.RAN) and not ledger.outputs_stand
    if job is not None and job.done(Stage.RAN) and not afresh:
        return TakeOver(job)
    if not ledger.held and ledger.budget_left < claim.tokens:
        return Wait(ledger.budget_left)
    return New(afresh=afresh)
