"""The transport contract: how an advisor is asked, how it fails, and how its answer is recorded.

Decides nothing about *whether* to ask (that is the plan). A :class:`Transport` is one exchange
with one advisor (in the pipeline: a proposer attempt, or a maker-checker debate, each reaching
the advisor through its adapter's chat client); everything above it sees only this module's
types. Errors are
typed by what the caller does next, and each carries the consultation status the breaker reads::

    AdvisorError (error)
    ├── AdvisorTimeout (timeout)            the deadline passed
    ├── AdvisorUnavailable (unavailable)    no answer came: refused connection, 5xx, not running
    ├── AdvisorRateLimited (rate_limited)   slow down; carries retry_after_s when the provider said
    ├── AdvisorAuthFailed (auth_failed)     the credential was refused
    ├── MalformedAnswer (malformed)         an answer came but cannot be read
    ├── EmptyAnswer (empty)                 an answer came with nothing in it
    ├── UnsupportedForm (unsupported)       a request form was refused (an output mode): not a failure
    └── ConsultationCancelled (cancelled)   we stopped asking

Every model call of the pipeline, proposer or checker, is one :func:`consult` of one or more
transports: nothing above this module catches a model's exceptions, because nothing here lets one
through. An exception an adapter did not type is an ``error`` outcome; an exception that is not
the advisor's doing (a budget refusal, named by the caller in ``passthrough``) is recorded as
``cancelled`` and then raised, so the run can stop on it.

The question names the subject and carries distilled evidence. Selected advisors are asked
concurrently (so none hears another's answer); results are recorded in plan order, not arrival order. Raw answers are not stored:
only the normalised fields.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, TypeAlias

from .availability import ConsultationStatus
from .catalogue import Catalogue
from .policy import Confidence
from .records import (
    ConsultationInput,
    Evidence,
    Stance,
    StoredPlan,
    StoredRecord,
    Usage,
)
from .store import Admission, Refusal, Store

__all__ = [
    "AdvisorAuthFailed",
    "AdvisorError",
    "AdvisorRateLimited",
    "AdvisorTimeout",
    "AdvisorUnavailable",
    "Answer",
    "ConsultationCancelled",
    "EmptyAnswer",
    "MalformedAnswer",
    "Question",
    "Transport",
    "UnsupportedForm",
    "consult",
    "diagnostic_of",
]


class AdvisorError(Exception):
    status: ClassVar[ConsultationStatus] = ConsultationStatus.ERROR

    def __init__(self, advisor: str, message: str) -> None:
        super().__init__(f"{advisor}: {message}")
        self.advisor = advisor
        self.message = message
        self.refused: tuple[str, ...] = ()
        """Request forms refused earlier in the same exchange (``feature=value``)."""
        self.output_mode: str | None = None


class AdvisorTimeout(AdvisorError):
    status = ConsultationStatus.TIMEOUT


class AdvisorUnavailable(AdvisorError):
    status = ConsultationStatus.UNAVAILABLE


class AdvisorRateLimited(AdvisorError):
    status = ConsultationStatus.RATE_LIMITED

    def __init__(self, advisor: str, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(advisor, message)
        self.retry_after_s = retry_after_s


class AdvisorAuthFailed(AdvisorError):
    status = ConsultationStatus.AUTH_FAILED


class MalformedAnswer(AdvisorError):
    status = ConsultationStatus.MALFORMED


class EmptyAnswer(AdvisorError):
    status = ConsultationStatus.EMPTY


class ConsultationCancelled(AdvisorError):
    status = ConsultationStatus.CANCELLED


class UnsupportedForm(AdvisorError):
    """The advisor refused the form of the request (``feature``), not the question."""

    status = ConsultationStatus.UNSUPPORTED

    def __init__(self, advisor: str, message: str, *, feature: str) -> None:
        super().__init__(advisor, message)
        self.feature = feature


@dataclass(frozen=True)
class Question:
    subject: str
    hypothesis: str
    evidence: tuple[Evidence, ...] = ()
    """The facts gathered before anyone was asked; recorded with each answer."""


@dataclass(frozen=True)
class Answer:
    stance: Stance
    conclusion: str
    assumptions: tuple[str, ...] = ()
    risks: tuple[str, ...] = ()
    falsifiers: tuple[str, ...] = ()
    confidence: Confidence | None = None
    usage: Usage = field(default_factory=Usage)
    reasons: tuple[str, ...] = ()
    output_mode: str | None = None
    refused: tuple[str, ...] = ()
    server: str | None = None
    """The build the server said it runs (``system_fingerprint``), if it said one."""


class Transport(Protocol):
    """One advisor reached through one adapter."""

    async def exchange(self, question: Question, *, deadline_s: float) -> Answer: ...


Outcome: TypeAlias = tuple[Answer | None, AdvisorError | None, int, BaseException | None]
"""(answer, typed error, duration in ms, an exception to raise once everything is recorded)."""


async def _ask(
    advisor: str,
    transport: Transport,
    question: Question,
    deadline_s: float,
    passthrough: tuple[type[BaseException], ...],
) -> Outcome:
    started = time.monotonic()
    try:
        answer = await asyncio.wait_for(
            transport.exchange(question, deadline_s=deadline_s), timeout=deadline_s
        )
        if not isinstance(answer, Answer):
            raise AdvisorError(
                advisor, f"its adapter returned {type(answer).__name__}, not an answer"
            )
        return answer, None, _ms(started), None
    except AdvisorError as exc:
        return None, exc, _ms(started), None
    except TimeoutError:
        return (
            None,
            AdvisorTimeout(advisor, f"no answer within {deadline_s:g} s"),
            int(deadline_s * 1000),
            None,
        )
    except passthrough as exc:  # not the advisor's doing: recorded as cancelled, raised after
        stopped = ConsultationCancelled(advisor, f"stopped before an answer: {exc}")
        return None, stopped, _ms(started), exc
    except Exception as exc:  # an adapter bug must not take the run down: it is an error outcome
        return None, AdvisorError(advisor, f"{type(exc).__name__}: {exc}"), _ms(started), None


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


async def consult(
    store: Store,
    task: str,
    plan_record: StoredRecord,
    question: Question,
    ctx: Admission,
    *,
    deadline_s: float,
    transports: Mapping[str, Transport],
    passthrough: tuple[type[BaseException], ...] = (),
) -> list[StoredRecord]:
    """Ask every advisor the plan selected, concurrently; record each result in plan order.

    ``transports`` gives the exchange for each advisor (a proposer attempt, a debate); a selected
    advisor without one is recorded as unavailable. Raises only what ``passthrough`` names
    (after recording every result) and ``CancelledError``.
    """
    plan = plan_record.body
    assert isinstance(plan, StoredPlan)
    catalogue: Catalogue = ctx.catalogue
    chosen: Sequence[str] = [s.advisor for s in plan.selected]
    resolved: dict[str, Transport | AdvisorError] = {}
    for advisor_id in chosen:
        if advisor_id in transports:
            resolved[advisor_id] = transports[advisor_id]
        elif catalogue.get(advisor_id) is None:
            resolved[advisor_id] = AdvisorUnavailable(advisor_id, "is no longer in the catalogue")
        else:
            resolved[advisor_id] = AdvisorUnavailable(advisor_id, "no exchange was given for it")

    async def run(advisor_id: str) -> Outcome:
        target = resolved[advisor_id]
        if isinstance(target, AdvisorError):
            return None, target, 0, None
        return await _ask(advisor_id, target, question, deadline_s, passthrough)

    def model_of(advisor_id: str) -> str | None:
        advisor = catalogue.get(advisor_id)
        return advisor.model if advisor is not None else None

    try:
        results = await asyncio.gather(*(run(a) for a in chosen))
    except asyncio.CancelledError:
        # We stopped asking (shutdown): say so in the records, then let the cancellation go on.
        for advisor_id in chosen:
            stopped = ConsultationCancelled(advisor_id, "the consultation was cancelled")
            draft = _consultation(
                plan_record.id, advisor_id, model_of(advisor_id), question, None, stopped, 0
            )
            store.record(task, draft, ctx)
        raise
    written = []
    for advisor_id, (answer, error, duration_ms, _raise) in zip(chosen, results, strict=True):
        draft = _consultation(
            plan_record.id, advisor_id, model_of(advisor_id), question, answer, error, duration_ms
        )
        try:
            written.append(await store.arecord(task, draft, ctx))
        except Refusal as refusal:
            # An answer the store will not keep (a private key in it, say) is no answer: it is
            # recorded as malformed with the store's sentence, and the run goes on without it.
            unusable = MalformedAnswer(advisor_id, f"the answer cannot be recorded: {refusal}")
            draft = _consultation(
                plan_record.id,
                advisor_id,
                model_of(advisor_id),
                question,
                None,
                unusable,
                duration_ms,
            )
            written.append(await store.arecord(task, draft, ctx))
    for *_, pending in results:
        if pending is not None:
            raise pending
    return written


def _consultation(
    plan_id: str,
    advisor: str,
    model: str | None,
    question: Question,
    answer: Answer | None,
    error: AdvisorError | None,
    duration_ms: int,
) -> ConsultationInput:
    asked = f"Subject: {question.subject}"
    if answer is not None:
        return ConsultationInput(
            plan=plan_id,
            advisor=advisor,
            status=ConsultationStatus.COMPLETED,
            question=asked,
            stance=answer.stance,
            conclusion=answer.conclusion,
            assumptions=answer.assumptions,
            risks=answer.risks,
            falsifiers=answer.falsifiers,
            evidence=question.evidence,
            confidence=answer.confidence,
            usage=answer.usage,
            duration_ms=duration_ms,
            model=model,
            reasons=answer.reasons,
            output_mode=answer.output_mode,
            refused=answer.refused,
            server=answer.server,
        )
    assert error is not None
    return ConsultationInput(
        plan=plan_id,
        advisor=advisor,
        status=error.status,
        question=asked,
        duration_ms=duration_ms,
        diagnostic=diagnostic_of(error),
        retry_after_seconds=getattr(error, "retry_after_s", None),
        model=model,
        output_mode=error.output_mode,
        refused=error.refused,
    )


def diagnostic_of(error: AdvisorError) -> str | None:
    """One line: the last line of the error's message, bounded."""
    text = error.message.strip()
    return " ".join(text.splitlines()[-1].split())[:500] if text else None
