"""Verdicts in place: an expert's JSON file is read where it lies and never moved.

Decides: whether a verdict file is ready, valid and about a known candidate, and what follows from
it. The expert may still have the file open, so it is never moved or rewritten; its bytes are
hashed, and the ledger remembers what each content did. Bytes that do not parse while the file is
still changing are "not ready" (editors that truncate, then write); once the file has been quiet,
the problem is reported in ``NAME.json.error.txt`` beside it, and that report is removed when the
file is fixed. A valid verdict is recorded (id verbatim; an edit replaces the earlier verdict for
the candidate, the history stays in the ledger), resolves the candidate's open disagreement with
the expert's decision as evidence, and — only if it approves — is promoted into the wiki. An edit
that withdraws an approval retracts the promoted page; it never stays standing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from portfolio_optimiser._atomic import publish_text, published_together
from portfolio_optimiser.context.signature import SignatureRefused
from portfolio_optimiser.context.verdict import (
    VerdictError,
    decided_in_the_future,
    parse_verdict,
)
from portfolio_optimiser.learning.promotion import (
    PromotionRefused,
    promote_verdict,
    retract_verdict,
)
from portfolio_optimiser.learning.verdict_store import CandidateKey
from portfolio_optimiser.reasoning.redaction import safe_text
from portfolio_optimiser.reasoning.store import (
    Store,
)

from .ledger import Ledger
from .ledger_records import SignatureRow
from .signing import Signing, signature_path
from .verdict_records import record_reasoning

__all__ = [
    "REPORT_SUFFIX",
    "VerdictOutcome",
    "VerdictState",
    "ingest_verdict",
    "report_path",
    "report_verdict_problem",
]

REPORT_SUFFIX = ".error.txt"
APPROVALS = frozenset({"approved", "approved_with_adjustment"})


class VerdictState(StrEnum):
    NOT_READY = "not_ready"
    """Bytes that do not parse, in a file still being written: look again after the quiet period."""
    INGESTED = "ingested"
    ALREADY = "already"
    """The same bytes were ingested before."""
    REPORTED = "reported"
    """A problem the expert must fix; the report is beside the file."""


@dataclass(frozen=True)
class VerdictOutcome:
    state: VerdictState
    message: str = ""
    candidate_id: str | None = None
    promoted: Path | None = None
    retracted: bool = False


def report_path(verdict_file: Path) -> Path:
    return verdict_file.with_name(verdict_file.name + REPORT_SUFFIX)


def _clear_report(verdict_file: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        report_path(verdict_file).unlink()


def _report(verdict_file: Path, sentence: str, *, now_iso: str) -> None:
    publish_text(
        report_path(verdict_file),
        f"{safe_text(sentence)}\n\nFix the file and save it again; this report disappears once the verdict is read.\n"
        f"(checked {now_iso})\n",
    )


def report_verdict_problem(verdict_file: Path, sentence: str, *, now_iso: str) -> bool:
    """The report beside a file of inbox/verdicts/ that cannot be taken in, unless one in these
    words is there already; whether it was written."""
    try:
        if report_path(verdict_file).read_text("utf-8").startswith(safe_text(sentence) + "\n"):
            return False
    except (OSError, UnicodeDecodeError):
        pass
    _report(verdict_file, sentence, now_iso=now_iso)
    return True


def ingest_verdict(
    path: Path,
    *,
    ledger: Ledger,
    store: Store | None,
    admission: Any,
    wiki_root: Path,
    now_iso: str,
    quiet: bool,
    signing: Signing,
) -> VerdictOutcome:
    """Read one verdict file in place. ``quiet``: the file has not changed for the quiet period.

    With its signature (``NAME.json.sig``) the file is one item: a signature made or replaced
    later is a new look at the same decision (the proof is added), never a second decision."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return VerdictOutcome(VerdictState.NOT_READY, "the file went away")
    try:
        sig: bytes | None = signature_path(path).read_bytes()
    except FileNotFoundError:
        sig = None
    content = hashlib.sha256(data).hexdigest()
    digest = content if sig is None else hashlib.sha256(data + b"\0" + sig).hexdigest()
    known = ledger.get(digest)
    if (
        known is not None
        and known.state == "failed"
        and report_path(path).exists()
        and _refusal_stands(known.detail or "", ledger, signing)
    ):
        # The same broken bytes, already reported: the report stands, nothing to rewrite (unless
        # the trust files or the policy it was refused under changed since, or the candidate it
        # named has been recorded since).
        return VerdictOutcome(VerdictState.ALREADY, known.error or "reported before")
    current = (
        ledger.records.latest_verdict(known.detail) if known is not None and known.detail else None
    )
    if (
        known is not None
        and known.state == "done"
        and (current is None or current.digest == content or current.name != path.name)
    ):
        # Read before, and either still the candidate's current verdict or superseded by another
        # file. Only the same file going back to earlier bytes (an editor's undo) is a new
        # decision; two files judging one candidate must not take turns at every rescan.
        _clear_report(path)
        return VerdictOutcome(VerdictState.ALREADY, f"{path.name} was read before", known.detail)
    try:
        verdict = parse_verdict(data, path.name)
    except VerdictError as exc:
        if not quiet:
            return VerdictOutcome(VerdictState.NOT_READY, str(exc))
        _report(path, str(exc), now_iso=now_iso)
        _failed(ledger, digest, path, str(exc), now_iso)
        return VerdictOutcome(VerdictState.REPORTED, str(exc))
    future = decided_in_the_future(
        verdict, data, path.name, now=datetime.fromisoformat(now_iso.replace("Z", "+00:00"))
    )
    if future is not None:
        _report(path, future, now_iso=now_iso)
        _failed(ledger, digest, path, future, now_iso)
        return VerdictOutcome(VerdictState.REPORTED, future, verdict.id)
    candidate = ledger.records.candidate(verdict.id)
    if candidate is None:
        sentence = (
            f"{path.name} field id: {verdict.id!r} names no candidate awaiting a verdict (runs write a "
            "template for each candidate the validator accepted); copy the id verbatim from a template "
            "in outbox/runs/<project>/<run>/verdicts/"
        )
        _report(path, sentence, now_iso=now_iso)
        _failed(ledger, digest, path, sentence, now_iso, stamp=f"{_AWAITING}{verdict.id}")
        return VerdictOutcome(VerdictState.REPORTED, sentence, verdict.id)

    previous = ledger.records.latest_verdict(verdict.id)
    if (
        sig is None
        and previous is not None
        and previous.digest == content
        and ledger.records.signature(content) is not None
    ):
        # Proven when it was read: a signature taken away afterwards changes nothing.
        _done(ledger, digest, path, verdict.id, now_iso)
        return VerdictOutcome(VerdictState.ALREADY, f"{path.name} was read before", verdict.id)
    try:
        at = datetime.fromisoformat(now_iso.replace("Z", "+00:00"))
        proof, unchecked = signing.prove(verdict, data, sig, path.name, at=at)
    except SignatureRefused as exc:
        sentence = f"{path.name}: {exc}"
        _report(path, sentence, now_iso=now_iso)
        _failed(ledger, digest, path, sentence, now_iso, stamp=signing.trust()[1])
        return VerdictOutcome(VerdictState.REPORTED, sentence, verdict.id)
    key = _key_of(candidate.key_json)
    if key is not None and key.candidate_id() != verdict.id:
        key = None  # an incomplete or foreign key: the verdict's own candidate summary decides
    promoted: Path | None = None
    retracted = False
    note: str | None = None
    try:
        # The wiki's files (page, index, log) are staged and made durable together at the
        # block's end, after the records' commit (each a file of its own, flushed one by one).
        with published_together():
            if verdict.approves:
                promoted = promote_verdict(
                    verdict,
                    wiki_root=wiki_root,
                    run_id=candidate.run_id,
                    at=now_iso,
                    key=key,
                    signed=proof,
                )
            elif previous is not None and previous.decision in APPROVALS:
                retracted = retract_verdict(
                    verdict.id,
                    wiki_root=wiki_root,
                    at=now_iso,
                    reason=f"the expert's edit of {path.name} withdrew the approval",
                )
            if store is not None:
                note = record_reasoning(store, admission, candidate, verdict, path, proof)
    except PromotionRefused as exc:
        sentence = f"{path.name}: {exc}"
        _report(path, sentence, now_iso=now_iso)
        _failed(ledger, digest, path, sentence, now_iso)
        return VerdictOutcome(VerdictState.REPORTED, sentence, verdict.id)
    # The verdict's history and its file's state: one commit, after the wiki and the records.
    with ledger.together():
        ledger.begin(digest, kind="verdict", name=path.name, now=now_iso)
        ledger.records.record_verdict(
            verdict.id, content, path.name, verdict.decision.value, now_iso
        )
        if proof is not None:
            ledger.records.record_signature(
                content,
                SignatureRow(
                    proof.principal, proof.fingerprint, proof.key_type, proof.namespace, now_iso
                ),
            )
        ledger.mark(digest, "done", now=now_iso, detail=verdict.id)
    _clear_report(path)
    message = f"{verdict.decision.value} by {verdict.reviewer}"
    if proof is not None:
        message += f", signed with {proof.fingerprint}"
    if unchecked:
        message += f"; {unchecked}"
    if note:
        message += f"; the reasoning record was refused: {note}"
    return VerdictOutcome(VerdictState.INGESTED, message, verdict.id, promoted, retracted)


_AWAITING = "awaiting:"
"""A refusal's stamp for a verdict that named no recorded candidate: a run may record it yet
(its folder is published before its candidates are settled into the ledger)."""


def _refusal_stands(stamp: str, ledger: Ledger, signing: Signing) -> bool:
    """Whether a verdict refused under ``stamp`` would be refused again for the same reason."""
    if stamp.startswith(_AWAITING):
        return ledger.records.candidate(stamp.removeprefix(_AWAITING)) is None
    return not stamp or stamp == signing.trust()[1]


def _done(ledger: Ledger, digest: str, path: Path, candidate_id: str, now_iso: str) -> None:
    with ledger.together():
        ledger.begin(digest, kind="verdict", name=path.name, now=now_iso)
        ledger.mark(digest, "done", now=now_iso, detail=candidate_id)


def _failed(
    ledger: Ledger, digest: str, path: Path, sentence: str, now_iso: str, stamp: str | None = None
) -> None:
    """``stamp``: the policy and trust files a signature was refused under (checked again when
    they change)."""
    with ledger.together():
        ledger.begin(digest, kind="verdict", name=path.name, now=now_iso)
        ledger.mark(digest, "failed", now=now_iso, error=sentence, detail=stamp)


def _key_of(key_json: str | None) -> CandidateKey | None:
    if not key_json:
        return None
    data = json.loads(key_json)
    return CandidateKey(
        project_id=data.get("project_id"),
        affected_codes=tuple(data.get("affected_codes") or ()),
        measure_type=data.get("measure_type"),
        saving_literal=data.get("saving_literal"),
        unit=data.get("unit"),
    )
