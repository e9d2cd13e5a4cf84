"""The portfolio's reference classes on disk: ``bundles/reference/``, generated, never curated.

Decides: where the classes live (beside the projects, outside the wiki, so nothing written here
ever reaches the learning fold), their exact bytes (one page per (code, unit) class: the ingest
stamp ``generated: true`` + ``ingest_manifest`` with the class's digest and how many projects it
holds, then its comparables in their order, a JSON line each, and a table of them), and that
writing them is deterministic and complete: built from every project in ``bundles/projects/``
and stale pages removed. The index page, written last, says what the pages were built from (and
their form): pages that hold the classes already (every start, mostly) are not rendered again. A
page edited by hand is replaced the next time its class moves (or at a start after the
portfolio changed), a page deleted at the next write. The processor is their one writer: it
keeps the classes in memory as projects settle and writes the pages once the portfolio is quiet
(a burst of projects rewrites them once) and at a stop; a process that does not keep them reads
the pages back. A run sees the classes its identity was computed against (its job carries that
snapshot).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from portfolio_optimiser._atomic import publish_text, published_together
from portfolio_optimiser.context.errors import BundleError
from portfolio_optimiser.context.frontmatter import dump_frontmatter, read_concept
from portfolio_optimiser.context.reference import (
    Comparable,
    ReferenceIndex,
    ReferenceRule,
)
from portfolio_optimiser.context.reference_classes import Places, ReferenceClasses, Rendered

__all__ = ["CLASS_TYPE", "ReferencePages", "page_lines", "read_reference_classes"]

CLASS_TYPE: Final = "reference-class"
PAGES: Final = "pages-2"
"""The pages' form, in what the index page says they were built from: pages of another form are
written again at the next start (pages-1 held the comparables in the frontmatter, which no
reader takes past 64 KiB: about 600 projects)."""
_INDEX: Final = "index.md"


def _page_name(code: str, unit: str) -> str:
    safe = "".join(ch if ch.isalnum() or ch in ".-_" else "_" for ch in f"{code}@{unit}")
    return f"{safe}.md"


_LINE: Final = json.JSONEncoder(ensure_ascii=False)
"""``json.dumps(..., ensure_ascii=False)``'s encoder, made once: ``dumps`` makes one a call when
an option is set (a third of a page line's cost, at hundreds of thousands of them a start)."""


def page_lines(c: Comparable) -> Rendered:
    """A comparable as its page writes it: its line of the comparables (JSON) and its row of
    the table."""
    entry = _LINE.encode(
        {
            "project_id": c.project_id,
            "source": c.source,
            "unit_price_nok": c.unit_price_nok,
            "category": c.category,
        }
    )
    price = f"{c.unit_price_nok:,.0f}".replace(",", " ")
    cells = f"| {c.project_id} | {c.category or ''} | {c.source} | {price} |".replace(",", " ")
    return f"\n{entry}", f"\n{_one_line(cells)}"


def _one_line(text: str) -> str:
    return " ".join(text.splitlines())


_DATA: Final = "\n```json\n"
"""Opens the comparables' block: one JSON object a line, read back with ``json``, not YAML (a
class of ten thousand projects holds a megabyte of them)."""


def _render(code: str, unit: str, rows: Places, digest: str) -> str:
    """A class page from its comparables' lines (``page_lines``), in the class's order, and its
    class digest (``ReferenceClasses.class_digest``). The comparables come before the table: a
    table cell can hold any text, a JSON line no line break."""
    entries, cells = rows
    frontmatter = {
        "type": CLASS_TYPE,
        "title": f"Reference class {code} per {unit}",
        "code": code,
        "unit": unit,
        "generated": True,
        "ingest_manifest": {"projects": len(entries), "class_digest": digest},
    }
    title = _one_line(f"{code} per {unit}")
    return (
        f"---\n{dump_frontmatter(frontmatter)}---\n\n# Reference class {title}\n\nGenerated "
        f"from every ingested project with a line {title}; rebuilt when the portfolio changes. Do "
        "not edit: the next rebuild replaces this page.\n\n## Comparables\n\nWhat the classes "
        f"are read back from, one a line:\n{_DATA.lstrip()}"
        + "".join(entries).lstrip("\n")
        + ("\n```\n\n" if entries else "```\n\n")
        + "## By project\n\n| project | category | line | unit price (NOK) |\n|---|---|---|---:|"
        + "".join(cells)
        + "\n"
    )


@dataclass
class ReferencePages:
    """The class pages under ``root``, and their one writer. A page's lines are the classes' own
    (``ReferenceClasses.rendered``, made with ``page_lines``): a class of ten thousand projects
    that one project moved is joined again, not rendered again."""

    root: Path
    previous: str | None = None
    """What this writer last published (``ReferenceClasses.digest``)."""

    def publish(
        self,
        classes: ReferenceClasses,
        moved: set[tuple[str, str]],
        pause: Callable[[], None] = lambda: None,
    ) -> None:
        """Publish the pages of ``classes``. Nothing is rendered when the index page
        says the pages hold these classes already (a start). Else only the pages of the ``moved``
        classes are, while the index page says the others hold what this writer last
        published; otherwise — a first publish, pages changed or missing — every page is, and
        one that holds its text already is left as it is."""
        root, index, built = self.root, classes.index(), f"{PAGES}:{classes.digest()}"
        wanted = {_page_name(code, unit): (code, unit) for code, unit in index.classes}
        on_disk = _built(root)
        missing = any(not (root / name).is_file() for name in wanted)
        if on_disk == built and not missing:
            self.previous = built
            return
        whole = missing or on_disk is None or on_disk != self.previous
        root.mkdir(parents=True, exist_ok=True)
        # One flush for every page that moved (each of ten thousand projects' classes, when one
        # project prices them all), not a flush of each page and of the folder after it.
        with published_together():
            for name, key in wanted.items():
                pause()  # a verdict taken in meanwhile goes first
                if not whole and key not in moved:
                    continue
                text = _render(*key, classes.rendered(key, pause), classes.class_digest(key, pause))
                page = root / name
                pause()
                if not whole or not page.is_file() or page.read_text("utf-8") != text:
                    publish_text(page, text)
        gone = {_page_name(*key) for key in moved if key not in index.classes}
        for stale in sorted(root.glob("*.md")) if whole else [root / name for name in sorted(gone)]:
            if stale.name != _INDEX and stale.name not in wanted:
                stale.unlink(missing_ok=True)
        listing = "\n".join(f"* [{name.removesuffix('.md')}]({name})" for name in sorted(wanted))
        index_text = (
            f"---\ntype: index\ntitle: Reference classes\nbuilt: {built}\n"
            f"version: {index.version}\n---\n\n"
            "# Reference classes\n\nUnit prices by cost code and unit across the portfolio, "
            "generated.\n\n" + listing + "\n"
        )
        # Written last: it says the pages above hold these classes.
        publish_text(root / _INDEX, index_text)
        self.previous = built


def _built(root: Path, field: str = "built") -> str | None:
    """What the pages were last published from (``ReferenceClasses.digest``), as the index page
    says; or, for ``version``, which version of the reference fit they are."""
    try:
        head = (root / _INDEX).read_text("utf-8")[:400]
    except OSError:
        return None
    for line in head.splitlines():
        if line.startswith(f"{field}: "):
            return line.removeprefix(f"{field}: ").strip()
    return None


def _comparables(body: str, name: str) -> list[dict[str, Any]]:
    """The comparables' block of a class page (``_render``)."""
    _before, found, after = body.partition(_DATA)
    if not found:
        raise ValueError(f"{name}: its comparables' block (```json) is missing")
    if after.startswith("```"):
        return []
    block, closed, _rest = after.partition("\n```")
    if not closed:
        raise ValueError(f"{name}: its comparables' block (```json) is not closed")
    rows = json.loads("[" + ",".join(block.splitlines()) + "]")
    if not all(isinstance(row, dict) for row in rows):
        raise ValueError(f"{name}: a line of its comparables is not a JSON object")
    return list(rows)


def read_reference_classes(root: Path, rule: ReferenceRule, *, log: Any) -> ReferenceIndex:
    """The published classes; a page that does not read is skipped and named."""
    classes: dict[tuple[str, str], tuple[Comparable, ...]] = {}
    if not root.is_dir():
        return ReferenceIndex({}, rule)
    for page in sorted(root.glob("*.md")):
        if page.name == _INDEX:
            continue
        try:
            concept = read_concept(page, page.name)
            meta = concept.frontmatter
            if meta.get("type") != CLASS_TYPE:
                continue
            classes[(str(meta["code"]), str(meta["unit"]))] = tuple(
                Comparable(
                    project_id=str(c["project_id"]),
                    source=str(c.get("source") or ""),
                    unit_price_nok=float(c["unit_price_nok"]),
                    category=c.get("category"),
                )
                for c in _comparables(concept.body, page.name)
            )
        except (BundleError, OSError, KeyError, TypeError, ValueError) as exc:
            log.warning("reference class page skipped", page=page.name, problem=str(exc))
    version = _built(root, "version") or ""
    return ReferenceIndex({k: classes[k] for k in sorted(classes)}, rule, version=version)
