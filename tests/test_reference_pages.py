"""The reference classes' pages (``bundles/reference/``): their comparables read back as they
were published, whatever their size or text, and a page that does not read is skipped and
named; written once the portfolio is quiet (a burst of projects, a bundle still settling, a
stop), only the pages of the classes that moved, and again in full after an upgrade of their
form."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from portfolio_optimiser.config import Config, load_config
from portfolio_optimiser.context.frontmatter import read_concept
from portfolio_optimiser.context.reference import Comparable, ReferenceRule
from portfolio_optimiser.daemon import references
from portfolio_optimiser.daemon.ledger import Ledger
from portfolio_optimiser.daemon.processor import Processor
from portfolio_optimiser.daemon.references import read_reference_classes
from portfolio_optimiser.daemon.workspace import Workspace

from .daemon_helpers import make_workspace
from .synthetic_ns3451 import generate_ns3451
from .test_portfolio_index import ENV, LOG, _everything, _places, _started, ws

NOW = 1_796_601_600.0
"""When the tests' reference fits are published (2026-12-07, UTC)."""

__all__ = ["ws"]  # the fixture, shared with the index's tests


@pytest.mark.parametrize("size", [0, 1, 3, 3000])
def test_class_pages_read_back_as_the_classes_published(tmp_path: Path, size: int) -> None:
    """A page's comparables are JSON lines in its body: what is read back is what was
    published, whatever the text in a source or a category (a line break, a fence, a table's
    bar), and however many projects a class holds (a frontmatter is read up to 64 KiB: about
    600 projects)."""
    odd = 'cost/"23" #1: a\\b — ærlig\tpris\n```\n| x |\n```json\n{"project_id": "forged"}'
    shapes = (
        Comparable('p-"1" ærlig', odd, 1234.5, "skole: æøå\n---"),
        Comparable("p-2", "cost/23.md", 1e16, None),
        Comparable("p-3", "", 0.1 + 0.2, "office"),
    )
    rows = tuple(
        shapes[i % 3]._replace(project_id=f"{shapes[i % 3].project_id}-{i:05d}")
        for i in range(size)
    )
    root = tmp_path / "reference"
    root.mkdir()
    text = references._render("23", "m2", _places(map(references.page_lines, rows)), "d1")
    (root / "23@m2.md").write_text(text, "utf-8")
    read = read_reference_classes(root, ReferenceRule(), log=LOG)
    assert read.classes == {("23", "m2"): rows}
    meta = read_concept(root / "23@m2.md", "23@m2.md").frontmatter
    assert meta["ingest_manifest"] == {"projects": size, "class_digest": "d1"}
    assert meta["generated"] is True


class _Warnings:
    def __init__(self) -> None:
        self.warned: list[dict[str, Any]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.warned.append(fields)


def test_a_class_page_whose_comparables_do_not_read_is_skipped_and_named(tmp_path: Path) -> None:
    root = tmp_path / "reference"
    root.mkdir()
    rows = (Comparable("p-1", "cost/23.md", 100.0, None), Comparable("p-2", "c.md", 90.0, None))
    text = references._render("23", "m2", _places(map(references.page_lines, rows)), "d1")
    broken = {
        "unclosed": text.replace("\n```\n\n## By project", "\n\n## By project"),
        "missing": text.replace("```json", "```"),
        "not JSON": text.replace('{"project_id": "p-2"', '{project_id: "p-2"'),
        "not an object": text.replace(
            '{"project_id": "p-2", "source": "c.md", "unit_price_nok": 90.0, "category": null}',
            "[1]",
        ),
    }
    for why, page in broken.items():
        (root / "23@m2.md").write_text(page, "utf-8")
        log = _Warnings()
        assert read_reference_classes(root, ReferenceRule(), log=log).classes == {}, why
        assert [w["page"] for w in log.warned] == ["23@m2.md"], why


@pytest.mark.loadbearing
def test_a_changed_line_renders_only_its_class_page(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with Ledger.open(ws.ledger_file) as ledger:
        portfolio = _started(ws, ledger)
        rendered: list[str] = []
        real_render = references._render
        monkeypatch.setattr(
            references, "_render", lambda code, *a: rendered.append(code) or real_render(code, *a)
        )
        [project, *_] = sorted(ws.bundles_projects.iterdir())
        staged = tmp_path / "revised"
        shutil.copytree(project, staged)
        line = staged / "cost" / "23.md"
        line.write_text(
            line.read_text("utf-8").replace("unit_price_nok: ", "unit_price_nok: 1"), "utf-8"
        )
        shutil.rmtree(project)
        staged.rename(project)
        portfolio.rebuild(NOW)
        assert rendered == []  # the pages wait for the portfolio to be quiet
        real_publish = references.publish_text

        def full_disk(path: Path, text: str) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(references, "publish_text", full_disk)
        portfolio.fit.publish_pages()  # said in the log; the class that moved waits for the next try
        # Not due again until the next rebuild or stop: a full disk must not keep it busy.
        assert portfolio.fit.pages_behind and not portfolio.fit.pages_due and rendered == ["23"]
        monkeypatch.setattr(references, "publish_text", real_publish)
        portfolio.fit.publish_pages()
        assert not portfolio.fit.pages_behind and rendered == ["23", "23"]
        assert portfolio.fit.references().classes == _everything(ws).classes
        assert read_reference_classes(ws.references, ReferenceRule(), log=LOG).classes == (
            _everything(ws).classes
        )


def test_pages_of_an_earlier_form_are_written_again_at_a_start(ws: Workspace) -> None:
    """The index page says which form the pages are in: after an upgrade, pages of the form
    before (their comparables in the frontmatter) are written again, though the classes did
    not move."""
    with Ledger.open(ws.ledger_file) as ledger:
        _started(ws, ledger)
        index = ws.references / "index.md"
        page = sorted(p for p in ws.references.glob("*.md") if p != index)[0]
        published = page.read_text("utf-8")
        said = index.read_text("utf-8")
        assert f"built: {references.PAGES}:" in said
        index.write_text(said.replace(f"built: {references.PAGES}:", "built: "), "utf-8")
        page.write_text("---\ntype: reference-class\n---\n\nThe form before.\n", "utf-8")
        _started(ws, ledger)
        assert page.read_text("utf-8") == published
        assert index.read_text("utf-8") == said


def _daemon_workspace(tmp_path: Path, *, stability_seconds: float) -> tuple[Workspace, Config]:
    """A workspace and its config as the daemon runs it, verdicts never waited for."""
    root = make_workspace(
        tmp_path / "ws", stability_seconds=stability_seconds, verdict_quiet_seconds=0
    )
    ws = Workspace.at(root, environ={})
    ws.ensure()
    return ws, load_config(root / "config" / "portfolio-optimiser.toml")


@contextlib.contextmanager
def _stepped(ws: Workspace, config: Config) -> Iterator[Processor]:
    """A processor after its first step on what is in the inbox, stopped at the end."""
    with Ledger.open(ws.ledger_file) as ledger:
        processor = Processor(ws, config, ledger, time.time, LOG, environ=ENV)
        try:
            processor.scan()
            processor.settle_by_age()
            processor.step(quiet_s=0.0, refit_now=True)
            yield processor
        finally:
            processor.close()


def test_a_burst_of_projects_writes_the_class_pages_once_the_portfolio_is_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each settled project moves the classes; their pages (a page holds every member of its
    class) are written once the inbox is empty and the reruns are done, not once a project —
    and a stop writes what a step did not."""
    ws, config = _daemon_workspace(tmp_path, stability_seconds=0)
    for project in generate_ns3451(11, 4).projects:
        project.write(ws.inbox_projects / project.project_id)
    published: list[set[tuple[str, str]]] = []
    real = references.ReferencePages.publish

    def counted(self: references.ReferencePages, classes: Any, moved: Any, *a: Any) -> None:
        published.append(set(moved))
        real(self, classes, moved, *a)

    monkeypatch.setattr(references.ReferencePages, "publish", counted)
    with Ledger.open(ws.ledger_file) as ledger:
        processor = Processor(ws, config, ledger, time.time, LOG, environ=ENV)
        try:
            assert published == [set()]  # a start: the pages hold the classes (none)
            processor.scan()
            processor.settle_by_age()
            processor.step(quiet_s=0.0, refit_now=True)
            assert len(processor.history) >= 4 and not processor.has_work()
            assert len(published) == 2, "the class pages were not written once, when quiet"
            on_disk = read_reference_classes(ws.references, ReferenceRule(), log=LOG).classes
            assert on_disk == _everything(ws).classes
            processor.portfolio.rebuild(NOW)  # as a settle cut off by a stop leaves them
        finally:
            processor.close()
    assert len(published) == 3, "a stop left the class pages behind the classes"


def _aged(folder: Path, seconds: float) -> None:
    """Every file of ``folder`` last changed ``seconds`` ago."""
    when = time.time() - seconds
    for path in [folder, *folder.rglob("*")]:
        os.utime(path, (when, when))


def test_the_class_pages_wait_while_a_bundle_is_still_settling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project settled while another is still being copied in: the pages wait for that one
    too (it would move the classes again), then are written once."""
    ws, config = _daemon_workspace(tmp_path, stability_seconds=60)
    first, second = generate_ns3451(11, 2).projects
    _aged(first.write(ws.inbox_projects / first.project_id), 3600)
    second.write(ws.inbox_projects / second.project_id)  # still being copied: changed just now
    published: list[int] = []
    real = references.ReferencePages.publish
    monkeypatch.setattr(
        references.ReferencePages,
        "publish",
        lambda self, classes, moved, *a: (
            published.append(len(moved)) or real(self, classes, moved, *a)
        ),
    )
    with _stepped(ws, config) as processor:
        assert [r.name for r in processor.history] == [first.project_id]
        assert len(published) == 1, "the pages were written while a bundle was settling"
        _aged(ws.inbox_projects / second.project_id, 3600)
        processor.settle_by_age()
        processor.step(quiet_s=0.0, refit_now=True)
        assert len(published) == 2 and published[-1] > 0


def test_a_failed_write_of_the_pages_is_not_retried_at_every_step_but_at_the_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, config = _daemon_workspace(tmp_path, stability_seconds=0)
    for project in generate_ns3451(11, 3).projects:
        project.write(ws.inbox_projects / project.project_id)
    real, full = references.publish_text, [True]

    def full_disk(path: Path, text: str) -> None:
        if full[0]:
            raise OSError(28, "No space left on device")
        real(path, text)

    monkeypatch.setattr(references, "publish_text", full_disk)
    with _stepped(ws, config) as processor:
        assert len(processor.history) >= 3
        assert not processor.has_work(), "a failed write of the pages keeps the daemon busy"
        full[0] = False  # space made: the stop writes them
    on_disk = read_reference_classes(ws.references, ReferenceRule(), log=LOG).classes
    assert on_disk == _everything(ws).classes


def test_a_page_being_written_stops_within_a_stretch_of_members_for_a_verdict(
    tmp_path: Path,
) -> None:
    """The pages' writer calls ``pause`` (where a verdict taken in on another thread goes
    first) between stretches of at most ``STRETCH`` members rendered or hashed, and before each
    page is written: a class of ten thousand members, rendered in one go, held a verdict ninety
    milliseconds."""
    from portfolio_optimiser.context import reference_classes
    from portfolio_optimiser.context.reference import ProjectPrices

    stretch = reference_classes.STRETCH
    done: list[str] = []  # each member's rendering and hashing, in the order they happened
    paused: list[int] = []  # how much work had happened at each pause

    def render(c: Comparable) -> tuple[str, str]:
        done.append(c.project_id)
        return references.page_lines(c)

    member_hash = reference_classes._member_hash

    def counted_hash(*fields: object) -> int:
        done.append("hash")
        return member_hash(*fields)

    classes = reference_classes.ReferenceClasses(ReferenceRule(), render)
    members = 3 * stretch + 7
    classes.update(
        {
            f"f{i:05d}": ProjectPrices(f"p-{i:05d}", None, (("23", "m2", 1000.0 + i, "c.md"),))
            for i in range(members)
        }
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reference_classes, "_member_hash", counted_hash)
        references.ReferencePages(tmp_path / "reference").publish(
            classes, set(), lambda: paused.append(len(done))
        )
    assert len(done) == 2 * members  # each member rendered and hashed once
    stretches = [b - a for a, b in zip([0, *paused], [*paused, len(done)], strict=True)]
    assert max(stretches) <= stretch, stretches
    assert paused[-1] == len(done)  # the page's text made: a pause before it is written
