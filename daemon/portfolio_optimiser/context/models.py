"""The IR: a project's structured data as read from its bundle, and the candidates proposed for it.

Amounts are NOK as the planner wrote them (``int`` or ``float``). A candidate's id is minted from
what it is (DESIGN §11): the project, the codes, the measure type, and what tells it from another
candidate of that type on those codes. For a reference price, which the portfolio computes and
moves whenever a project arrives, that is the line's unit: the saving is a field that moves under
a standing id, so a verdict keeps applying. For a measure a person or a model wrote, it is the
saving *literal* as written: ``30000`` and ``30000.0`` are different literals and so different
candidates. Nothing here normalises a magnitude, because a normalising writer would split one
candidate's learned signal across two ids.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from decimal import Decimal, InvalidOperation
from typing import Any, Final, Literal

from pydantic import Field, computed_field, field_validator, model_validator

from .frame_inputs import (
    Outcome,
    Uncertainty,
    UncertaintyDriver,
    coefficients_between,
    group_coefficients,
)
from .ir_types import IR as _IR
from .ir_types import Money
from .ir_types import finite as _finite

__all__ = [
    "COMPUTED",
    "REFERENCE_PRICE",
    "UNBALANCED_BID",
    "Candidate",
    "CostLine",
    "LearnedRate",
    "MeasureOption",
    "Money",
    "Project",
    "Uncertainty",
    "UncertaintyDriver",
    "candidate_key_literal",
    "identity_literal",
    "mint_candidate_id",
]

REFERENCE_PRICE: Final = "reference_price"
UNBALANCED_BID: Final = "unbalanced_bid"
"""A tender's post priced far below what the portfolio has paid: a risk, never a saving (it
claims 0 NOK; what is at stake is its own field)."""
COMPUTED: Final = frozenset({REFERENCE_PRICE, UNBALANCED_BID})
"""Measure types the reference classes find: identified by their line and unit, not a figure."""
"""The measure type of a line priced above its reference: its saving is computed, never written."""


def _same_number(literal: str, value: Money) -> bool:
    try:
        return Decimal(literal) == Decimal(str(value))
    except InvalidOperation:
        return False


class CostLine(_IR):
    """One account of the estimate (NS 3453 / Prosesskode style)."""

    code: str = Field(min_length=1)
    title: str = ""
    amount_nok: Money
    quantity: Money | None = None
    unit: str | None = None
    unit_price_nok: Money | None = None
    min_nok: Money | None = None
    likely_nok: Money | None = None
    max_nok: Money | None = None
    distribution: Literal["pert", "triangular", "normal"] = "pert"
    """How the triple estimate is drawn in the uncertainty frame (``context.uncertainty``)."""
    correlation_group: str | None = Field(default=None, min_length=1, max_length=60)
    """The correlation group the line's uncertainty moves with (the project's ``correlation``
    gives its coefficient)."""
    ns3451: str | None = None
    """The NS 3451 building part, where the source names it."""
    ns3420: str | None = None
    """The NS 3420 description code (``AV1.1``), where the source names it: lines of one
    description and unit are priced alike across projects, whatever their post numbers."""
    post: bool = False
    """The code is a post number of its estimate, not an account: the line is compared across
    projects by its NS 3420 code, and not at all without one."""
    imported_from: str | None = None
    """Where an imported line stands in the planner's own file: ``kalkyle.xlsx, sheet Bygg, row
    14`` or ``tilbud.xml, post 01.12.1 (ID …)``."""
    source: str = ""

    _amounts = field_validator(
        "amount_nok", "quantity", "unit_price_nok", "min_nok", "likely_nok", "max_nok"
    )(lambda v: v if v is None else _finite(v))

    @property
    def compared_as(self) -> str | None:
        """What the portfolio compares the line under: its NS 3420 code, else its account."""
        if self.ns3420:
            return self.ns3420
        return None if self.post else self.code

    @model_validator(mode="after")
    def _triple_is_ordered(self) -> CostLine:
        triple = [v for v in (self.min_nok, self.likely_nok, self.max_nok) if v is not None]
        if triple != sorted(triple):
            raise ValueError("min_nok, likely_nok and max_nok must be in rising order")
        low, high = self.min_nok, self.max_nok
        if (low is None) != (high is None) or (low is None and self.likely_nok is not None):
            raise ValueError(
                "a triple estimate needs both min_nok and max_nok (likely_nok is optional: the "
                "amount is the most likely figure without it); give both or none"
            )
        if low is None or high is None:
            return self
        likely = self.likely_nok if self.likely_nok is not None else self.amount_nok
        if self.likely_nok is None and not low <= likely <= high:
            raise ValueError(
                f"amount_nok {likely!r} is outside min_nok {low!r} to max_nok {high!r}, and no "
                "likely_nok is given; give likely_nok or correct the range"
            )
        if self.distribution == "normal" and not math.isclose(
            likely - low, high - likely, rel_tol=1e-9, abs_tol=0.5
        ):
            raise ValueError(
                "distribution normal is symmetric: its most likely figure must lie midway from "
                "min_nok to max_nok (its P10 and P90); use pert or triangular for a skewed one"
            )
        return self


class MeasureOption(_IR):
    """One item of the kuttliste: a known, implementable reduction."""

    id: str = Field(min_length=1)
    title: str = ""
    measure_type: str = Field(min_length=1)
    affected_codes: tuple[str, ...] = Field(min_length=1)
    estimated_saving_nok: Money
    effect: Literal["fixed", "proportional"] = "fixed"
    """How the item acts in the uncertainty frame: ``fixed``, a sum off its lines (their spread
    kept); ``proportional``, a share of its lines (their spread cut by that share)."""
    saving_min_nok: Money | None = None
    saving_max_nok: Money | None = None
    """The saving's own range (with ``estimated_saving_nok`` its most likely figure): the frame
    draws it, so a cut that may save less than hoped raises P85 by what it may fall short."""
    quantity: Money | None = None
    unit: str | None = None
    unit_price_nok: Money | None = None
    latest_decision_point: str | None = None
    decide_by: str | None = None
    """The same as ``latest_decision_point`` (a date first, or a phase), by its shorter name."""
    delta_p50_nok: Money | None = None
    """What the item, adopted now, does to P50, as the planner states it (the validator
    reproduces it from the uncertainty frame, or refuses it)."""
    delta_p85_nok: Money | None = None
    consequence: str | None = None
    description: str | None = None
    imported_from: str | None = None
    """Where an imported kuttliste holds the item: ``kalkyle.xlsx, sheet 'Kuttliste', row 4``."""
    source: str = ""
    id_minted: bool = False
    """The file named no ``id``; this one was minted from its path (``ir.minted_id``)."""

    _amounts = field_validator(
        "estimated_saving_nok",
        "saving_min_nok",
        "saving_max_nok",
        "quantity",
        "unit_price_nok",
        "delta_p50_nok",
        "delta_p85_nok",
    )(lambda v: v if v is None else _finite(v))

    @model_validator(mode="after")
    def _consistent(self) -> MeasureOption:
        low, high = self.saving_min_nok, self.saving_max_nok
        if (low is None) != (high is None):
            raise ValueError("a saving's range needs both saving_min_nok and saving_max_nok")
        if (
            low is not None
            and high is not None
            and not 0 <= low <= self.estimated_saving_nok <= high
        ):
            raise ValueError(
                "saving_min_nok, estimated_saving_nok and saving_max_nok must rise from 0"
            )
        given = (self.latest_decision_point, self.decide_by)
        if None not in given and given[0] != given[1]:
            raise ValueError(
                "latest_decision_point and decide_by name two decision points; keep one"
            )
        return self

    @property
    def decision_point(self) -> str | None:
        return self.latest_decision_point or self.decide_by


class Project(_IR):
    """A project as projected from its bundle: header figures, cost lines and kuttliste."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$", max_length=80)
    name: str = Field(min_length=1)
    currency: Literal["NOK"] = "NOK"
    base_estimate_nok: Money | None = None
    p50_nok: Money | None = None
    p85_nok: Money | None = None
    total_budget_nok: Money | None = None
    category: str | None = Field(default=None, max_length=60)
    """What kind of project (school, road, hospital): comparables come from the same kind first."""
    document: Literal["estimate", "tender", "price-request"] | None = None
    """What the bundle is: a tender (``Pristilbud``) is checked post by post against the
    portfolio, a price request (``Prisforespørsel``) priced from it; None: an estimate."""
    derived_from: str | None = None
    """Set on a bundle priced from the portfolio itself (a price request's, ``reference
    <version>``): its prices are the portfolio's own, so it is never a comparable."""
    correlation: dict[str, float] = Field(default_factory=dict)
    """Each correlation group's coefficient (0 to 1): the lines of a group move together in the
    uncertainty frame; lines of different groups, or of none, independently."""

    correlation_between: dict[str, dict[str, float]] = Field(default_factory=dict)
    """Coefficients (-1 to 1) between correlation groups' factors and drivers' scores
    (``context.correlation``): a group's lines then move with another group, or a driver."""

    _between = field_validator("correlation_between", mode="before")(coefficients_between)
    _coefficients = field_validator("correlation", mode="before")(group_coefficients)

    @field_validator("category", mode="before")
    @classmethod
    def _one_spelling(cls, value: object) -> object:
        return " ".join(value.lower().split()) or None if isinstance(value, str) else value

    cost_lines: tuple[CostLine, ...] = ()
    measure_options: tuple[MeasureOption, ...] = ()
    uncertainties: tuple[Uncertainty, ...] = ()
    """The bundle's ``type: uncertainty`` elements: in the uncertainty frame, beside its lines."""
    drivers: tuple[UncertaintyDriver, ...] = ()
    """The bundle's ``type: uncertainty-driver`` concepts: factors on the lines they name."""
    outcome: Outcome | None = None
    """The final cost, for a finished project (``type: outcome``)."""
    files: frozenset[str] = frozenset()
    """Bundle-relative paths of every markdown file inside the bundle (for evidence checks)."""
    source: str = ""

    def line(self, code: str) -> CostLine | None:
        return next((line for line in self.cost_lines if line.code == code), None)

    @property
    def codes(self) -> frozenset[str]:
        return frozenset(line.code for line in self.cost_lines)

    @property
    def cost_total_nok(self) -> float:
        return math.fsum(line.amount_nok for line in self.cost_lines)


def candidate_key_literal(value: Money | str) -> str:
    """The saving exactly as written: ``str()`` of the parsed number, never a normalised value."""
    if isinstance(value, str):
        return value
    return str(value)


def identity_literal(measure_type: str, saving_literal: str, unit: str | None) -> str:
    """What tells a candidate from another of its type on its codes: a reference price's unit
    (its saving moves with the portfolio, its line does not), else the saving as written. A
    reference price that names no unit (a model's proposal, a verdict written before units)
    keeps its saving: ``unit:`` alone would make every such proposal on a code one candidate."""
    if measure_type in COMPUTED and unit:
        return f"unit:{unit}"
    return saving_literal


def mint_candidate_id(
    project_id: str, affected_codes: tuple[str, ...], measure_type: str, saving_literal: str
) -> str:
    """``c-`` and 16 hex digits of the key's SHA-256. Codes are a set; the last part is
    :func:`identity_literal`'s (a saving literal, or a reference price's unit).

    The key is a JSON array, so nothing collides by containing a separator: ``("a,b",)`` and
    ``("a", "b")`` are different keys.
    """
    key = json.dumps(
        [project_id, sorted(set(affected_codes)), measure_type, saving_literal], ensure_ascii=False
    )
    return "c-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


_minted = functools.lru_cache(maxsize=1 << 16)(mint_candidate_id)
"""``mint_candidate_id`` for a validated candidate's fields (a tuple of codes, strings)."""


class LearnedRate(_IR):
    """How a measure approved in another project was carried here, so its working can be shown:
    ``saving_nok / basis_there × basis_here × realisation``, rounded down to two figures."""

    project_id: str
    saving_nok: Money
    """The saving approved there (the adjusted one, where the expert adjusted it)."""
    basis_there: Money
    basis_here: Money
    unit: str | None = None
    """The unit both bases are quantities in; None: both are the affected lines' cost in NOK."""
    realisation: float | None = None
    """The realisation rate the expert gave; None: none given, so taken as 1."""


class Candidate(_IR):
    """A proposed savings measure for one project, before any falsifier has looked at it."""

    project_id: str
    affected_codes: tuple[str, ...] = Field(min_length=1)
    measure_type: str = Field(min_length=1)
    claimed_saving_nok: Money
    saving_literal: str = ""
    """The claimed saving as written; minted into the id. Filled from the number when absent."""
    title: str = ""
    rationale: str = ""
    evidence: tuple[str, ...] = ()
    """Links to concepts inside the bundle, bundle-rooted (``/cost/02.md``) or root-relative."""
    quantity: Money | None = None
    unit: str | None = None
    unit_price_nok: Money | None = None
    origin: str = ""
    """Where it came from: ``measure-option:k-01``, ``proposer``, ``verdict:<id>``."""
    decide_by: str | None = None
    """The latest decision point its measure names (a date or a phase), for the report."""
    grade: Literal["likely", "possible"] | None = None
    """How sure a computed candidate is (a reference price's grade); None for a written one."""
    claimed_delta_p50_nok: Money | None = None
    """What its source says it does to P50, adopted now: a claim the validator reproduces."""
    claimed_delta_p85_nok: Money | None = None
    learned_rate: LearnedRate | None = None
    """How a measure learned from a verdict (``origin`` ``verdict:``) was carried here."""
    at_stake_nok: Money | None = None
    """A risk's (``UNBALANCED_BID``) sum at stake: quantity × (the price expected − its price),
    what the owner pays beyond the bid if the quantity grows and the bidder claims the
    difference. Never a saving: a risk claims 0 NOK."""

    @property
    def is_risk(self) -> bool:
        return self.measure_type == UNBALANCED_BID

    @model_validator(mode="before")
    @classmethod
    def _literal_and_minted_id(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        saving = data.get("claimed_saving_nok")
        if not data.get("saving_literal") and isinstance(saving, int | float | str):
            data["saving_literal"] = candidate_key_literal(saving)
        literal, saving = data.get("saving_literal"), data.get("claimed_saving_nok")
        if (
            isinstance(literal, str)
            and isinstance(saving, int | float)
            and not isinstance(saving, bool)
        ) and not _same_number(literal, saving):
            raise ValueError(
                f"saving_literal {literal!r} does not write the claimed saving {saving!r}"
            )
        stated = data.pop("id", None)
        if stated is not None:
            measure_type = str(data.get("measure_type", ""))
            minted = mint_candidate_id(
                str(data.get("project_id", "")),
                tuple(data.get("affected_codes") or ()),
                measure_type,
                identity_literal(
                    measure_type, str(data.get("saving_literal", "")), data.get("unit")
                ),
            )
            if stated != minted:
                raise ValueError(
                    f"id {stated!r} does not match the candidate's key (expected {minted})"
                )
        return data

    _amounts = field_validator("claimed_saving_nok", "quantity", "unit_price_nok")(
        lambda v: v if v is None else _finite(v)
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def id(self) -> str:
        # Asked for at every record and lookup of a run: minted once per key, not each time.
        return _minted(
            self.project_id,
            self.affected_codes,
            self.measure_type,
            identity_literal(self.measure_type, self.saving_literal, self.unit),
        )
