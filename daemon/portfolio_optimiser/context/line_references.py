"""A project's priced lines measured against the portfolio: the snapshot a run is identified by,
handed, checked against and explained by (``price_fit`` makes it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any, Literal

__all__ = ["Grade", "LineReference", "ProjectReferences"]

Grade = Literal["likely", "possible"]


@dataclass(frozen=True)
class LineReference:
    """One priced line measured against the portfolio: the snapshot a run is identified against,
    checked against and explained by."""

    code: str
    unit: str
    category: str | None
    """The category its comparables share, or None when taken across categories."""
    n: int
    """Other projects pricing this code in this unit (in ``category`` when one is named)."""
    median_nok: float
    """The comparables' median unit price, as written."""
    expected_nok: float
    """The unit price expected in this project: the class's centre at this project's level."""
    level: float
    """This project's price level on this code (1.12: its prices run 12 % above the portfolio's)."""
    spread: float
    """The robust spread of a price around its expectation in this class (log, about σ)."""
    sigmas: float
    """How many spreads the line's unit price lies above its expected price."""
    grade: Grade | None
    compared_as: str = ""
    """What the line was compared as: its NS 3420 code, or its account (then ``code``)."""
    below: Grade | None = None
    """How sure the line is priced far *below* what is expected here (a tender's unbalanced
    bid: a risk, never a saving)."""
    p10_nok: float = 0.0
    p90_nok: float = 0.0
    """The comparables' 10th and 90th percentile unit prices, as written (their spread as a
    planner reads it: eight in ten of them lie between)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LineReference:
        return cls(**data)


@dataclass(frozen=True)
class ProjectReferences:
    """Every priced line of one project measured against the portfolio, at one moment."""

    project_id: str = ""
    lines: tuple[LineReference, ...] = ()
    min_comparables: int = 4
    min_saving_nok: float = 0.0
    min_share: float = 0.0
    """The materiality floor the lines were judged under (the report states it)."""
    unmatched: tuple[tuple[str, str], ...] = ()
    """The posts with a quantity nothing could be measured against: (code, why) each, why
    ``no-code`` (no NS 3420 code), ``unseen`` (no other project prices it), ``unit`` (others
    price it in another unit) or ``thin`` (fewer comparables than a reference needs)."""
    version: str = ""
    """Which state of the portfolio the lines were measured against: a digest of the classes
    they were compared with (``reference <12 hex digits>`` in a report)."""
    portfolio_version: str = ""
    """The version of the whole reference fit they were measured against
    (``reference_version``): what a run's provenance and report name."""

    def get(self, code: str, unit: str) -> LineReference | None:
        return self._by_line.get((code, unit))

    @cached_property
    def _by_line(self) -> dict[tuple[str, str], LineReference]:
        """The lines by (code, unit), the first of each: a request of 20 000 posts looks up
        every one (a scan each was 14 s)."""
        found: dict[tuple[str, str], LineReference] = {}
        for line in self.lines:
            found.setdefault((line.code, line.unit), line)
        return found

    def to_dict(self) -> dict[str, Any]:
        return {
            "project_id": self.project_id,
            "min_comparables": self.min_comparables,
            "min_saving_nok": self.min_saving_nok,
            "min_share": self.min_share,
            "lines": [line.to_dict() for line in self.lines],
            "unmatched": [list(u) for u in self.unmatched],
            "version": self.version,
            "portfolio_version": self.portfolio_version,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProjectReferences:
        return cls(
            str(data.get("project_id", "")),
            tuple(LineReference.from_dict(line) for line in data.get("lines", ())),
            int(data.get("min_comparables", 4)),
            float(data.get("min_saving_nok", 0.0)),
            float(data.get("min_share", 0.0)),
            tuple((str(c), str(w)) for c, w in data.get("unmatched", ())),
            str(data.get("version", "")),
            str(data.get("portfolio_version", "")),
        )
