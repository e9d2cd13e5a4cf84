"""The bundle an imported estimate becomes: pure, it returns texts and never writes.

Decides the concept files: ``project.md``, ``index.md``, and the lines as tables, one
``cost/<part>.md`` per NS 3451 building part (a ``cost-lines`` concept,
:mod:`portfolio_optimiser.context.cost_table`), each line naming its place in the source
(``imported_from``); the options a tender marks, apart from the base sum (``options/<part>.md``,
a table the IR does not read as cost lines); the posts that are context, with their whole text
(``description/<chapter>.md``); each file marked as generated from the source (``generated:
true`` with an ``ingest_manifest`` naming the file and its digest); and an ``import.md`` saying
how the file was read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, Final

from portfolio_optimiser.context.cost_table import table_row
from portfolio_optimiser.context.ns3451 import ns3451_name

from .posts import IMPORTER, Estimate, Measure, Post, TextPost

__all__ = ["MAX_ROWS_PER_FILE", "bundle_files_of"]


def _concept(frontmatter: Mapping[str, Any], body: str) -> str:
    # Each value in JSON, which YAML 1.2 reads as it is: ten times faster than a YAML emitter
    # (0.65 ms a file, 13 s for a tender of 20 000 posts), and every string safely quoted.
    header = "".join(
        f"{key}: {json.dumps(value, ensure_ascii=False)}\n" for key, value in frontmatter.items()
    )
    return f"---\n{header}---\n\n{body.strip()}\n"


def _slug(code: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", code).strip("_") or "line"


def _number(value: Decimal) -> int | float:
    """A figure as the IR takes it: whole kroner as an integer, else the exact decimal."""
    return int(value) if value == value.to_integral_value() else float(value)


MAX_ROWS_PER_FILE: Final = 500
"""A building part's lines per concept file: a table a planner can still scroll, and a file far
below a concept's size bound even with every post's description beside it."""
_MAX_FILE_CHARS: Final = 1_000_000
_COLUMNS: Final = (
    ("code", "code"),
    ("title", "title"),
    ("quantity", "quantity"),
    ("unit", "unit"),
    ("unit_price", "unit_price_nok"),
    ("amount", "amount_nok"),
    ("ns3451", "ns3451"),
    ("ns3420", "ns3420"),
    ("low", "min_nok"),
    ("likely", "likely_nok"),
    ("high", "max_nok"),
    ("distribution", "distribution"),
    ("correlation_group", "correlation_group"),
)


def _figure(value: Decimal | None) -> str:
    """A figure exactly as the source gives it, as the IR reads it: 250.5, 1000, never 1E+3."""
    return "" if value is None else f"{value.normalize():f}"


def _part(post: Post) -> str:
    """The table a line goes into: a post's building part (else its post number's chapter); an
    account's part one level up (21 and 23 under 2; 231 and 236 under 23)."""
    if post.post:
        part = re.match(r"\d{1,2}", post.ns3451.strip()) if post.ns3451 else None
        return part.group(0) if part else post.code.split(".")[0]
    code = post.code.split(".")[0]
    return (
        code[: min(2, max(1, len(code) - 1))] if code.isdigit() and "." not in post.code else code
    )


def _chunks(posts: Sequence[Post]) -> list[list[Post]]:
    chunks: list[list[Post]] = [[]]
    size = 0
    for post in posts:
        grows = 200 + len(post.title) + len(post.description or "")
        if chunks[-1] and (len(chunks[-1]) >= MAX_ROWS_PER_FILE or size + grows > _MAX_FILE_CHARS):
            chunks.append([])
            size = 0
        chunks[-1].append(post)
        size += grows
    return chunks


def _table_title(part: str, n: int, posts: Sequence[Post]) -> str:
    # A post number's first level is its chapter, not a building part: named only as itself.
    named = ns3451_name(part) if any(p.ns3451 or not p.post for p in posts) else None
    return (f"{part} {named}" if named else part) + (f" ({n})" if n > 1 else "")


def _cost_table(
    title: str, posts: Sequence[Post], manifest: Mapping[str, Any], *, kind: str = "cost-lines"
) -> str:
    frontmatter: dict[str, Any] = {"type": kind, "title": title}
    columns = [
        (a, f) for a, f in _COLUMNS if a == "title" or any(getattr(p, a) is not None for p in posts)
    ]
    mixed = len({p.post for p in posts}) > 1
    if posts[0].post and not mixed:
        frontmatter["post"] = True
    frontmatter |= {"generated": True, "ingest_manifest": dict(manifest)}
    header = [f for _a, f in columns] + (["post"] if mixed else []) + ["imported_from"]
    rows = [table_row(header), "|" + "---|" * len(header)]
    for post in posts:
        cells: list[Any] = [
            _figure(v) if isinstance(v := getattr(post, a), Decimal) else v for a, _f in columns
        ]
        rows.append(table_row([*cells, *([post.post] if mixed else []), str(post.origin)]))
    described = [
        f"## {post.code} {post.title}\n\n{post.description.strip()}"
        for post in posts
        if post.description and post.description.strip()
    ]
    return _concept(frontmatter, "\n\n".join([f"# {title}", "\n".join(rows), *described]))


def _measure_option(measure: Measure, manifest: Mapping[str, Any]) -> str:
    option: dict[str, Any] = {
        "type": "measure-option",
        "id": measure.id,
        "title": measure.title,
        "measure_type": measure.measure_type,
        "affected_codes": list(measure.codes),
        "estimated_saving_nok": _number(measure.saving),
    }
    if measure.decide_by:
        option["latest_decision_point"] = measure.decide_by
    if measure.consequence:
        option["consequence"] = measure.consequence
    option |= {"imported_from": str(measure.origin), "generated": True}
    option["ingest_manifest"] = dict(manifest)
    body = f"# {measure.id} {measure.title}\n\nFrom the kuttliste: {measure.origin}."
    if measure.description:
        body += f"\n\n{measure.description}"
    return _concept(option, body)


def _tables(
    folder: str,
    posts: Sequence[Post],
    manifest: Mapping[str, Any],
    files: dict[str, str],
    *,
    kind: str = "cost-lines",
) -> list[str]:
    """``posts`` as tables in ``folder``, one a building part (chunked); their index links."""
    parts: dict[str, list[Post]] = {}
    for post in posts:
        parts.setdefault(_part(post), []).append(post)
    links: list[str] = []
    for part, grouped in parts.items():
        for n, chunk in enumerate(_chunks(grouped), start=1):
            rel = f"{folder}/{_slug(part)}{f'-{n}' if n > 1 else ''}.md"
            tries = 1
            while rel in files:  # two parts that slug alike ("2" and "2 "): never one file
                tries += 1
                rel = f"{folder}/{_slug(part)}-{n}-{tries}.md"
            title = _table_title(part, n, chunk)
            files[rel] = _cost_table(title, chunk, manifest, kind=kind)
            links.append(f"* [{title}]({rel})")
    return links


def _descriptions(
    texts: Sequence[TextPost], manifest: Mapping[str, Any], files: dict[str, str]
) -> list[str]:
    """The posts that are context, with their whole text, one file a chapter: read as prose,
    never as lines."""
    chapters: dict[str, list[TextPost]] = {}
    for text in texts:
        chapters.setdefault(text.code.split(".")[0], []).append(text)
    links = []
    for chapter, posts in chapters.items():
        sections = [
            f"## {post.code} {post.title}\n\n{post.text}".rstrip() + f"\n\n({post.origin})"
            for post in posts
        ]
        chunks: list[list[str]] = [[]]
        for section in sections:  # a file stays far below a concept's size bound
            if chunks[-1] and sum(map(len, chunks[-1])) + len(section) > _MAX_FILE_CHARS // 4:
                chunks.append([])
            chunks[-1].append(section)
        for n, chunk in enumerate(chunks, start=1):
            rel = f"description/{_slug(chapter)}{f'-{n}' if n > 1 else ''}.md"
            title = f"Description, chapter {chapter}" + (f" ({n})" if n > 1 else "")
            front = {"type": "description", "title": title, "generated": True}
            files[rel] = _concept(
                front | {"ingest_manifest": dict(manifest)}, "\n\n".join([f"# {title}", *chunk])
            )
            links.append(f"* [{title}]({rel})")
    return links


def bundle_files_of(estimate: Estimate) -> dict[str, str]:
    """The bundle an estimate becomes: bundle-relative path → text."""
    manifest = {"importer": IMPORTER, "source": estimate.source, "sha256": estimate.digest}
    files: dict[str, str] = {}
    links = _tables("cost", estimate.posts, manifest, files)
    options = _tables("options", estimate.options, manifest, files, kind="option-lines")
    described = _descriptions(estimate.texts, manifest, files)
    kuttliste: list[str] = []
    for measure in estimate.measures:
        rel = f"kuttliste/{measure.id}.md"
        files[rel] = _measure_option(measure, manifest)
        kuttliste.append(f"* [{measure.id} {measure.title}]({rel})")
    total = sum((p.amount for p in estimate.posts), Decimal(0))
    project: dict[str, Any] = {
        "type": "project",
        "id": estimate.project_id,
        "name": estimate.name,
        "currency": "NOK",
    }
    if estimate.category:
        project["category"] = estimate.category
    project |= {"base_estimate_nok": _number(total)} | dict(estimate.header)
    project |= {"generated": True, "ingest_manifest": manifest}
    files["project.md"] = _concept(
        project,
        f"# {estimate.name}\n\nImported from {estimate.source} ({len(estimate.posts)} cost lines"
        + (f", {len(estimate.options)} options apart" if estimate.options else "")
        + ").",
    )
    files["import.md"] = _concept(
        {"type": "import-report", "title": f"How {estimate.source} was read"},
        f"# How {estimate.source} was read\n\n"
        + "\n".join(f"* {sentence}" for sentence in estimate.how),
    )
    files["index.md"] = (
        f"# {estimate.name}\n\n* [Project](project.md)\n* [How the estimate was read](import.md)"
        "\n\n## Cost\n\n"
        + "\n".join(links)
        + ("\n\n## Kuttliste\n\n" + "\n".join(kuttliste) if kuttliste else "")
        + ("\n\n## Options, apart from the base sum\n\n" + "\n".join(options) if options else "")
        + ("\n\n## Description\n\n" + "\n".join(described) if described else "")
        + "\n"
    )
    return files
