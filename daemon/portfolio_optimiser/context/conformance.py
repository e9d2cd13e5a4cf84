"""OKF v0.2 conformance (§11): what a bundle must satisfy, reported, never repaired.

Checks that every concept has parseable frontmatter with a non-empty ``type``; that ``index.md``
files carry no frontmatter (the root one may carry ``okf_version`` only); that ``log.md`` headings
are ``## YYYY-MM-DD`` newest first; and that the lifecycle and trust fields have their v0.2 shapes.
Missing optional fields, unknown types or keys, broken links and a missing nested index are not
problems (§11 forbids rejecting them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import BundleError
from .frontmatter import read_concept
from .ir import bundle_files

__all__ = ["ConformanceIssue", "check_conformance"]

_LOG_HEADING = re.compile(r"^## (\d{4}-\d{2}-\d{2})\s*$")
_STATUSES = frozenset({"draft", "stable", "deprecated"})


@dataclass(frozen=True, order=True)
class ConformanceIssue:
    file: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.message}"


def check_conformance(root: Path) -> list[ConformanceIssue]:
    issues: list[ConformanceIssue] = []
    try:
        files = bundle_files(root)
    except BundleError as exc:
        return [ConformanceIssue(root.name, str(exc))]
    for path, rel in files:
        try:
            concept = read_concept(path, rel)
        except BundleError as exc:
            issues.append(ConformanceIssue(rel, str(exc).removeprefix(f"{rel}").lstrip(": ")))
            continue
        name = path.name
        if name == "index.md":
            allowed = {"okf_version"} if rel == "index.md" else set()
            extra = sorted(set(concept.frontmatter) - allowed)
            if extra:
                issues.append(
                    ConformanceIssue(
                        rel, f"an index carries no frontmatter (found {', '.join(extra)})"
                    )
                )
        elif name == "log.md":
            issues.extend(ConformanceIssue(rel, m) for m in _log_problems(concept.body))
        else:
            issues.extend(ConformanceIssue(rel, m) for m in _concept_problems(concept.frontmatter))
    return sorted(issues)


def _concept_problems(frontmatter: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    kind = frontmatter.get("type")
    if not isinstance(kind, str) or not kind.strip():
        problems.append("frontmatter needs a non-empty 'type'")
    status = frontmatter.get("status")
    if status is not None and status not in _STATUSES:
        problems.append(f"status {status!r} is not one of draft, stable, deprecated")
    verified = frontmatter.get("verified")
    if verified is not None:
        entries = verified if isinstance(verified, list) else [verified]
        if not all(isinstance(e, dict) and e.get("by") and e.get("at") for e in entries):
            problems.append("verified entries need 'by' and 'at'")
    generated = frontmatter.get("generated")
    if isinstance(generated, dict) and not generated.get("by"):
        problems.append("generated needs 'by'")
    return problems


def _log_problems(body: str) -> list[str]:
    problems: list[str] = []
    days: list[str] = []
    for number, line in enumerate(body.split("\n"), start=1):
        if line.startswith("## "):
            match = _LOG_HEADING.match(line)
            if not match:
                problems.append(f"body line {number}: log headings are '## YYYY-MM-DD'")
            else:
                days.append(match.group(1))
    if days != sorted(days, reverse=True):
        problems.append("log entries must be newest first")
    return problems
