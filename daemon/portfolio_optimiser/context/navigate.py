"""Navigate a bundle the way a reader does: start at ``index.md`` and follow links.

Decides: which files of a bundle are read, in which order, and which links are refused. Never
enumerates directories (an unlinked file is not context) and never reads outside the bundle.

The contract (DESIGN §4 step 1):

* depth-first in first-seen order, starting at the root ``index.md`` (required there only);
* a leading ``/`` means the bundle root, every other link is relative to the linking file's folder;
* de-duplication on the resolved path, so ``./a.md`` and ``a.md`` are one file and cycles end;
* :func:`safe_resolve` is the only in/out-of-bundle test, symlinks included, and it fails closed:
  depth is allowed, escape is not;
* ``index.md`` files are navigation and ``log.md`` is history: neither is a concept; links out of a
  ``type: verdict`` file are not followed (the learned layer never feeds the context).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from urllib.parse import unquote

from .errors import BundleError, BundleEscapeError
from .frontmatter import Concept, read_concept

__all__ = [
    "Link",
    "LinkProblem",
    "Navigation",
    "ProblemKind",
    "extract_links",
    "navigate_bundle",
    "resolve_inside",
    "safe_resolve",
]

RESERVED_NAMES = frozenset({"index.md", "log.md"})
MAX_CONCEPT_BYTES = 2 * 1024 * 1024
MAX_CONCEPTS = 5000

_INLINE_LINK = re.compile(
    r"!?\[(?:[^\]\\]|\\.)*\]\(\s*(<[^>\n]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)"
)
_REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>\n]*>|\S+)")
_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")


class ProblemKind(StrEnum):
    ESCAPE = "escape"
    """The link leaves the bundle; it was refused."""
    BROKEN = "broken"
    """The link points to a markdown file that does not exist; tolerated (OKF §11)."""
    CYCLE = "cycle"
    """The link leads back to a file being read; it ends there."""


@dataclass(frozen=True)
class Link:
    target: str
    line: int


@dataclass(frozen=True)
class LinkProblem:
    kind: ProblemKind
    file: str
    line: int
    target: str

    def __str__(self) -> str:
        where = f"{self.file} line {self.line}: link {self.target!r}"
        if self.kind is ProblemKind.ESCAPE:
            return f"{where} leaves the bundle and was not followed; link only to files inside it"
        if self.kind is ProblemKind.BROKEN:
            return f"{where} points to a file that does not exist; fix the path or drop the link"
        return f"{where} leads back to a file already being read; navigation stops there"


@dataclass(frozen=True)
class Navigation:
    """What navigation read, in order, and what it refused or noticed on the way."""

    root: Path
    index: Concept
    concepts: tuple[Concept, ...]
    """Every concept reached, in depth-first first-seen order (no index.md, no log.md)."""
    navigation_files: tuple[Concept, ...] = field(default=())
    """Nested ``index.md`` files passed through."""
    problems: tuple[LinkProblem, ...] = field(default=())

    @property
    def escapes(self) -> tuple[LinkProblem, ...]:
        return tuple(p for p in self.problems if p.kind is ProblemKind.ESCAPE)


def extract_links(body: str, first_line: int = 1) -> list[Link]:
    """Markdown link targets in document order, skipping fenced code blocks."""
    links: list[Link] = []
    fenced: str | None = None
    for offset, line in enumerate(body.split("\n")):
        fence = _FENCE.match(line)
        if fence:
            marker = fence.group(1)
            fenced = None if fenced == marker else (fenced or marker)
            continue
        if fenced:
            continue
        number = first_line + offset
        reference = _REFERENCE_LINK.match(line)
        if reference:
            links.append(Link(_unwrap(reference.group(1)), number))
            continue
        links.extend(Link(_unwrap(m.group(1)), number) for m in _INLINE_LINK.finditer(line))
    return links


def _unwrap(target: str) -> str:
    return target[1:-1].strip() if target.startswith("<") and target.endswith(">") else target


def _is_external(target: str) -> bool:
    """A URL (``https:``, ``mailto:`` …) is not a bundle link; ``file:`` and drives are paths."""
    if target.startswith("#") or not target:
        return True
    if _DRIVE.match(target):
        return False
    scheme = _SCHEME.match(target)
    return scheme is not None and scheme.group(0).lower() != "file:"


def safe_resolve(root: Path, target: str, *, from_rel: str = "index.md") -> tuple[Path, str]:
    """Resolve a link written in ``from_rel`` to a real path inside ``root``, or refuse it.

    Returns the resolved path and its bundle-relative POSIX form. Raises
    :class:`BundleEscapeError` for anything that is, or might be, outside the bundle once
    symlinks are followed: ``..`` beyond the root, ``file:`` URLs, drive letters, NUL bytes,
    and symlinks that point out. Fail-closed: when in doubt, it refuses.
    """
    return resolve_inside(root.resolve(strict=True), target, from_rel=from_rel)


def resolve_inside(base: Path, target: str, *, from_rel: str = "index.md") -> tuple[Path, str]:
    """``safe_resolve`` in a root already resolved (``base``): a bundle's reader resolves its root
    once, not again for each of its links and files."""
    path_part = unquote(target.split("#", 1)[0].split("?", 1)[0]).replace("\\", "/")
    if "\x00" in path_part:
        raise BundleEscapeError(f"{from_rel}: link {target!r} contains a NUL byte")
    if path_part.lower().startswith("file:") or _DRIVE.match(path_part):
        raise BundleEscapeError(
            f"{from_rel}: link {target!r} is a file-system path outside the bundle"
        )
    if path_part.startswith("/"):
        joined = posixpath.normpath(path_part.lstrip("/") or ".")
    else:
        joined = posixpath.normpath(posixpath.join(posixpath.dirname(from_rel), path_part))
    if joined == ".." or joined.startswith("../") or joined.startswith("/"):
        raise BundleEscapeError(f"{from_rel}: link {target!r} leaves the bundle")
    resolved = (base / joined).resolve(strict=False)
    if resolved != base and not resolved.is_relative_to(base):
        raise BundleEscapeError(
            f"{from_rel}: link {target!r} resolves through a symlink to outside the bundle"
        )
    return resolved, resolved.relative_to(base).as_posix()


def navigate_bundle(root: Path, *, read: Mapping[str, Concept] | None = None) -> Navigation:
    """Read a bundle by navigation. Raises :class:`BundleError` for an unreadable bundle.

    ``read``: concepts of this bundle already read, by bundle-relative path (the IR's, in a
    run): taken as they are, so a run reads each file once and sees one version of it."""
    known: Mapping[str, Concept] = read or {}
    if not root.is_dir():
        raise BundleError(
            f"{root.name}: is not a folder; a bundle is a folder with index.md at its root"
        )
    base = root.resolve()
    index_path = base / "index.md"
    if not index_path.is_file():
        raise BundleError(
            f"{root.name}: index.md is missing at the bundle root; add an index.md that links to "
            "the bundle's concept files"
        )
    index = known.get("index.md") or _read(base, index_path, "index.md")
    concepts: list[Concept] = []
    navigation_files: list[Concept] = []
    problems: list[LinkProblem] = []
    seen: set[Path] = {index_path}
    on_path: list[Path] = [index_path]
    stack: list[tuple[Concept, Iterator[Link]]] = [(index, iter(_links_of(index)))]

    while stack:
        concept, links = stack[-1]
        link = next(links, None)
        if link is None:
            stack.pop()
            on_path.pop()
            continue
        if _is_external(link.target):
            continue
        try:
            path, rel = resolve_inside(base, link.target, from_rel=concept.rel)
        except BundleEscapeError:
            problems.append(LinkProblem(ProblemKind.ESCAPE, concept.rel, link.line, link.target))
            continue
        if not rel.lower().endswith(".md"):
            continue  # attachments (images, PDFs) are not concepts
        if path in seen:
            if path in on_path:
                problems.append(LinkProblem(ProblemKind.CYCLE, concept.rel, link.line, link.target))
            continue
        if not path.is_file():
            problems.append(LinkProblem(ProblemKind.BROKEN, concept.rel, link.line, link.target))
            continue
        seen.add(path)
        if len(seen) > MAX_CONCEPTS:
            raise BundleError(
                f"{root.name}: more than {MAX_CONCEPTS} linked files; split the bundle"
            )
        reached = known.get(rel) or _read(base, path, rel)
        name = posixpath.basename(rel)
        if name == "log.md":
            continue
        if name == "index.md":
            navigation_files.append(reached)
        else:
            concepts.append(reached)
            if reached.type == "verdict":
                continue
        stack.append((reached, iter(_links_of(reached))))
        on_path.append(path)

    return Navigation(
        root=base,
        index=index,
        concepts=tuple(concepts),
        navigation_files=tuple(navigation_files),
        problems=tuple(problems),
    )


def _links_of(concept: Concept) -> list[Link]:
    return extract_links(concept.body, concept.body_line)


def _read(base: Path, path: Path, rel: str) -> Concept:
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise BundleError(
            f"{rel}: cannot be read ({exc.strerror}); check its permissions"
        ) from None
    if size > MAX_CONCEPT_BYTES:
        raise BundleError(
            f"{rel}: is {size // 1024} KiB, above the {MAX_CONCEPT_BYTES // 1024} KiB limit for one "
            "concept; split it into several linked files"
        )
    return read_concept(path, rel)
