"""Configuration: TOML, validated against ``shared/schemas/config.schema.json``, read once.

Stop criteria and budget caps are required: a run without them could loop without bound. Every
error names the file, the key path and what is wrong, and the CLI maps it to exit code 78
(EX_CONFIG), which systemd's ``RestartPreventExitStatus=78`` will not restart into a loop.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import jsonschema
from jsonschema.exceptions import ValidationError
from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as ModelError

from .context.frame import FrameRule
from .context.frame_inputs import UncertaintyDriver
from .context.reference import ReferenceRule
from .context.reference_version import RefitPolicy
from .resources import default_config_path, load_schema

__all__ = [
    "EX_CONFIG",
    "Config",
    "ConfigError",
    "effective_settings",
    "load_config",
    "overlay",
    "parse_config",
]

EX_CONFIG = 78

Mode = Literal["standard", "offline", "ci", "fast", "strict"]


class ConfigError(Exception):
    """The configuration cannot be used; ``str(exc)`` is one sentence naming file and key."""


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Materiality(_Section):
    material_share: float = 0.005
    high_share: float = 0.02
    critical_share: float = 0.05


class Reasoning(_Section):
    mode: Mode | None = None
    materiality: Materiality = Materiality()
    review_capabilities: tuple[str, ...] = ("cost_review", "independent_reasoning")
    refusal_memory_hours: float = Field(default=168.0, gt=0, allow_inf_nan=False)
    """How long a request form an advisor refused (structured output, the cap field) is not
    asked for again; after that it is tried again, as a server upgraded since may accept it."""


class Stop(_Section):
    max_attempts: int
    max_rounds: int
    max_candidates: int
    run_timeout_seconds: float


class Budget(_Section):
    run_tokens: int
    portfolio_tokens: int
    call_tokens: int
    propose_output_tokens: int = 2048
    check_output_tokens: int = 512


class Context(_Section):
    budget_chars: int = 24_000


class Reference(_Section):
    min_comparables: int = 4
    threshold: float = 2.65
    possible_threshold: float = 2.0
    min_excess: float = 0.10
    min_spread: float = 0.02
    shrink_comparables: int = 4
    min_saving_nok: float = 50_000
    min_share: float = 0.001
    rerun_band: float = Field(default=0.05, ge=0, le=1)
    """A project is run again for its reference candidates only when one of their savings moved
    by more than this share of what its latest run was identified by, and by at least half
    ``min_saving_nok`` (or a candidate or a grade came or went): one more project moves
    thousands of others' savings by a rounding step. On by default (DESIGN §12); 0: a rerun
    whenever any saving moved."""
    refit_quiet_s: float = Field(default=30.0, ge=0, le=86_400)
    """The reference fit's next version waits until no project has arrived for this long: an
    arriving project is scored against the current version at once (DESIGN §12)."""
    refit_every: int = Field(default=20, ge=1, le=100_000)
    """… or until this many have arrived since the current version, whichever comes first."""

    def rule(self) -> ReferenceRule:
        return ReferenceRule(
            **self.model_dump(exclude={"rerun_band", "refit_quiet_s", "refit_every"})
        )

    def refit(self) -> RefitPolicy:
        return RefitPolicy(self.refit_quiet_s, self.refit_every)


class Uncertainty(_Section):
    seed: int = Field(default=3459, ge=0, lt=2**32)
    """The uncertainty frame's seed: its figures are a function of the bundle and this."""
    samples: int = Field(default=10_000, ge=1_000, le=320_000)
    """Samples to begin with; doubled until P85 is stable to 0.5 %."""
    spread: tuple[float, float] | None = (0.9, 1.25)
    """A line with no triple estimate is assumed to range from this share of its amount to this
    one (the report marks it as assumed); None: it is taken as certain."""
    spreads: dict[str, tuple[float, float]] = Field(default_factory=dict)
    """Maturity ranges by account, for the lines whose code begins with the key (the longest key
    wins), each its own driver."""
    divergence: float = Field(default=0.10, gt=0, le=1)
    repair: Literal["off", "nearest"] = "off"
    """A project's correlation_between that is no correlation matrix: refused ("off"), or
    simulated with the nearest correlation matrix ("nearest"), which the report states."""
    drivers: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """General uncertainty drivers by id, for a project that names none of that id."""

    def rule(self) -> FrameRule:
        return FrameRule(
            seed=self.seed,
            samples=self.samples,
            spread=self.spread,
            spreads=tuple(sorted(self.spreads.items())),
            drivers=tuple(
                UncertaintyDriver.model_validate(
                    {**given, "id": name, "source": f"[uncertainty.drivers] {name}"}
                )
                for name, given in sorted(self.drivers.items())
            ),
            divergence=self.divergence,
            repair=self.repair == "nearest",
        )


def _spread_problems(uncertainty: Mapping[str, Any]) -> list[str]:
    """Each assumed spread that would not hold a line's amount between its minimum and maximum."""
    given = [("spread", uncertainty.get("spread"))]
    given += [(f"spreads.{code}", v) for code, v in uncertainty.get("spreads", {}).items()]
    found = [
        f"uncertainty.{where}: [{spread[0]}, {spread[1]}] must be a minimum share from 0 to 1 and "
        "a maximum share of at least 1 of a line's amount, e.g. [0.9, 1.25]"
        for where, spread in given
        if spread is not None and not 0 <= spread[0] <= 1 <= spread[1]
    ]
    for name, driver in sorted(uncertainty.get("drivers", {}).items()):
        try:
            UncertaintyDriver.model_validate({**driver, "id": name})
        except ModelError as exc:
            reason = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
            found.append(f"uncertainty.drivers.{name}: {reason}")
    return found


class Bundles(_Section):
    measure_types: tuple[str, ...] = ()
    """Measure types of this organisation's own, allowed beside the documented list."""
    units: tuple[str, ...] = ()
    """Units of this organisation's own (an IT project's users), beside the vocabulary."""


class Imports(_Section):
    max_bytes: int = Field(default=200 * 1024 * 1024, ge=1)
    """A csv estimate larger than this is refused from its size, before a byte of it is read: far
    past any kalkyle (the daemon's inbox takes 50 MiB), and a bound on what one import reads."""


class Verdicts(_Section):
    require_signature: Literal["off", "approvals", "all"] = "off"
    """Which verdicts need a signature from a key ``config/allowed_signers`` allows: off (one is
    checked when given), approvals, or all."""


class Daemon(_Section):
    stability_seconds: float = 5.0
    rescan_seconds: float = 60.0
    verdict_quiet_seconds: float = 3.0
    max_bundle_bytes: int = 50 * 1024 * 1024
    retry_limit: int = 5
    retry_backoff_seconds: float = 30.0


class Scale(_Section):
    database_url: str = ""
    """PostgreSQL for the ledger and the workflows (``PORTFOLIO_OPTIMISER_DATABASE_URL`` wins);
    empty: SQLite files in the state directory."""
    executor_id: str = ""
    """This machine's name among the workers; empty: its host name (``PORTFOLIO_OPTIMISER_EXECUTOR``
    wins, so machines that share the config file need not share a name)."""
    jobs_at_once: int = Field(default=0, ge=0)
    """On a shared database: bundle jobs under way at once across every machine (0: one per
    worker, no cap beyond)."""


class Config(_Section):
    stop: Stop
    budget: Budget
    advisors: tuple[dict[str, Any], ...] = ()
    data_source: dict[str, Any] = Field(default_factory=lambda: {"kind": "bundle"})
    reasoning: Reasoning = Reasoning()
    context: Context = Context()
    reference: Reference = Reference()
    uncertainty: Uncertainty = Uncertainty()
    bundles: Bundles = Bundles()
    imports: Imports = Imports()
    verdicts: Verdicts = Verdicts()
    daemon: Daemon = Daemon()
    scale: Scale = Scale()
    source: str = ""
    """The file read over the packaged default (the default's own path when none was)."""
    overrides: tuple[str, ...] = ()
    """The key paths that file set (``verdicts.require_signature``): where each value came from."""


def load_config(path: Path | None = None) -> Config:
    """The packaged default, overlaid by ``path`` (a workspace's file names only what it
    changes): tables merge key by key, any other value (a list of advisors too) is replaced."""
    default = default_config_path()
    base = _read(default)
    if path is None or path.resolve() == default.resolve():
        return parse_config(base, source=str(default))
    changes = _read(path)
    return parse_config(overlay(base, changes), source=str(path), overrides=tuple(_leaves(changes)))


def overlay(base: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``changes`` laid over it (pure): a table merges key by key; any other value
    replaces the base's, a list included. So ``[[advisors]]`` in a file is the whole catalogue:
    an advisor merged into the packaged ones by its id would be consulted beside advisors the
    file never named."""
    merged = dict(base)
    for key, value in changes.items():
        before = merged.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            merged[key] = overlay(before, value)
        else:
            merged[key] = value
    return merged


def _leaves(data: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The key paths a file sets, each table's keys down to its values (an advisor whole)."""
    found: list[str] = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            found += _leaves(value, f"{path}.")
        else:
            found.append(path)
    return found


def effective_settings(config: Config) -> list[tuple[str, Any, str]]:
    """Every setting in effect, as (key path, value, where it came from): the file that set it,
    else the packaged default. For ``doctor --config``."""
    data = config.model_dump(mode="json", exclude={"source", "overrides"})
    return [
        (path, value, config.source if _set_by(path, config.overrides) else "packaged default")
        for path, value in _flat(data)
    ]


def _set_by(path: str, overrides: tuple[str, ...]) -> bool:
    return any(path == o or path.startswith(f"{o}.") or o.startswith(f"{path}.") for o in overrides)


def _flat(data: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            found += _flat(value, f"{path}.")
        else:
            found.append((path, value))
    return found


def _read(path: Path) -> dict[str, Any]:
    """One TOML file, or the one sentence saying why it cannot be read."""
    shown = str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{shown}: no such config file; check --config or create it") from None
    except OSError as exc:
        raise ConfigError(
            f"{shown}: cannot be read ({exc.strerror}); check its permissions"
        ) from None
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        raise ConfigError(f"{shown}: is not UTF-8 text; save it as UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{shown}: is not valid TOML: {exc}; fix that line") from None
    return data


def _non_finite(data: Any, path: str = "") -> tuple[str, float] | None:
    """TOML allows inf and nan; a cap or a timeout of inf is no cap at all."""
    if isinstance(data, float) and not math.isfinite(data):
        return path, data
    items = (
        data.items()
        if isinstance(data, Mapping)
        else enumerate(data)
        if isinstance(data, list)
        else ()
    )
    for key, value in items:
        found = _non_finite(value, f"{path}.{key}" if path else str(key))
        if found:
            return found
    return None


def parse_config(
    data: Mapping[str, Any], *, source: str = "config", overrides: tuple[str, ...] = ()
) -> Config:
    """A whole configuration, validated (``load_config`` lays a file over the default first)."""
    bad = _non_finite(data)
    if bad:
        raise ConfigError(
            f"{source}: {bad[0]}: {bad[1]} is not a finite number; write a plain number"
        )
    validator = jsonschema.Draft202012Validator(load_schema("config.schema.json"))
    errors = sorted(
        validator.iter_errors(data), key=lambda e: (list(map(str, e.absolute_path)), e.message)
    )
    if errors:
        raise ConfigError(f"{source}: {_describe(errors[0])}")
    materiality = data.get("reasoning", {}).get("materiality", {})
    shares = [materiality.get(k) for k in ("material_share", "high_share", "critical_share")]
    present = [s for s in shares if s is not None]
    if present != sorted(present):
        raise ConfigError(
            f"{source}: reasoning.materiality: the shares must rise from material_share to "
            "critical_share; reorder them"
        )
    spreads = _spread_problems(data.get("uncertainty", {}))
    if spreads:
        raise ConfigError(f"{source}: " + "; ".join(spreads))
    if "data_source" in data:
        problems = sorted(
            jsonschema.Draft202012Validator(load_schema("datasource.schema.json")).iter_errors(
                data["data_source"]
            ),
            key=lambda e: list(map(str, e.absolute_path)),
        )
        if problems:
            inner = _describe(problems[0])
            raise ConfigError(
                f"{source}: data_source.{inner}"
                if not inner.startswith("top level")
                else f"{source}: data_source: {inner[11:]}"
            )
    seen: set[str] = set()
    for number, advisor in enumerate(data.get("advisors", []), start=1):
        if advisor["id"] in seen:
            raise ConfigError(
                f"{source}: advisors[{number}].id: {advisor['id']!r} is declared twice; ids are unique"
            )
        seen.add(advisor["id"])
    return Config.model_validate({**data, "source": source, "overrides": overrides})


def _describe(error: ValidationError) -> str:
    path = ".".join(str(p) for p in error.absolute_path)
    at = path or "top level"
    kind = error.validator
    if kind == "required":
        missing = re.search(r"'([^']+)' is a required property", error.message)
        key = missing.group(1) if missing else "?"
        full = f"{path}.{key}" if path else key
        what = (
            "a stop criterion"
            if "stop" in full
            else "a budget cap"
            if "budget" in full
            else "a key"
        )
        return f"{full} is missing; it is {what} and is required, so add it"
    if kind == "additionalProperties":
        extra = re.findall(r"'([^']+)'", error.message)
        schema = error.schema if isinstance(error.schema, Mapping) else {}
        known = ", ".join(sorted(schema.get("properties", {})))
        key = f"{path}.{extra[0]}" if path and extra else (extra[0] if extra else "?")
        return f"{key} is not a known key; check its spelling (known here: {known})"
    if kind == "type":
        wanted = str(error.validator_value)
        article = "an" if wanted[:1] in "aeiou" else "a"
        return f"{at}: {error.instance!r} is not {article} {wanted}; write {article} {wanted}"
    if kind == "const":
        return f"{at}: {error.instance!r} is not supported; write {error.validator_value!r}"
    if kind == "enum":
        choices = ", ".join(str(v) for v in list(error.validator_value))  # type: ignore[arg-type]
        return f"{at}: {error.instance!r} is not one of {choices}"
    if kind in {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}:
        bound = {
            "minimum": "at least",
            "exclusiveMinimum": "above",
            "maximum": "at most",
            "exclusiveMaximum": "below",
        }[kind]
        return f"{at}: {error.instance!r} must be {bound} {error.validator_value}"
    return f"{at}: {error.message}"
