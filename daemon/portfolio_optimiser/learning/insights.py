"""Recall: structural retrieval, ExpeL-style insights, and the fold into the hypothesis prompt.

Decides: which verdicts relate to a project (:func:`similarity`, :func:`retrieve`) and which
sentences about them reach the hypothesis prompt, in which order, and how many. :func:`fold` is the
ONLY path from verdicts into a prompt (DESIGN §4 step 2): the bundle context never renders
``type: verdict`` pages, so what is not folded here is not learned.

The insight list follows ExpeL (research/method.md §1.1): ADD starts a rule at importance 2, EDIT
rewrites it and adds 1, AGREE adds 1, REMOVE subtracts 1 (3 when the list is full), and a rule that
reaches 0 is dropped; an ADD of a text already listed is dropped, an EDIT to a listed text is an
AGREE. The list holds at most :data:`MAX_INSIGHTS` rules, most important first. Where ExpeL asks a
model to choose the operations, :func:`derive_insights` applies fixed rules, so the same verdicts
always fold to the same bytes: no model, no clock, no randomness.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from typing import Final

from portfolio_optimiser._text import strip_control
from portfolio_optimiser.context.models import Project

from .verdict_store import CandidateKey, LearnedVerdict, VerdictStore

__all__ = [
    "ADD_IMPORTANCE",
    "MAX_INSIGHTS",
    "Insight",
    "InsightList",
    "derive_insights",
    "fold",
    "relevant",
    "retrieve",
    "similarity",
]

MAX_INSIGHTS: Final = 10  # ExpeL's paper runs used 10 rules (HotpotQA, ALFWorld)
ADD_IMPORTANCE: Final = 2
FULL_LIST_REMOVE: Final = 3  # ExpeL downvotes harder once the list is full
SENTENCE_CHARS: Final = 240
PRECEDENT_CHARS: Final = 600
FOLD_HEADING: Final = "## Learned from expert verdicts"
# Structural similarity: code overlap is worth up to 1; these are added on top of it.
MEASURE_TYPE_BONUS: Final = 0.5
SAME_PROJECT_BONUS: Final = 0.25

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


# --- structural retrieval -----------------------------------------------------------------------


def _code_closure(codes: Collection[str]) -> frozenset[str]:
    """Each code with its account prefixes: ``02.3`` → ``{02, 02.3}``, so ``02`` meets ``02.3``."""
    closure: set[str] = set()
    for code in codes:
        parts = code.split(".")
        closure.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return frozenset(closure)


def similarity(
    key: CandidateKey,
    project: Project,
    query_codes: Collection[str] | None = None,
    *,
    query_measure_types: Collection[str] | None = None,
) -> float:
    """Structural closeness of a verdict's key to a query; 0 means unrelated.

    Jaccard of the prefix-closed code sets (the query defaults to the project's cost-line codes),
    plus :data:`MEASURE_TYPE_BONUS` when the measure type is one the query has (default: the
    project's kuttliste types), plus :data:`SAME_PROJECT_BONUS` for a verdict on this project.
    """
    own = _code_closure(key.affected_codes)
    query = _code_closure(project.codes if query_codes is None else query_codes)
    union = own | query
    score = len(own & query) / len(union) if union else 0.0
    types = (
        {option.measure_type for option in project.measure_options}
        if query_measure_types is None
        else set(query_measure_types)
    )
    if key.measure_type is not None and key.measure_type in types:
        score += MEASURE_TYPE_BONUS
    if key.project_id is not None and key.project_id == project.id:
        score += SAME_PROJECT_BONUS
    return score


def relevant(
    store: VerdictStore, project: Project, *, query: CandidateKey | None = None
) -> list[LearnedVerdict]:
    """Current verdicts (any decision) with a similarity above 0, closest first, ties by id."""
    codes = None if query is None else query.affected_codes
    types: set[str] | None = None
    if query is not None:
        types = {query.measure_type} if query.measure_type else set()
    scored = [
        (similarity(v.key, project, codes, query_measure_types=types), v) for v in store.verdicts()
    ]
    ranked = sorted(
        (pair for pair in scored if pair[0] > 0), key=lambda p: (-p[0], p[1].candidate_id)
    )
    return [verdict for _, verdict in ranked]


def retrieve(
    store: VerdictStore, project: Project, k: int = 5, *, query: CandidateKey | None = None
) -> list[LearnedVerdict]:
    """The ``k`` approved verdicts most similar to the project (or to ``query``, a candidate)."""
    return [v for v in relevant(store, project, query=query) if v.approves][: max(k, 0)]


# --- insights -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Insight:
    """One rule: its text, how often evidence has backed it, and the verdicts behind it."""

    text: str
    importance: int
    sources: tuple[str, ...]
    topic: str = ""
    """What the rule is about (decision, measure type, codes), so later evidence finds it."""


class InsightList:
    """A bounded list of insights, most important first; rule numbers are positions in it."""

    def __init__(self, cap: int = MAX_INSIGHTS) -> None:
        self.cap = cap
        self._items: list[Insight] = []

    @property
    def items(self) -> list[Insight]:
        return list(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def find(self, topic: str) -> int | None:
        return next((i for i, item in enumerate(self._items) if item.topic == topic), None)

    def add(self, text: str, *, source: str, topic: str = "") -> bool:
        """ADD at importance 2. Refused when the text is listed, or the list is full of rules
        that evidence has backed (only a rule below 2 makes room). Returns whether it was added."""
        if any(item.text == text for item in self._items):
            return False
        if len(self._items) >= self.cap:
            if self._items[-1].importance >= ADD_IMPORTANCE:
                return False
            self._items.pop()
        self._items.append(Insight(text, ADD_IMPORTANCE, (source,), topic))
        self._settle()
        return True

    def edit(self, index: int, text: str, *, source: str) -> None:
        """EDIT: rewrite rule ``index`` and add 1; a text listed elsewhere makes it an AGREE."""
        if any(item.text == text for i, item in enumerate(self._items) if i != index):
            self.agree(index, source=source)
            return
        item = self._items[index]
        self._items[index] = replace(
            item, text=text, importance=item.importance + 1, sources=_with(item.sources, source)
        )
        self._settle()

    def agree(self, index: int, *, source: str) -> None:
        """AGREE: another piece of evidence backs rule ``index``."""
        item = self._items[index]
        self._items[index] = replace(
            item, importance=item.importance + 1, sources=_with(item.sources, source)
        )
        self._settle()

    def remove(self, index: int) -> None:
        """REMOVE: evidence against rule ``index``; it is dropped when its importance reaches 0."""
        step = FULL_LIST_REMOVE if len(self._items) >= self.cap else 1
        item = self._items[index]
        if item.importance - step <= 0:
            del self._items[index]
        else:
            self._items[index] = replace(item, importance=item.importance - step)
        self._settle()

    def _settle(self) -> None:
        # Stable: among equals the older rule stays first, so the order is reproducible.
        self._items.sort(key=lambda item: -item.importance)


def _with(sources: tuple[str, ...], source: str) -> tuple[str, ...]:
    return sources if source in sources else (*sources, source)


def _clean(text: str) -> str:
    """One line, no control sequences: an expert's text must not reshape the prompt."""
    return " ".join(strip_control(text).split())


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + " …"


def _first_sentence(text: str) -> str:
    cleaned = _clean(text)
    return _clip(_SENTENCE_END.split(cleaned, maxsplit=1)[0], SENTENCE_CHARS) if cleaned else ""


def _subject(key: CandidateKey) -> str:
    kind = key.measure_type or "an unstated type"
    codes = ", ".join(sorted(set(key.affected_codes))) or "unstated codes"
    return f"Measures of type {_clean(kind)} on codes {_clean(codes)}"


def _topic(verdict: LearnedVerdict, *, approves: bool) -> str:
    codes = ",".join(sorted(set(verdict.key.affected_codes)))
    return f"{'approved' if approves else 'rejected'}|{verdict.key.measure_type or ''}|{codes}"


def _realisation(verdict: LearnedVerdict) -> str:
    rate = verdict.realization_rate
    return "" if rate is None else str(rate)


def _reviewer(verdict: LearnedVerdict) -> str:
    return _clean(verdict.reviewer) or "an expert"


def _insight_text(verdict: LearnedVerdict) -> str:
    reason = _first_sentence(verdict.rationale)
    if not verdict.approves:
        because = f" because: {reason}" if reason else ""
        return f"{_subject(verdict.key)} were rejected by {_reviewer(verdict)}{because}"
    detail = []
    if verdict.adjusted_saving_nok is not None:
        detail.append(f"adjusted to NOK {verdict.adjusted_saving_nok}")
    if verdict.realization_rate is not None:
        detail.append(f"realisation {_realisation(verdict)}")
    detail.append(f"by {_reviewer(verdict)}")
    said = f": {reason}" if reason else ""
    return f"{_subject(verdict.key)} were approved ({', '.join(detail)}){said}"


def derive_insights(
    verdicts: Iterable[LearnedVerdict], *, cap: int = MAX_INSIGHTS
) -> list[Insight]:
    """Distil verdicts, in the order given, into a ranked insight list. The rules:

    * the first verdict on a (decision, measure type, codes) topic ADDs its rule;
    * a later one with the same realisation AGREEs; with a different one it EDITs the rule to say
      what the later verdict says;
    * a verdict of the opposite decision on the same measure type and codes REMOVEs (downvotes)
      the opposing rule first — ExpeL's compare pass of a success against a failure.
    """
    insights = InsightList(cap)
    realisations: dict[str, str] = {}
    for verdict in verdicts:
        mine = _topic(verdict, approves=verdict.approves)
        opposing = insights.find(_topic(verdict, approves=not verdict.approves))
        if opposing is not None:
            insights.remove(opposing)
        index = insights.find(mine)
        if index is None:
            if insights.add(_insight_text(verdict), source=verdict.candidate_id, topic=mine):
                realisations[mine] = _realisation(verdict)
        elif realisations.get(mine) == _realisation(verdict):
            insights.agree(index, source=verdict.candidate_id)
        else:
            insights.edit(index, _insight_text(verdict), source=verdict.candidate_id)
            realisations[mine] = _realisation(verdict)
    return insights.items


def _precedent(verdict: LearnedVerdict) -> str:
    key = verdict.key
    parts = [verdict.candidate_id, _subject(key).removeprefix("Measures of type ")]
    if key.saving_literal is not None:
        parts.append(f"claimed NOK {key.saving_literal}")
    parts.append(verdict.decision.value)
    if verdict.adjusted_saving_nok is not None:
        parts.append(f"adjusted to NOK {verdict.adjusted_saving_nok}")
    if verdict.realization_rate is not None:
        parts.append(f"realisation {_realisation(verdict)}")
    rationale = _clip(_clean(verdict.rationale), PRECEDENT_CHARS)
    return " · ".join(parts) + f" · {_reviewer(verdict)}: {rationale}"


def fold(
    store: VerdictStore, project: Project, *, query: CandidateKey | None = None, k: int = 3
) -> str:
    """The block that enters the hypothesis prompt, or ``""`` when nothing in the store relates.

    Insights come from every related verdict, approved or rejected; the ``k`` approved verdicts
    closest to the project (or to ``query``) follow in full as precedents, as ExpeL pairs its rule
    list with retrieved successes.
    """
    related = relevant(store, project, query=query)
    insights = derive_insights(sorted(related, key=lambda v: (v.decided_at or "", v.candidate_id)))
    precedents = retrieve(store, project, k, query=query)
    if not insights and not precedents:
        return ""
    lines = [
        FOLD_HEADING,
        "",
        "Insights from expert verdicts on similar measures, strongest first:",
    ]
    lines += ["", *(f"{n}. [{i.importance}] {i.text}" for n, i in enumerate(insights, 1))]
    if precedents:
        lines += ["", "Approved precedents, most similar first:", ""]
        lines += [f"- {_precedent(v)}" for v in precedents]
    return "\n".join(lines) + "\n"
