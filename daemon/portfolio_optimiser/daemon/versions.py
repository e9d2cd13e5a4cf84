"""What a run's identity is (DESIGN §3, "Run identity"): the bundle's content hash, and the
version of the portfolio inputs that shaped its candidates offline — the reference-price and
learned candidates the local rules give it now: their ids, savings and grades. A bundle nothing
in the portfolio shapes keeps its content hash as its identity. The identity is computed against
one snapshot of the reference fit (the project's lines measured against the portfolio), and the
run is handed that snapshot, so its reference prices are the ones it was identified by (or
within the band of them, ``[reference] rerun_band``: ``portfolio``).
"""

from __future__ import annotations

import functools
import hashlib
from typing import TYPE_CHECKING, Final

from portfolio_optimiser.context.models import (
    REFERENCE_PRICE,
    Candidate,
    Project,
    candidate_key_literal,
    identity_literal,
    mint_candidate_id,
)
from portfolio_optimiser.context.reference_sweep import ReferenceKey
from portfolio_optimiser.pipeline.local import local_candidates

if TYPE_CHECKING:
    from .teaching import Teaching

__all__ = [
    "own_inputs",
    "own_part",
    "reference_keys",
    "reference_part",
    "run_identity",
    "version_of",
]


def own_part(project: Project, teaching: Teaching) -> list[str]:
    """What the experts' approvals carry to the project, as its version counts them (the
    kuttliste's own options are the project's content, not the portfolio's; the reference
    classes add the rest: ``reference_part``)."""
    return [
        _said(c)
        for c in local_candidates(project, teaching.approved, None, teaching.sources)
        if not c.origin.startswith("measure-option:")
        and not (c.origin.startswith("verdict:") and teaching.precedents.of(c))  # as the run will
    ]


def reference_keys(found: list[Candidate]) -> tuple[ReferenceKey, ...]:
    return tuple(
        (c.affected_codes[0], c.unit or "", c.grade or "", int(c.claimed_saving_nok)) for c in found
    )


def reference_part(project_id: str, keys: tuple[ReferenceKey, ...]) -> list[str]:
    """What the reference candidates add to the version, said as a candidate of each would be."""
    said = []
    for code, unit, grade, saving in keys:
        literal = candidate_key_literal(saving)
        identity = identity_literal(REFERENCE_PRICE, literal, unit)
        said.append(f"{_reference_id(project_id, code, identity)}\x00{literal}\x00{grade}")
    return said


@functools.lru_cache(maxsize=1 << 17)
def _reference_id(project_id: str, code: str, identity: str) -> str:
    """A reference candidate's id: its identity is its unit, not its saving, so it stands while
    the saving moves, and one more project re-mints none of the thousands whose savings it
    moved (a look at the reruns at ten thousand projects minted eleven thousand)."""
    return mint_candidate_id(project_id, (code,), REFERENCE_PRICE, identity)


def _said(c: Candidate) -> str:
    return f"{c.id}\x00{c.saving_literal}\x00{c.grade or ''}"


def version_of(own: list[str], reference: list[str]) -> str:
    added = sorted(own + reference)
    if not added:
        return ""
    return hashlib.sha256("\n".join(added).encode()).hexdigest()[:16]


VERSION_INPUTS: Final = 1
"""Bumped whenever what a version's own part is computed from changes: every kept one is stale."""


def own_inputs(content: str, teaching: str) -> str:
    """What a project's own part is computed from, as one digest."""
    said = repr((VERSION_INPUTS, content, teaching))
    return hashlib.sha256(said.encode()).hexdigest()[:24]


def run_identity(content: str, version: str) -> str:
    """The ledger's key for a run: the content hash alone while nothing in the portfolio shapes
    the bundle, else a hash of both (so a moved portfolio is a new run, never a duplicate)."""
    if not version:
        return content
    return hashlib.sha256(f"{content}\x00{version}".encode()).hexdigest()
