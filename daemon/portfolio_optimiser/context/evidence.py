"""A candidate's evidence: every link inside its bundle, or a reference class of the portfolio
that holds what it claims (the validator's rule ``evidence_inside_bundle``)."""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from urllib.parse import unquote

from .decisions import Rule, RuleCheck, RuleOutcome
from .models import Candidate, Project
from .reference import LINK_PREFIX, ProjectReferences, check_reference
from .tender import check_unbalanced_bid

__all__ = ["evidence_inside_bundle", "evidence_path"]


def _failed(detail: str) -> RuleCheck:
    return RuleCheck(rule=Rule.EVIDENCE_INSIDE_BUNDLE, outcome=RuleOutcome.FAILED, detail=detail)


def _reference_problem(
    candidate: Candidate,
    project: Project,
    references: ProjectReferences | None,
    link: str,
    accepted: Sequence[Candidate],
) -> str | None:
    if references is None:
        return f"evidence link {link!r} names a reference class, and this check had none"
    if candidate.is_risk:
        return check_unbalanced_bid(candidate, project, references, link)
    return check_reference(candidate, project, references, link, accepted)


def evidence_inside_bundle(
    candidate: Candidate,
    project: Project,
    references: ProjectReferences | None,
    accepted: Sequence[Candidate],
) -> RuleCheck:
    if not candidate.evidence:
        return _failed(
            "no evidence link is given; name at least one concept of the bundle the figures come from",
        )
    for link in candidate.evidence:
        if link.startswith(LINK_PREFIX):
            wrong = _reference_problem(candidate, project, references, link, accepted)
            if wrong is not None:
                return _failed(wrong)
            continue
        rel = evidence_path(link)
        if rel is None:
            return _failed(f"evidence link {link!r} leaves the bundle")
        if rel not in project.files:
            return _failed(f"evidence link {link!r} names no file in the bundle")
    return RuleCheck(
        rule=Rule.EVIDENCE_INSIDE_BUNDLE,
        outcome=RuleOutcome.PASSED,
        detail=f"{len(candidate.evidence)} evidence link(s) resolve inside the bundle or the portfolio",
    )


def evidence_path(link: str) -> str | None:
    """A bundle-root-relative POSIX path for an evidence link, or ``None`` when it leaves the bundle."""
    path = unquote(link.split("#", 1)[0]).replace("\\", "/").strip()
    if (
        not path
        or "\x00" in path
        or path.lower().startswith("file:")
        or (len(path) > 1 and path[1] == ":")
    ):
        return None
    normal = posixpath.normpath(path.lstrip("/"))
    if normal in {".", ".."} or normal.startswith("../") or normal.startswith("/"):
        return None
    return normal
