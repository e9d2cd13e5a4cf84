"""Render a navigated bundle as the flat, size-bounded context an agent reads.

Decides: what a reader of the context sees, byte for byte (the nav goldens in
``shared/examples/nav-golden-*`` hold it). In navigation order, concepts are shown in full while the
size budget lasts; every later concept gets one map line (path, type, title, description, key IR
figures) and stays reachable through the data-source tools, so the prompt does not grow with the
bundle (the map itself is bounded to a third of the budget, then summarised in one line).
``type: verdict`` concepts never appear: learned signal reaches a run only through the fold.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from .frontmatter import Concept
from .navigate import Navigation, navigate_bundle

__all__ = ["DEFAULT_CONTEXT_CHARS", "bundle_context", "concept_figures", "render_context"]

DEFAULT_CONTEXT_CHARS: Final = 24_000

# The IR figures worth a line of their own, per concept type, in display order.
_FIGURES: Final[dict[str, tuple[str, ...]]] = {
    "project": ("id", "currency", "base_estimate_nok", "p50_nok", "p85_nok", "total_budget_nok"),
    "cost-line": ("code", "amount_nok", "quantity", "unit", "unit_price_nok"),
    "measure-option": (
        "id",
        "measure_type",
        "affected_codes",
        "estimated_saving_nok",
        "latest_decision_point",
        "decide_by",
    ),
}
_SEPARATOR: Final = " · "


def bundle_context(root: Path, *, budget_chars: int = DEFAULT_CONTEXT_CHARS) -> str:
    """Navigate the bundle at ``root`` and render its context."""
    return render_context(navigate_bundle(root), budget_chars=budget_chars)


def render_context(navigation: Navigation, *, budget_chars: int = DEFAULT_CONTEXT_CHARS) -> str:
    """Pure: the same navigation and budget always give the same bytes."""
    parts = [
        "# Bundle context\n",
        _block("index.md", [], _bounded_index(navigation.index.body, budget_chars // 3)),
    ]
    used = sum(len(p) for p in parts)
    mapped: list[str] = []
    for concept in navigation.concepts:
        if concept.type == "verdict":
            continue
        if not mapped:
            block = _full(concept)
            if used + len(block) <= budget_chars:
                parts.append(block)
                used += len(block)
                continue
        mapped.append(_map_line(concept))
    if mapped:
        parts.append(
            "## Not shown in full (open them with the data-source tools)\n\n"
            + "\n".join(_bounded_map(mapped, budget_chars // 3))
            + "\n"
        )
    return "\n".join(parts)


def _bounded_index(body: str, room: int) -> str:
    """The index summary, cut at a line boundary when a huge index would crowd out the concepts."""
    if len(body) <= room:
        return body
    cut = body.rfind("\n", 0, room)
    return (
        body[: cut if cut > 0 else room].rstrip("\n")
        + "\n\n[the index goes on; list_concepts names every concept]\n"
    )


def _bounded_map(lines: list[str], room: int) -> list[str]:
    """The map is bounded too: past ``room`` characters one line says how many more there are,
    so the prompt stops growing with the bundle; ``list_concepts`` names them all."""
    shown: list[str] = []
    for line in lines:
        if room < len(line) + 1:
            break
        shown.append(line)
        room -= len(line) + 1
    if len(shown) < len(lines):
        shown.append(
            f"- … and {len(lines) - len(shown)} more concepts; list_concepts names them all"
        )
    return shown


def _block(heading: str, header_lines: list[str], body: str) -> str:
    lines = [f"## {heading}", *header_lines]
    text = "\n".join(lines) + "\n"
    stripped = body.strip("\n")
    return text + (f"\n{stripped}\n" if stripped.strip() else "")


def _full(concept: Concept) -> str:
    header = [_SEPARATOR.join([f"type: {concept.type or '(none)'}", f"title: {concept.title}"])]
    description = concept.frontmatter.get("description")
    if description:
        header.append(f"description: {_one_line(description)}")
    figures = concept_figures(concept)
    if figures:
        header.append(figures)
    return _block(concept.rel, header, concept.body)


def _map_line(concept: Concept) -> str:
    fields = [concept.rel, f"type: {concept.type or '(none)'}", f"title: {concept.title}"]
    description = concept.frontmatter.get("description")
    if description:
        fields.append(_one_line(description))
    figures = concept_figures(concept)
    if figures:
        fields.append(figures)
    return "- " + _SEPARATOR.join(fields)


def concept_figures(concept: Concept) -> str:
    """``key: value`` pairs of the concept's IR figures, as written, or ``""``."""
    keys = _FIGURES.get(concept.type or "", ())
    shown = [
        f"{key}: {_value(concept.frontmatter[key])}" for key in keys if key in concept.frontmatter
    ]
    return _SEPARATOR.join(shown)


def _value(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return _one_line(value)


def _one_line(value: Any) -> str:
    return " ".join(str(value).split())
