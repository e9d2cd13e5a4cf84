"""Times as the daemon writes them: UTC, to the second, ISO 8601 (``2026-12-07T10:51:05Z``)."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["iso"]


def iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
