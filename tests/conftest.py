"""Shared test fixtures. No test reaches the network or needs a credential."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "shared" / "examples"


@pytest.fixture(autouse=True)
def _no_ambient_reasoning_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    # CI sets CI=true; tests that depend on the mode pin it themselves.
    monkeypatch.delenv("PORTFOLIO_OPTIMISER_REASONING_MODE", raising=False)
