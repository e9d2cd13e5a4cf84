"""The advisor catalogue: every model backend the reasoning may consult, declared once, in config.

An advisor is *configured* when every credential variable it names is present in the environment
(presence only: the value is never read) and *installed* when the executable it names is on PATH.
Whether it may be asked now is for ``availability``; whether it should be is for ``policy``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["KNOWN_CAPABILITIES", "Advisor", "Catalogue", "Presence", "catalogue_from_config"]

KNOWN_CAPABILITIES: Final = ("propose", "cost_review", "independent_reasoning")


class Advisor(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    name: str
    adapter: str
    """The transport, named in config; its adapter module does the exchange."""
    provider: str
    model: str
    capabilities: tuple[str, ...] = Field(min_length=1)
    local: bool = False
    """Runs on this machine: the only kind mode ``offline`` admits."""
    credential_env: tuple[str, ...] = ()
    executable: str | None = None
    module: str | None = None
    """Import path of the adapter module when it lives outside the package."""
    options: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True)
class Catalogue:
    advisors: tuple[Advisor, ...] = ()

    def get(self, advisor_id: str) -> Advisor | None:
        return next((a for a in self.advisors if a.id == advisor_id), None)

    def index(self, advisor_id: str) -> int:
        return next(i for i, a in enumerate(self.advisors) if a.id == advisor_id)


@dataclass(frozen=True)
class Presence:
    """What the machine offers, asked as yes/no questions only (never a credential's value)."""

    env_names: frozenset[str] = field(default_factory=frozenset)
    has_executable: Callable[[str], bool] = lambda _name: False

    @classmethod
    def of_this_machine(cls, environ: Mapping[str, str] | None = None) -> Presence:
        environ = os.environ if environ is None else environ
        names = frozenset(name for name, value in environ.items() if value)
        return cls(env_names=names, has_executable=lambda name: shutil.which(name) is not None)


def catalogue_from_config(entries: Sequence[Mapping[str, Any]]) -> Catalogue:
    return Catalogue(tuple(Advisor.model_validate(dict(entry)) for entry in entries))
