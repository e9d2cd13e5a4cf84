"""The transport contract: how an advisor is asked, how it fails, and how its answer is recorded.

Decides nothing about *whether* to ask (that is the plan). One adapter module per transport
implements :class:`Transport`; everything above it sees only this module's types. Errors are
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

The question carries distilled evidence and marks the run's own hypothesis and any earlier
advisor's answer as opinions (``prior_external_opinion``), never facts, and asks for the strongest
counter-argument, the hidden assumptions and an experiment that would refute the hypothesis.
Selected advisors are asked concurrently; results are recorded in plan order, not arrival order.
Raw answers are not stored: only the normalised fields.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeAlias

from .availability import ConsultationStatus
from .catalogue import Advisor, Catalogue
from .policy import Confidence
from .records import (
    ConsultationInput,
    Evidence,
    EvidenceKind,
    Stance,
    StoredPlan,
    StoredRecord,
    Usage,
)
from .store import Admission, Store

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
    "load_transport",
    "parse_answer",
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
    prior_opinions: tuple[tuple[str, str], ...] = ()
    """(source, opinion) pairs from earlier advisors: handed on as opinions, never as facts."""

    def evidence_with_opinions(self) -> tuple[Evidence, ...]:
        return self.evidence + tuple(
            Evidence(kind=EvidenceKind.PRIOR_EXTERNAL_OPINION, reference=source, note=opinion)
            for source, opinion in self.prior_opinions
        )

    def text(self) -> str:
        lines = [f"Subject: {self.subject}", "", "Evidence (facts you may check):"]
        lines += [
            f"- [{e.kind}] {e.reference}" + (f": {e.note}" if e.note else "") for e in self.evidence
        ] or ["- none"]
        lines += [
            "",
            f"The executor's hypothesis (an opinion, not a fact): {self.hypothesis or '(none stated)'}",
        ]
        for source, opinion in self.prior_opinions:
            lines.append(
                f"An earlier advisor's answer (prior_external_opinion from {source}; an opinion, not a fact): {opinion}"
            )
        lines += [
            "",
            "Give the strongest counter-argument to the hypothesis, the hidden assumptions it rests on, "
            "and the smallest experiment that would refute it. Answer in JSON with the keys stance "
            "(supports, opposes, alternative or inconclusive), conclusion, assumptions, risks, "
            "falsifiers and confidence (low, medium or high).",
        ]
        return "\n".join(lines)


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
    payload: Any = None
    """What the caller asked for beyond the normalised fields (a proposal); never recorded."""


class Transport(Protocol):
    """One advisor reached through one adapter."""

    async def exchange(self, question: Question, *, deadline_s: float) -> Answer: ...


def load_transport(advisor: Advisor) -> Transport:
    """The adapter module named by the advisor (``module``), else the package's adapter for its transport."""
    name = (
        advisor.module
        or f"portfolio_optimiser.pipeline.clients.{advisor.adapter.replace('-', '_')}"
    )
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise AdvisorUnavailable(
            advisor.id, f"adapter module {name} cannot be imported ({exc})"
        ) from None
    factory = getattr(module, "transport_for", None)
    if factory is None:
        raise AdvisorUnavailable(advisor.id, f"adapter module {name} has no transport_for(advisor)")
    transport: Transport = factory(advisor)
    return transport


_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


def parse_answer(advisor: str, text: str, usage: Usage | None = None) -> Answer:
    """Normalise an advisor's text into consultation fields; typed errors when it cannot be."""
    if not text or not text.strip():
        raise EmptyAnswer(advisor, "the answer was empty")
    fenced = _FENCED.search(text)
    candidate = fenced.group(1) if fenced else text[text.find("{") : text.rfind("}") + 1]
    try:
        data: Any = json.loads(candidate)
    except ValueError:
        raise MalformedAnswer(
            advisor, "the answer is not the JSON object that was asked for"
        ) from None
    if not isinstance(data, dict):
        raise MalformedAnswer(advisor, "the answer is not a JSON object")
    try:
        stance = Stance(str(data.get("stance", "")).strip().lower())
    except ValueError:
        raise MalformedAnswer(
            advisor,
            f"stance {data.get('stance')!r} is not one of supports, opposes, alternative, inconclusive",
        ) from None
    conclusion = str(data.get("conclusion") or "").strip()
    if not conclusion:
        raise EmptyAnswer(advisor, "the answer has no conclusion")

    def strings(key: str) -> tuple[str, ...]:
        value = data.get(key) or ()
        return tuple(str(v) for v in value) if isinstance(value, list) else (str(value),)

    confidence = str(data.get("confidence") or "").strip().lower()
    return Answer(
        stance=stance,
        conclusion=conclusion,
        assumptions=strings("assumptions"),
        risks=strings("risks"),
        falsifiers=strings("falsifiers"),
        confidence=Confidence(confidence)
        if confidence in Confidence.__members__.values()
        else None,
        usage=usage or Usage(),
    )


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
    transports: Mapping[str, Transport] | None = None,
    passthrough: tuple[type[BaseException], ...] = (),
) -> list[StoredRecord]:
    """Ask every advisor the plan selected, concurrently; record each result in plan order.

    ``transports`` gives the exchange for an advisor (a proposer attempt, a debate); an advisor
    without one is asked through its adapter's ``transport_for``. Raises only what
    ``passthrough`` names (after recording every result) and ``CancelledError``.
    """
    plan = plan_record.body
    assert isinstance(plan, StoredPlan)
    catalogue: Catalogue = ctx.catalogue
    chosen: Sequence[str] = [s.advisor for s in plan.selected]
    resolved: dict[str, Transport | AdvisorError] = {}
    for advisor_id in chosen:
        if transports and advisor_id in transports:
            resolved[advisor_id] = transports[advisor_id]
            continue
        advisor = catalogue.get(advisor_id)
        try:
            if advisor is None:
                raise AdvisorUnavailable(advisor_id, "is no longer in the catalogue")
            resolved[advisor_id] = load_transport(advisor)
        except AdvisorError as exc:
            resolved[advisor_id] = exc
        except Exception as exc:  # an adapter that cannot even be built is that advisor's error
            resolved[advisor_id] = AdvisorError(
                advisor_id, f"its adapter failed to start: {type(exc).__name__}: {exc}"
            )

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
        written.append(await asyncio.to_thread(store.record, task, draft, ctx))
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
    asked = question.text().split("\n", 1)[0]
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
            evidence=question.evidence_with_opinions(),
            confidence=answer.confidence,
            usage=answer.usage,
            duration_ms=duration_ms,
            model=model,
            reasons=answer.reasons,
            output_mode=answer.output_mode,
            refused=answer.refused,
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
