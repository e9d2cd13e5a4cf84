"""Provider independence (DESIGN §5): the reasoning names capabilities, never who provides them.

No provider-independent module (policy, breaker, records, store, commands) names an advisor, an
adapter of a vendor, a vendor or a model from the catalogue; and no test, CI step or workflow names
a model credential, so CI can never come to depend on one.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from .conftest import REPO

PACKAGE = REPO / "daemon" / "portfolio_optimiser"
# redaction.py is left out on purpose: its table names vendors' *secret formats* so that their
# keys are recognised, which is knowledge about secrets, not a choice of provider.
INDEPENDENT = [
    *sorted(p for p in (PACKAGE / "reasoning").glob("*.py") if p.name != "redaction.py"),
    PACKAGE / "cli" / "reasoning_commands.py",
    *sorted((PACKAGE / "context").glob("*.py")),
]
# Built at run time so this file names none of them either.
VENDOR_WORDS = [
    "open" + "ai",
    "az" + "ure",
    "ol" + "lama",
    "foun" + "dry",
    "anth" + "ropic",
    "cla" + "ude",
    "g" + "pt",
    "gem" + "ini",
    "lla" + "ma",
    "mis" + "tral",
    "co" + "here",
    "v" + "llm",
]
CREDENTIAL_SUFFIXES = ("_API_KEY", "_ENDPOINT", "_TOKEN", "_SECRET")


def catalogue_names() -> set[str]:
    config = tomllib.loads((REPO / "config" / "portfolio-optimiser.toml").read_text("utf-8"))
    names: set[str] = set(VENDOR_WORDS)
    for advisor in config.get("advisors", []):
        names.update({advisor["id"], advisor["provider"], advisor["model"]})
        if advisor.get("executable"):
            names.add(advisor["executable"])
        names.update(advisor.get("credential_env", []))
    return {n.lower() for n in names if len(n) > 2}


def named_in(text: str, names: set[str]) -> list[str]:
    lowered = text.lower()
    return sorted(
        n for n in names if re.search(rf"(?<![a-z0-9]){re.escape(n)}(?![a-z0-9])", lowered)
    )


@pytest.mark.loadbearing
@pytest.mark.parametrize("path", INDEPENDENT, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_provider_independent_module_names_an_advisor_vendor_or_model(path: Path) -> None:
    assert named_in(path.read_text("utf-8"), catalogue_names()) == []


def test_the_check_sees_a_name_when_there_is_one() -> None:
    names = catalogue_names()
    assert names, "the default catalogue declares advisors"
    some = sorted(names)[0]
    assert named_in(f"x = '{some}'", names) == [some]


def model_credentials() -> set[str]:
    config = tomllib.loads((REPO / "config" / "portfolio-optimiser.toml").read_text("utf-8"))
    found = {name for a in config.get("advisors", []) for name in a.get("credential_env", [])}
    found |= {w.upper() + suffix for w in VENDOR_WORDS for suffix in CREDENTIAL_SUFFIXES}
    return found


@pytest.mark.loadbearing
def test_no_test_or_ci_step_names_a_model_credential() -> None:
    credentials = model_credentials()
    places = [REPO / ".ci" / "run", *sorted((REPO / "tests").rglob("*.py"))]
    places += sorted((REPO / ".github").rglob("*.y*ml")) if (REPO / ".github").is_dir() else []
    offenders = {
        str(p.relative_to(REPO)): hits
        for p in places
        if (hits := sorted(c for c in credentials if c in p.read_text("utf-8")))
    }
    assert offenders == {}
