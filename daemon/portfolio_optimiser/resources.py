"""Where the commons (``shared/``) and the embedded default config live.

In a checkout they are beside the package's source root (``daemon/``); in an installed wheel they
are packed into ``portfolio_optimiser/_commons/``. Read at call time, never cached at import.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["commons_dir", "default_config_path", "load_schema"]

_PACKAGE = Path(__file__).resolve().parent


def _first_existing(*candidates: Path) -> Path:
    for candidate in candidates:
        if candidate.exists():
            return candidate
    return candidates[-1]


def commons_dir() -> Path:
    """The framework-neutral commons: schemas, the expert-reviewer skill, examples."""
    return _first_existing(_PACKAGE / "_commons" / "shared", _PACKAGE.parent.parent / "shared")


def default_config_path() -> Path:
    return _first_existing(
        _PACKAGE / "_commons" / "config" / "portfolio-optimiser.toml",
        _PACKAGE.parent.parent / "config" / "portfolio-optimiser.toml",
    )


def load_schema(name: str) -> dict[str, Any]:
    """A JSON Schema from ``shared/schemas/`` by file name."""
    data: dict[str, Any] = json.loads((commons_dir() / "schemas" / name).read_text("utf-8"))
    return data
