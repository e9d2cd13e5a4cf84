"""Writers for the curated layer: concept files, the wiki index and its log.

Decides: how a curated page is written so that OKF readers accept it and ingest cannot mistake it
for its own. ``write_concept_file`` is the one authoring primitive for caller-supplied frontmatter;
it refuses the complete ingest stamp (``generated: true`` together with ``ingest_manifest``), since
a page carrying it would be silently deleted by the next re-ingest. Validation, never repair: a
refused page writes nothing. Every write is atomic. The store has one writer (the daemon), so the
read-modify-write of ``index.md`` and ``log.md`` needs no lock across processes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from portfolio_optimiser._atomic import publish_text

from .errors import IngestStampError
from .frontmatter import decode_text, dump_frontmatter
from .navigate import RESERVED_NAMES

__all__ = ["LogKind", "link_in_index", "prepend_log", "render_concept", "write_concept_file"]

LogKind = Literal["Creation", "Update", "Deprecation"]
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_HEADING = re.compile(r"^## ", re.MULTILINE)


def render_concept(frontmatter: Mapping[str, Any], body: str) -> str:
    """The text of a concept file; refuses what ``write_concept_file`` refuses."""
    if frontmatter.get("generated") and "ingest_manifest" in frontmatter:
        raise IngestStampError(
            "frontmatter carries the ingest stamp (generated: true with ingest_manifest); a curated "
            "page may carry one of them but never both, so drop one"
        )
    kind = frontmatter.get("type")
    if not isinstance(kind, str) or not kind.strip():
        raise ValueError("a concept needs a non-empty 'type' in its frontmatter (OKF §4.1)")
    header = dump_frontmatter(frontmatter)
    return f"---\n{header}---\n\n{body.strip()}\n"


def write_concept_file(path: Path, frontmatter: Mapping[str, Any], body: str) -> None:
    """Write one concept atomically. Refuses the ingest stamp and reserved names; writes nothing then."""
    if path.name in RESERVED_NAMES:
        raise ValueError(f"{path.name} is reserved for navigation and history; choose another name")
    publish_text(path, render_concept(frontmatter, body))


def _read(path: Path) -> str:
    return decode_text(path.read_bytes(), path.name) if path.exists() else ""


def link_in_index(wiki_root: Path, page_rel: str, *, section: str = "Pages") -> bool:
    """Link ``page_rel`` from ``wiki_root/index.md`` under ``## section``, with a neutral label.

    The label is the concept id (the path without ``.md``), never a title or description: the index
    is context, and a descriptive label would leak the page's learned signal into every run's prompt
    outside the learning fold. Returns whether the index changed (a page is linked once).
    """
    index = wiki_root / "index.md"
    text = _read(index) or "# Wiki\n"
    target = page_rel.lstrip("/")
    if re.search(rf"\]\(/?{re.escape(target)}\)", text):
        return False
    label = target[:-3] if target.endswith(".md") else target
    entry = f"* [{label}]({target})"
    lines = text.rstrip("\n").split("\n")
    heading = f"## {section}"
    if heading in lines:
        at = lines.index(heading) + 1
        while at < len(lines) and not lines[at].startswith("## "):
            at += 1
        while at > 0 and not lines[at - 1].strip():
            at -= 1
        lines.insert(at, entry)
    else:
        lines += ["", heading, "", entry]
    publish_text(index, "\n".join(lines) + "\n")
    return True


def prepend_log(wiki_root: Path, *, day: str, kind: LogKind, text: str) -> None:
    """Add an entry to ``log.md``, newest first (OKF §9). The day is passed in, never read."""
    if not _DAY.match(day):
        raise ValueError(f"log day {day!r} is not YYYY-MM-DD")
    log = wiki_root / "log.md"
    old = _read(log).rstrip("\n") or "# Log"
    entry = f"* **{kind}** {' '.join(text.split())}"
    # Spliced at the first heading: the rest of a log of thousands of entries is not split.
    first = _HEADING.search(old)
    if first is None:
        new = f"{old}\n\n## {day}\n{entry}"
    else:
        end = old.find("\n", first.start())
        end = len(old) if end == -1 else end
        if old[first.start() : end] == f"## {day}":
            new = f"{old[:end]}\n{entry}{old[end:]}"
        else:
            new = f"{old[: first.start()]}## {day}\n{entry}\n\n{old[first.start() :]}"
    publish_text(log, new + "\n")
