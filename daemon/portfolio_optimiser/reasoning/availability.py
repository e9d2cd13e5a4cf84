"""Availability: each advisor's state, derived from the recorded consultations and the clock.

Decides: may this advisor be asked now, and if not, why. Never stores anything and never needs a
reset: the circuit breaker is a pure function of the history of outcomes, so the records are the
only state. Cooldowns are named constants; ``PORTFOLIO_OPTIMISER_REASONING_COOLDOWN_SECONDS``
overrides every one of them (for instance ``0`` right after fixing a credential).

| newest counting outcome | state until the cooldown ends |
|---|---|
| completed | available (circuit closed) |
| auth_failed | auth_failed for AUTH_COOLDOWN_S |
| rate_limited | rate_limited for its retry-after, else RATE_LIMIT_COOLDOWN_S |
| timeout / unavailable / error, the FAILURES_TO_OPEN-th in a row | temporarily_failed for FAILURE_COOLDOWN_S |

After a cooldown the advisor is available and marked ``recovering``: its next answer closes the
circuit (completed) or opens it again (another failure). ``malformed``, ``empty`` and ``cancelled``
concern one exchange and say nothing about the advisor, so they never count; nor does
``unsupported`` (a refused request form, such as an output mode the server does not offer).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final

from .catalogue import Advisor, Catalogue, Presence
from .modes import Mode

__all__ = [
    "AUTH_COOLDOWN_S",
    "FAILURES_TO_OPEN",
    "FAILURE_COOLDOWN_S",
    "RATE_LIMIT_COOLDOWN_S",
    "AdvisorState",
    "AdvisorStatus",
    "AvailabilityInputs",
    "Circuit",
    "ConsultationStatus",
    "Outcome",
    "derive_availability",
    "disabled_from_env",
]

FAILURES_TO_OPEN: Final = 2
FAILURE_COOLDOWN_S: Final = 600.0
RATE_LIMIT_COOLDOWN_S: Final = 900.0
AUTH_COOLDOWN_S: Final = 3600.0
MAX_COOLDOWN_S: Final = 86_400.0


class ConsultationStatus(StrEnum):
    COMPLETED = "completed"
    TIMEOUT = "timeout"
    RATE_LIMITED = "rate_limited"
    AUTH_FAILED = "auth_failed"
    MALFORMED = "malformed"
    EMPTY = "empty"
    UNAVAILABLE = "unavailable"
    CANCELLED = "cancelled"
    UNSUPPORTED = "unsupported"
    """The advisor refused a request *form* (an output mode, an output-cap field): not a failure."""
    ERROR = "error"

    @property
    def is_transient(self) -> bool:
        return self in {
            ConsultationStatus.TIMEOUT,
            ConsultationStatus.UNAVAILABLE,
            ConsultationStatus.ERROR,
        }

    @property
    def counts_against_advisor(self) -> bool:
        """Malformed, empty, cancelled and unsupported concern one exchange, not the advisor."""
        return self not in {
            ConsultationStatus.MALFORMED,
            ConsultationStatus.EMPTY,
            ConsultationStatus.CANCELLED,
            ConsultationStatus.UNSUPPORTED,
        }


class AdvisorStatus(StrEnum):
    AVAILABLE = "available"
    NOT_CONFIGURED = "not_configured"
    NOT_INSTALLED = "not_installed"
    DISABLED = "disabled"
    TEMPORARILY_FAILED = "temporarily_failed"
    RATE_LIMITED = "rate_limited"
    AUTH_FAILED = "auth_failed"


@dataclass(frozen=True)
class Outcome:
    """One recorded consultation, as the breaker reads it."""

    advisor: str
    status: ConsultationStatus
    at: datetime
    retry_after_s: float | None = None
    order: int = 0
    """Position in the store, so outcomes recorded at the same instant keep their order."""


@dataclass(frozen=True)
class Circuit:
    opened_by: ConsultationStatus
    failures: int
    until: datetime


@dataclass(frozen=True)
class AdvisorState:
    advisor: str
    adapter: str
    local: bool
    capabilities: tuple[str, ...]
    status: AdvisorStatus
    reason: str
    recovering: bool = False
    circuit: Circuit | None = None

    @property
    def available(self) -> bool:
        return self.status is AdvisorStatus.AVAILABLE


@dataclass(frozen=True)
class AvailabilityInputs:
    """Everything availability depends on; holding it in one value is what keeps it pure."""

    mode: Mode
    now: datetime
    history: Sequence[Outcome] = ()
    presence: Presence = field(default_factory=Presence)
    disabled: frozenset[str] = frozenset()
    """Advisor ids switched off by PORTFOLIO_OPTIMISER_ADVISORS_DISABLE; ``all`` switches off all."""
    cooldown_override_s: float | None = None


def disabled_from_env(environ: Mapping[str, str]) -> frozenset[str]:
    raw = environ.get("PORTFOLIO_OPTIMISER_ADVISORS_DISABLE", "")
    return frozenset(part.strip() for part in raw.split(",") if part.strip())


def derive_availability(catalogue: Catalogue, inputs: AvailabilityInputs) -> list[AdvisorState]:
    """One state per advisor, in declaration order."""
    return [_state(advisor, inputs) for advisor in catalogue.advisors]


def _state(advisor: Advisor, inputs: AvailabilityInputs) -> AdvisorState:
    def state(status: AdvisorStatus, reason: str, **extra: object) -> AdvisorState:
        return AdvisorState(
            advisor=advisor.id,
            adapter=advisor.adapter,
            local=advisor.local,
            capabilities=advisor.capabilities,
            status=status,
            reason=reason,
            **extra,  # type: ignore[arg-type]
        )

    if "all" in inputs.disabled or advisor.id in inputs.disabled:
        return state(AdvisorStatus.DISABLED, "switched off by PORTFOLIO_OPTIMISER_ADVISORS_DISABLE")
    if inputs.mode is Mode.CI:
        return state(AdvisorStatus.DISABLED, "mode ci admits no advisor")
    if inputs.mode is Mode.OFFLINE and not advisor.local:
        return state(
            AdvisorStatus.DISABLED, "mode offline admits only advisors that run on this machine"
        )
    missing = [name for name in advisor.credential_env if name not in inputs.presence.env_names]
    if missing:
        return state(
            AdvisorStatus.NOT_CONFIGURED, f"credential variable {', '.join(missing)} is not set"
        )
    if advisor.executable and not inputs.presence.has_executable(advisor.executable):
        return state(AdvisorStatus.NOT_INSTALLED, f"{advisor.executable} is not on PATH")

    counting = sorted(
        (o for o in inputs.history if o.advisor == advisor.id and o.status.counts_against_advisor),
        key=lambda o: (o.at, o.order, str(o.status)),
    )
    circuit, why = _replay(counting, inputs.cooldown_override_s)
    if circuit is None:
        return state(AdvisorStatus.AVAILABLE, why)
    if inputs.now < circuit.until:
        return state(
            _OPENED_AS[circuit.opened_by],
            f"{why}; cooling down until {circuit.until.isoformat()}",
            circuit=circuit,
        )
    return state(
        AdvisorStatus.AVAILABLE,
        f"recovering after {why}; its next answer closes or re-opens the circuit",
        recovering=True,
        circuit=circuit,
    )


_OPENED_AS: Final = {
    ConsultationStatus.AUTH_FAILED: AdvisorStatus.AUTH_FAILED,
    ConsultationStatus.RATE_LIMITED: AdvisorStatus.RATE_LIMITED,
    ConsultationStatus.TIMEOUT: AdvisorStatus.TEMPORARILY_FAILED,
    ConsultationStatus.UNAVAILABLE: AdvisorStatus.TEMPORARILY_FAILED,
    ConsultationStatus.ERROR: AdvisorStatus.TEMPORARILY_FAILED,
}


def _replay(outcomes: Sequence[Outcome], override_s: float | None) -> tuple[Circuit | None, str]:
    """Replay the outcomes, oldest first, through the breaker; return the circuit left open, if any.

    Closed: a completed answer keeps it closed; an auth failure or a rate limit opens it at once;
    FAILURES_TO_OPEN transient failures in a row open it. Half-open (an outcome after the cooldown
    ended): one failure of any kind opens it again.
    """
    circuit: Circuit | None = None
    failures = transient_run = 0
    why = "ready"
    for outcome in outcomes:
        half_open = circuit is not None and outcome.at >= circuit.until
        if outcome.status is ConsultationStatus.COMPLETED:
            circuit, failures, transient_run = None, 0, 0
            why = "its last answer closed the circuit"
            continue
        failures += 1
        transient_run = transient_run + 1 if outcome.status.is_transient else 0
        if outcome.status is ConsultationStatus.AUTH_FAILED:
            cooldown, reason = AUTH_COOLDOWN_S, "the provider refused its credential"
        elif outcome.status is ConsultationStatus.RATE_LIMITED:
            retry = outcome.retry_after_s
            cooldown, reason = (
                (retry if retry is not None else RATE_LIMIT_COOLDOWN_S),
                "the provider asked to slow down",
            )
        elif half_open or transient_run >= FAILURES_TO_OPEN:
            cooldown = FAILURE_COOLDOWN_S
            reason = (
                f"a {outcome.status} while recovering"
                if half_open
                else f"{transient_run} consecutive failures ({outcome.status})"
            )
        else:
            if circuit is None:
                why = f"one {outcome.status} since its last answer; not enough to open the circuit"
            continue
        # Bounded: a record from an older writer (or a hand edit) must not overflow the clock.
        wait_s = min(MAX_COOLDOWN_S, override_s if override_s is not None else cooldown)
        until = outcome.at + timedelta(seconds=wait_s if math.isfinite(wait_s) else MAX_COOLDOWN_S)
        if circuit is None or half_open or until >= circuit.until:
            circuit, why = Circuit(opened_by=outcome.status, failures=failures, until=until), reason
    return circuit, why
