"""Request forms negotiated per advisor: how structured output is asked for, and which field
carries the output cap.

Decides: the terms of the next exchange with an advisor, from its configuration and what it has
refused before. Servers that speak the same API differ here (one refuses ``response_format:
json_schema`` but accepts ``json_object`` with a schema and ignores ``max_completion_tokens``;
another refuses ``max_tokens``; the adapters' docstrings name them), so each feature has a
ladder, tried in order until the advisor accepts a form:

| feature | ladder | advisor option (``auto`` by default) |
|---|---|---|
| output_mode | json_schema → json_object → prompt | ``structured_output`` |
| cap_field | both → max_completion_tokens → max_tokens | ``output_cap_field`` |

``prompt`` puts the schema in the prompt and asks for nothing on the wire, so the ladder always
ends somewhere. A refusal is remembered from the recorded consultations (their ``refused``
field), never stored apart: the next run starts from the first form not refused within
``[reasoning] refusal_memory_hours`` (a week by default; an older refusal is tried again, since
a server upgraded in the meantime may accept the better form), and only while the server still
names the build it was refused under (the ``system_fingerprint`` a consultation records): once
it names another, the better form is tried again at once. A configured value is used as it is
and never walked. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final, Literal

from .catalogue import Advisor
from .records import ConsultationInput, StoredRecord

__all__ = [
    "AUTO",
    "CONFIG_KEYS",
    "LADDERS",
    "Feature",
    "Terms",
    "negotiated",
    "refused_by",
    "step_down",
]

Feature = Literal["output_mode", "cap_field"]
AUTO: Final = "auto"
LADDERS: Final[Mapping[Feature, tuple[str, ...]]] = {
    "output_mode": ("json_schema", "json_object", "prompt"),
    "cap_field": ("both", "max_completion_tokens", "max_tokens"),
}
CONFIG_KEYS: Final[Mapping[Feature, str]] = {
    "output_mode": "structured_output",
    "cap_field": "output_cap_field",
}


@dataclass(frozen=True)
class Terms:
    output_mode: str
    cap_field: str

    def value(self, feature: Feature) -> str:
        return self.output_mode if feature == "output_mode" else self.cap_field


def _configured(advisor: Advisor, feature: Feature) -> str | None:
    value = advisor.options.get(CONFIG_KEYS[feature], AUTO)
    return str(value) if value != AUTO and value in LADDERS[feature] else None


def refused_by(
    records: Iterable[StoredRecord], advisor_id: str, *, since: datetime | None = None
) -> frozenset[str]:
    """Every ``feature=value`` the advisor has refused, read from its recorded consultations —
    those recorded at ``since`` or later when given: a refusal older than the memory is asked
    for again (the server may have been upgraded since). So is one recorded under another build
    than the newest the server named (``server``): it was upgraded."""
    consulted = [
        (record.recorded_at, record.body)
        for record in records
        if isinstance(record.body, ConsultationInput) and record.body.advisor == advisor_id
    ]
    newest = next((body.server for _at, body in reversed(consulted) if body.server), None)
    return frozenset(
        form
        for at, body in consulted
        if (since is None or at >= since) and (newest is None or body.server in (None, newest))
        for form in body.refused
    )


def negotiated(advisor: Advisor, refused: Iterable[str] = ()) -> Terms:
    """The terms to open with: the configured form, else the first one not refused."""
    known = frozenset(refused)

    def pick(feature: Feature) -> str:
        fixed = _configured(advisor, feature)
        if fixed is not None:
            return fixed
        ladder = LADDERS[feature]
        return next((v for v in ladder if f"{feature}={v}" not in known), ladder[-1])

    return Terms(output_mode=pick("output_mode"), cap_field=pick("cap_field"))


def step_down(advisor: Advisor, terms: Terms, feature: Feature) -> Terms | None:
    """The terms after the advisor refused ``feature``'s current form; None when none is left."""
    if _configured(advisor, feature) is not None:
        return None
    ladder = LADDERS[feature]
    current = terms.value(feature)
    position = ladder.index(current) if current in ladder else len(ladder) - 1
    if position + 1 >= len(ladder):
        return None
    return replace(terms, **{feature: ladder[position + 1]})
