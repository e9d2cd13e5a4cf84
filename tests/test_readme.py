"""The README's first screen is what a new user reads: the two commands and what the demo leaves.
(Its set-up lines are run literally by ``.ci/readme-setup`` in CI; they need PyPI, tests do not.)"""

from __future__ import annotations

from .conftest import REPO

FIRST_SCREEN = 60  # lines: about one screen of a terminal or of GitHub's rendering above the fold


def test_the_first_screen_shows_the_two_commands_and_what_the_demo_leaves() -> None:
    first = "\n".join((REPO / "README.md").read_text("utf-8").splitlines()[:FIRST_SCREEN])
    assert "uv run portfolio-optimiser demo" in first and "uv run pytest" in first
    for left in (
        "report.md",
        "savings-by-code.svg",
        "verdicts/",
        "bundles/wiki/verdicts/",
        "spend.json",
    ):
        assert left in first, left
    assert "portfolio-optimiser run --workspace DIR" in first


def test_the_ci_runs_the_readme_set_up_literally() -> None:
    assert "bash .ci/readme-setup" in (REPO / ".ci" / "run").read_text("utf-8")
    script = (REPO / ".ci" / "readme-setup").read_text("utf-8")
    assert "README.md" in script and "uv run portfolio-optimiser demo" in script
