"""The portfolio's compact index (issue 19): a start reads the ledger's index of the ingested
projects, not every bundle, and gets the same reference classes as reading them all; a project
whose folder was replaced is read again, one gone is dropped; the index reads back what was kept
and leaves out a row that does not read; the classes kept one project at a time (their members,
their arrays for the fit, their digests) are the classes built afresh. Their pages:
``test_reference_pages.py``."""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import structlog

from portfolio_optimiser.config import load_config
from portfolio_optimiser.context import reference_classes
from portfolio_optimiser.context.fit_lines import Lines
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.context.reference import (
    Comparable,
    ProjectPrices,
    ReferenceIndex,
    ReferenceRule,
)
from portfolio_optimiser.context.reference_classes import Places, ReferenceClasses
from portfolio_optimiser.daemon import ingested, references
from portfolio_optimiser.daemon.ledger import Ledger
from portfolio_optimiser.daemon.portfolio import Portfolio
from portfolio_optimiser.daemon.workspace import Workspace

from .synthetic_ns3451 import generate_ns3451

NOW = 1_796_601_600.0
"""When the tests' reference fits are published (2026-12-07, UTC)."""

LOG = structlog.get_logger("test")
ENV = {"PORTFOLIO_OPTIMISER_REASONING_MODE": "ci"}


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    workspace = Workspace.at(tmp_path / "ws", environ={})
    workspace.ensure()
    for project in generate_ns3451(11, 12).projects:
        project.write(workspace.bundles_projects / project.project_id)
    return workspace


class Reads:
    """Counts the bundles a portfolio reads in full."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.folders: list[str] = []
        real = ingested.load_ir_projections

        def counted(folder: Path, *args: Any, **kwargs: Any) -> Any:
            self.folders.append(folder.name)
            return real(folder, *args, **kwargs)

        monkeypatch.setattr(ingested, "load_ir_projections", counted)


def _everything(ws: Workspace) -> ReferenceIndex:
    return ReferenceIndex.of(
        load_ir_projections(folder) for folder in sorted(ws.bundles_projects.iterdir())
    )


def _started(ws: Workspace, ledger: Ledger) -> Portfolio:
    """What a start and its first quiet step do: a new process's portfolio, its classes
    rebuilt, their pages written."""
    portfolio = Portfolio.of(ws, load_config(), ledger, LOG)
    portfolio.rebuild(NOW)
    portfolio.fit.publish_pages()
    return portfolio


@pytest.mark.loadbearing
def test_a_start_reads_the_index_not_the_bundles_and_gets_the_same_classes(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = Reads(monkeypatch)
    with Ledger.open(ws.ledger_file) as ledger:
        first = _started(ws, ledger)
        assert len(reads.folders) == 12, "the first start reads every bundle once"
        pages = {p.name: p.stat().st_mtime_ns for p in ws.references.glob("*.md")}
        reads.folders.clear()
        rendered: list[str] = []
        real_render = references._render

        def render(code: str, *args: Any) -> str:
            rendered.append(code)
            return real_render(code, *args)

        monkeypatch.setattr(references, "_render", render)
        again = _started(ws, ledger)
        assert reads.folders == [], "a start read bundles the index holds"
        assert again.fit.references().classes == _everything(ws).classes
        assert again.fit.references().classes == first.fit.references().classes
        assert rendered == [], "an unchanged portfolio rendered its class pages again"
        assert {p.name: p.stat().st_mtime_ns for p in ws.references.glob("*.md")} == pages
        assert again.ingested.ids() == sorted(p.name for p in ws.bundles_projects.iterdir())
        lost = ws.references / "23_m2.md"
        lost.unlink()  # taken away by hand: the next start puts it back
        _started(ws, ledger)
        assert lost.is_file()


@pytest.mark.loadbearing
def test_a_replaced_project_is_read_again_and_a_gone_one_dropped(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    reads = Reads(monkeypatch)
    with Ledger.open(ws.ledger_file) as ledger:
        _started(ws, ledger)
        [replaced, gone, *_] = sorted(ws.bundles_projects.iterdir())
        # A revised version settles by a rename into place: a new folder, with other prices.
        staged = tmp_path / "revised"
        shutil.copytree(replaced, staged)
        line = next(staged.glob("cost/*.md"))
        text = line.read_text("utf-8")
        line.write_text(text.replace("unit_price_nok: ", "unit_price_nok: 1"), "utf-8")
        shutil.rmtree(replaced)
        staged.rename(replaced)
        shutil.rmtree(gone)
        reads.folders.clear()
        portfolio = _started(ws, ledger)
        assert reads.folders == [replaced.name]
        assert portfolio.fit.references().classes == _everything(ws).classes
        assert gone.name not in ledger.ingested.all()
        assert gone.name not in portfolio.ingested.ids()


def _places(rows: Iterable[tuple[str, str]]) -> Places:
    """Rendered members as a class keeps them: what each place says, a list a place."""
    places: Places = ([], [])
    for row in rows:
        for place, said in zip(places, row, strict=True):
            place.append(said)
    return places


def _prices(rng: random.Random, project_id: str) -> ProjectPrices:
    codes = rng.sample(["21", "22", "23", "24", "25"], rng.randint(0, 4))
    return ProjectPrices(
        project_id,
        rng.choice([None, "school", "office"]),
        tuple((code, "m2", float(rng.randint(1, 9) * 100), f"cost/{code}.md") for code in codes),
    )


def _afresh(portfolio: dict[str, ProjectPrices]) -> ReferenceIndex:
    """The classes of the whole portfolio in one pass: each class's comparables in project
    order, folders of one project id in folder order."""
    found: dict[tuple[str, str], list[tuple[tuple[str, str], Comparable]]] = {}
    for folder, project in portfolio.items():
        for compared_as, unit, price, source in project.classes:
            comparable = Comparable(project.project_id, source, price, project.category)
            found.setdefault((compared_as, unit), []).append(
                ((project.project_id, folder), comparable)
            )
    return ReferenceIndex(
        {key: tuple(c for _order, c in sorted(found[key])) for key in sorted(found)},
        ReferenceRule(),
    )


def _same_lines(kept: ReferenceIndex, afresh: ReferenceIndex) -> None:
    """The fit's arrays joined from the columns the classes kept are the arrays taken apart
    afresh, project and category by name (their numbers are the fit's own), and so is the fit."""
    assert kept.columns is not None
    ours, theirs = kept.columns.lines(), Lines.of(afresh.classes.values())
    for lines in (ours, theirs):  # numbered densely among those present
        assert sorted(set(lines.project.tolist())) == list(range(len(lines.project_ids)))
    assert [ours.project_ids[p] for p in ours.project] == [
        theirs.project_ids[p] for p in theirs.project
    ]
    assert [ours.categories[c] if c >= 0 else None for c in ours.category] == [
        theirs.categories[c] if c >= 0 else None for c in theirs.category
    ]
    for name in ("klass", "price", "log_price", "last"):
        assert getattr(ours, name).tolist() == getattr(theirs, name).tolist(), name
    fitted, refitted = kept.fit.entries(), afresh.fit.entries()
    for name in ("centre", "compared", "spread", "exact_spread"):
        assert np.array_equal(getattr(fitted, name), getattr(refitted, name), equal_nan=True)
    for project, p in fitted.project_index.items():
        q = refitted.project_index[project]
        assert (fitted.level_a[p], fitted.level_b[p]) == (refitted.level_a[q], refitted.level_b[q])


@pytest.mark.parametrize("seed", range(20))
def test_classes_kept_one_project_at_a_time_are_the_classes_built_afresh(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Members placed one by one (a project moved), or sorted in at once (a start): both paths.
    monkeypatch.setattr(reference_classes, "FEW_MOVES", seed % 3)
    rng = random.Random(seed)

    def render(c: Comparable) -> tuple[str, str]:
        return c.project_id, repr(c)

    classes, portfolio = ReferenceClasses(ReferenceRule(), render), {}
    for _ in range(30):
        for folder in rng.sample([f"f{i}" for i in range(8)], rng.randint(1, 3)):
            if rng.random() < 0.25:
                portfolio.pop(folder, None)
            else:  # a folder's project id may repeat in another folder: two comparables
                portfolio[folder] = _prices(rng, f"p{rng.randrange(6)}")
        before = classes.index().classes
        moved = classes.update(dict(portfolio))
        afresh = _afresh(portfolio)
        assert classes.index().classes == afresh.classes
        _same_lines(classes.index(), afresh)
        for key in rng.sample(sorted(afresh.classes), rng.randint(0, len(afresh.classes))):
            # Kept as members join and leave once asked for: the class's rendering afresh.
            assert classes.rendered(key) == _places([render(c) for c in afresh.classes[key]])
        built_once = ReferenceClasses(ReferenceRule())
        built_once.update(dict(portfolio))
        assert classes.digest() == built_once.digest()  # kept, not recomputed: the same
        for key in rng.sample(sorted(afresh.classes), rng.randint(0, len(afresh.classes))):
            # Summed when first asked for, then kept as members join and leave: the same.
            assert classes.class_digest(key) == built_once.class_digest(key)
        assert {
            k for k in set(before) | set(afresh.classes) if before.get(k) != afresh.classes.get(k)
        } <= moved


def test_the_compact_index_reads_back_what_was_kept_and_skips_a_row_that_does_not_read(
    ws: Workspace,
) -> None:
    """The ledger's row of a project reads back as the prices it was kept from (every word and
    figure); a row damaged by hand or written otherwise is left out (its folder is read again),
    whatever is wrong with it, and the rows beside it read."""
    with Ledger.open(ws.ledger_file) as ledger:
        _started(ws, ledger)
        kept = {
            folder.name: ProjectPrices.of(load_ir_projections(folder))
            for folder in ws.bundles_projects.iterdir()
        }
        read = ledger.ingested.all()
        assert {name: row.prices for name, row in read.items()} == kept
        [first, *_] = sorted(read)
        good = json.loads(_kept_prices(ws, first))
        damaged = {
            "not JSON": "{",
            "a code that is a number": {**good, "classes": [[21, *good["classes"][0][1:]]]},
            "a post's code that is a number": {**good, "posts": [[21, *good["posts"][0][1:]]]},
            "a row of three": {**good, "posts": [p[:3] for p in good["posts"]]},
            "rows of two widths": {**good, "posts": [good["posts"][0][:4], *good["posts"][1:]]},
            "a price that is a word": {**good, "posts": [[*good["posts"][0][:3], "x", 1.0]]},
            "no size": {k: v for k, v in good.items() if k != "size"},
        }
        for why, prices in damaged.items():
            text = prices if isinstance(prices, str) else json.dumps(prices)
            with sqlite3.connect(ws.ledger_file) as db:
                db.execute("UPDATE ingested SET prices = ? WHERE folder = ?", (text, first))
            again = ledger.ingested.all()
            assert first not in again, why
            assert len(again) == len(read) - 1, why
        unpriced = {"classes": [], "posts": [], "size": 0.0}  # a project with no priced line
        with sqlite3.connect(ws.ledger_file) as db:
            db.execute(
                "UPDATE ingested SET prices = ? WHERE folder = ?", (json.dumps(unpriced), first)
            )
        assert ledger.ingested.all()[first].prices.classes == ()


def _kept_prices(ws: Workspace, folder: str) -> str:
    with sqlite3.connect(ws.ledger_file) as db:
        [(prices,)] = db.execute("SELECT prices FROM ingested WHERE folder = ?", (folder,))
    return str(prices)


def test_the_classes_digest_moves_with_anything_a_class_holds() -> None:
    """What tells a start whether the pages hold the classes: any change to a comparable (its
    project, source, price or category) or to which folder holds a project moves it."""
    base = ProjectPrices("p-1", "school", (("23", "m2", 1200.0, "cost/23.md"),))
    variants = [
        ("f1", base),
        ("f2", base),
        ("f1", dataclasses.replace(base, project_id="p-2")),
        ("f1", dataclasses.replace(base, category="office")),
        ("f1", dataclasses.replace(base, category=None)),
        ("f1", dataclasses.replace(base, classes=(("23", "m2", 1200.5, "cost/23.md"),))),
        ("f1", dataclasses.replace(base, classes=(("23", "m2", 1200.0, "cost/24.md"),))),
        ("f1", dataclasses.replace(base, classes=(("23", "m3", 1200.0, "cost/23.md"),))),
    ]
    digests = []
    for folder, prices in variants:
        classes = ReferenceClasses(ReferenceRule())
        classes.update({folder: prices, "other": ProjectPrices("p-9", None, ())})
        digests.append(classes.digest())
    assert len(set(digests)) == len(variants)


def test_the_look_at_the_reruns_pauses_before_each_projects_arrays_and_at_each_project(
    ws: Workspace,
) -> None:
    """The reruns' look lets a verdict taken in meanwhile go first (``ingested.pause``) before
    each project's posts are made arrays and again at each project it decides: a start's first
    look makes every project's arrays."""
    with Ledger.open(ws.ledger_file) as ledger:
        portfolio = Portfolio.of(ws, load_config(), ledger, LOG)
        portfolio.rebuild(NOW)
        pauses: list[int] = []
        portfolio.ingested.pause = lambda: pauses.append(1)
        n = len(list(ws.bundles_projects.iterdir()))
        portfolio.due(ledger)
        assert len(pauses) == 2 * n
