"""The expert-reviewer persona, read from the commons at call time (never inlined, never cached).

``shared/skills/expert-reviewer/`` is the one shared definition of the reviewer; the simulation
instantiates the persona's verdict from its ``references/example-verdict.json``.
"""

from __future__ import annotations

import re
from pathlib import Path

from portfolio_optimiser.context.verdict import Verdict, parse_verdict
from portfolio_optimiser.resources import commons_dir

__all__ = ["load_persona_example", "persona_dir", "persona_marker"]

_MARKER = re.compile(r"\(marker ([A-Z0-9-]+)\)")


def persona_dir() -> Path:
    return commons_dir() / "skills" / "expert-reviewer"


def load_persona_example() -> tuple[Verdict, bytes]:
    """The persona's example verdict and its bytes, validated (fail fast on drift)."""
    path = persona_dir() / "references" / "example-verdict.json"
    data = path.read_bytes()
    return parse_verdict(data, str(path)), data


def persona_marker(verdict: Verdict) -> str:
    """The tracer the example verdict carries in its rationale: ``(marker RX-7Q)``."""
    found = _MARKER.search(verdict.rationale)
    if not found:
        raise ValueError(
            "the persona's example verdict carries no '(marker …)' tracer in its rationale"
        )
    return found.group(1)
