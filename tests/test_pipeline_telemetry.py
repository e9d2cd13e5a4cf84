"""Agent Framework's spans are off unless whoever collects them says so (``pipeline/__init__``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = (
    "import portfolio_optimiser.pipeline\n"
    "from agent_framework.observability import OBSERVABILITY_SETTINGS as S\n"
    "print(S.ENABLED)\n"
)


def enabled(**env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k != "ENABLE_INSTRUMENTATION"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=base | env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return done.stdout.strip()


@pytest.mark.loadbearing
def test_the_frameworks_spans_are_off_by_default() -> None:
    assert enabled() == "False"


@pytest.mark.parametrize(("switch", "expected"), [("true", "True"), ("false", "False")])
def test_the_frameworks_own_switch_is_left_as_the_user_set_it(switch: str, expected: str) -> None:
    assert enabled(ENABLE_INSTRUMENTATION=switch) == expected
