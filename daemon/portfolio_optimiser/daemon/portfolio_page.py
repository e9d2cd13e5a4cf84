"""``outbox/portfolio.md``, kept: its one writer in a process, whichever thread's event it is.

Decides: what an event changes on the page, and what it reads to know. The page is built once
from the ledger — each project's latest run with the candidates the ledger keeps beside it, and
the verdicts as the learning fold gives them — and then changed, never rebuilt: a settled run
replaces the lines of the projects whose latest run moved (and the verdicts the fold now gives
otherwise); an ingested verdict changes its one candidate. A run recorded before the ledger kept
its candidates is read from its ``proposals.json`` once and recorded. A lock keeps one event at
a time on the page: a verdict taken in while a run is in hand comes from another thread, with
its own connection to the ledger.
"""

from __future__ import annotations

import threading
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from portfolio_optimiser._atomic import publish_text
from portfolio_optimiser.learning import LearnedVerdict
from portfolio_optimiser.outputs.portfolio import (
    SVG_NAME,
    PageCandidate,
    PageFrame,
    PageOutcome,
    PageVerdict,
    PortfolioBook,
    page_json,
    read_lines,
)
from portfolio_optimiser.outputs.proposals import ProposalsError, read_proposals

from .ledger import Ledger
from .ledger_records import ProjectPage
from .runner import current_verdict
from .workspace import Workspace

if TYPE_CHECKING:
    from .portfolio import Portfolio

__all__ = ["PortfolioPage", "page_of"]


def page_of(folder: Path, log: Any) -> str | None:
    """A published run's candidates as the ledger keeps them for the page; None (and said) when
    its ``proposals.json`` does not read — the page then reads it again when it is next built."""
    try:
        return page_json(read_proposals(folder / "proposals.json"))
    except (OSError, ProposalsError) as exc:
        log.warning("run left out of the portfolio report", run=str(folder), problem=str(exc))
        return None


def _page_verdict(learned: LearnedVerdict | None) -> PageVerdict | None:
    if learned is None:
        return None
    adjusted, rate = learned.adjusted_saving_nok, learned.realization_rate
    return PageVerdict(
        learned.decision.value,
        None if adjusted is None else Decimal(str(adjusted)),
        None if rate is None else Decimal(str(rate)),
    )


class PortfolioPage:
    def __init__(self, workspace: Workspace, portfolio: Portfolio, log: Any) -> None:
        self.workspace, self.portfolio, self.log = workspace, portfolio, log
        self._lock = threading.Lock()
        self._book: PortfolioBook | None = None
        self._runs: dict[str, str] = {}
        """The run each project's lines in the book come from."""
        self._thin: tuple[object, list[tuple[str, str, int]]] = (None, [])
        self._svg = ""

    def publish(self, ledger: Ledger, *, stamp: str, verdict: str | None = None) -> Path:
        """The page after an event: a run settled (``verdict`` None), or the verdict on this
        candidate was taken in. ``ledger`` is the calling thread's connection."""
        with self._lock:
            if self._book is None:
                self._book = self._built(ledger)
            elif verdict is None:
                self._after_runs(self._book, ledger)
            else:
                found = _page_verdict(current_verdict(self.workspace, ledger, verdict, self.log))
                self._book.set_verdict(verdict, found)
            text, svg = self._book.render(thin=self._thin_classes(), stamp=stamp)
            outbox = self.workspace.outbox
            if svg != self._svg or not (outbox / SVG_NAME).is_file():
                publish_text(outbox / SVG_NAME, svg)
                self._svg = svg
            publish_text(outbox / "portfolio.md", text)
            return outbox / "portfolio.md"

    def _built(self, ledger: Ledger) -> PortfolioBook:
        pages = ledger.records.project_pages()
        self._runs = {page.project_id: page.run_id for page in pages}
        lines = {page.project_id: self._lines(ledger, page) for page in pages}
        return PortfolioBook.of(
            (c for candidates, _outcome, _frame in lines.values() for c in candidates),
            projects=self.portfolio.fit.project_ids(),
            verdicts=self._folded(ledger),
            outcomes={p: outcome for p, (_c, outcome, _f) in lines.items() if outcome is not None},
            frames={p: frame for p, (_c, _o, frame) in lines.items() if frame is not None},
        )

    def _after_runs(self, book: PortfolioBook, ledger: Ledger) -> None:
        """The projects whose latest run moved, and every verdict the fold now gives otherwise
        (a file taken away or edited since it was read counts no more, as in a run)."""
        moved = [
            p for p, run_id in ledger.records.latest_runs().items() if self._runs.get(p) != run_id
        ]
        for page in ledger.records.project_pages(moved):
            book.replace(page.project_id, *self._lines(ledger, page))
            self._runs[page.project_id] = page.run_id
        folded = self._folded(ledger)
        for candidate_id in sorted(set(folded) | set(book.verdicts)):
            if folded.get(candidate_id) != book.verdicts.get(candidate_id):
                book.set_verdict(candidate_id, folded.get(candidate_id))
        book.set_projects(self.portfolio.fit.project_ids())

    def _folded(self, ledger: Ledger) -> dict[str, PageVerdict]:
        store = self.portfolio.verdicts(ledger)
        return {v.candidate_id: page for v in store.verdicts() if (page := _page_verdict(v))}

    def _lines(
        self, ledger: Ledger, page: ProjectPage
    ) -> tuple[list[PageCandidate], PageOutcome | None, PageFrame | None]:
        """A project's candidates on the page, its outcome if it is finished, and what its
        frame flags."""
        text = page.candidates
        if text is None:  # a run recorded before the ledger kept its page: read once, kept
            text = page_of(Path(page.folder), self.log)
            if text is None:
                return [], None, None
            ledger.records.record_project_page(page.project_id, page.run_id, text)
        try:
            return read_lines(text, page.project_id, page.run_id)
        except (ValueError, KeyError, TypeError, ArithmeticError) as exc:
            self.log.warning(
                "run left out of the portfolio report", run=page.folder, problem=str(exc)
            )
            return [], None, None

    def _thin_classes(self) -> list[tuple[str, str, int]]:
        """The thin classes of the index as last published (counted once per index)."""
        index = self.portfolio.fit.references()
        if self._thin[0] is not index:
            self._thin = (index, index.thin())
        return self._thin[1]
