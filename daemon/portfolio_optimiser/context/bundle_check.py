"""What ``check-bundle`` promises: every problem of a bundle in one pass, on every line.

The IR refuses the project as a whole when any file is unsound; this goes on checking the lines
and measures that were sound. Each cost line's amount is its quantity × unit price within rounding, whether or not a
measure touches it; each unit is of the vocabulary; a measure's unit is its lines'; each
measure type is of the documented list (or the config's own); each code a measure names is a
line. The kuttliste is then validated as a run would validate it, and a rejection is a problem
too. Pure over the bundle's files; the CLI prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from .candidates import kuttliste_candidates
from .decisions import Accepted
from .frame import DEFAULT_RULE, Frame, FrameRule, frame_of, frame_refusal
from .ir import read_ir
from .models import CostLine, MeasureOption, Project
from .validator import line_tolerance, validate_candidates
from .vocabulary import (
    MEASURE_TYPES,
    known_measure_type,
    known_unit,
    normalise_unit,
    unit_vocabulary,
)

__all__ = ["BundleCheck", "check_bundle"]


@dataclass(frozen=True)
class BundleCheck:
    project: Project | None
    """The project, when the IR as a whole could be read."""
    problems: tuple[str, ...]
    """Every problem, each one sentence with its file and field, sorted by file."""
    kuttliste: tuple[tuple[str, str, float, str], ...] = ()
    """(item, title, claimed saving, what the validator said) for each kuttliste item."""
    frame: Frame | None = None
    """The uncertainty frame a run would publish, with the items the validator accepted held."""


def _dec(value: float) -> Decimal:
    return Decimal(str(value))


def _where(line: CostLine) -> str:
    return f"{line.source} (code {line.code})" if line.source else f"code {line.code}"


def _line_problems(line: CostLine, units: tuple[str, ...]) -> list[tuple[str, str]]:
    found = []
    if line.quantity is not None and line.unit_price_nok is not None:
        product = _dec(line.quantity) * _dec(line.unit_price_nok)
        if abs(product - _dec(line.amount_nok)) > line_tolerance(line.quantity):
            found.append(
                f"{_where(line)} field amount_nok: {line.amount_nok} but quantity × unit price "
                f"is {line.quantity} × {line.unit_price_nok} = {product.normalize():f}; correct "
                "the amount, the quantity or the unit price"
            )
    if line.quantity is not None and not line.unit:
        found.append(f"{_where(line)} field unit: a quantity without a unit; write it (m2, stk…)")
    found += _unknown_unit(_where(line), line.unit, units)
    return [(line.source, sentence) for sentence in found]


def _unknown_unit(where: str, unit: str | None, units: tuple[str, ...]) -> list[str]:
    if not unit or known_unit(unit, units):
        return []
    return [
        f"{where} field unit: {unit!r} is not a unit of the vocabulary; write one of "
        f"{unit_vocabulary()}, or add yours to the config's [bundles] units"
    ]


def _option_problems(
    option: MeasureOption,
    lines: dict[str, CostLine],
    named: frozenset[str],
    extra_types: tuple[str, ...],
    units: tuple[str, ...],
) -> list[tuple[str, str]]:
    where = option.source or option.id
    found = []
    if not known_measure_type(option.measure_type, extra_types):
        found.append(
            f"{where} field measure_type: {option.measure_type!r} is not a measure type; write "
            f"one of {', '.join(k for k in MEASURE_TYPES if k != 'reference_price')}, or add "
            "yours to the config's [bundles] measure_types"
        )
    missing = [code for code in option.affected_codes if code not in named]
    if missing:
        found.append(
            f"{where} field affected_codes: {', '.join(missing)} is no cost line of the bundle; "
            "write the code of a line it changes"
        )
    if option.unit and option.quantity is not None:
        own = normalise_unit(option.unit)
        for code in option.affected_codes:
            line = lines.get(code)
            if line is not None and line.unit and normalise_unit(line.unit) != own:
                found.append(
                    f"{where} field unit: {option.unit!r}, but line {code} is measured in "
                    f"{line.unit!r}; a measure's quantity is of its line's unit"
                )
    found += _unknown_unit(where, option.unit, units)
    return [(option.source, sentence) for sentence in found]


def check_bundle(
    root: Path,
    *,
    extra_types: Sequence[str] = (),
    units: Sequence[str] = (),
    frame: FrameRule = DEFAULT_RULE,
) -> BundleCheck:
    """Every problem of the bundle at ``root``; raises ``BundleError`` only for a bundle that
    cannot be walked at all."""
    read = read_ir(root)
    problems = list(read.problems)
    lines = {line.code: line for line in read.lines}
    for line in read.lines:
        problems += _line_problems(line, tuple(units))
    flagged: set[str] = set()
    for option in read.options:
        found = _option_problems(option, lines, read.named_codes, tuple(extra_types), tuple(units))
        flagged |= {option.id} if found else set()
        problems += found
    kuttliste: list[tuple[str, str, float, str]] = []
    found_frame = None
    refused = frame_refusal(read.project, frame) if read.project is not None else None
    if refused is not None:
        problems.append((read.project.source if read.project else "", refused))
    if read.project is not None and refused is None:
        candidates = kuttliste_candidates(read.project)
        decisions = validate_candidates(candidates, read.project, frame=frame)
        accepted = frozenset(d.candidate_id for d in decisions if isinstance(d, Accepted))
        found_frame = frame_of(read.project, candidates, accepted=accepted, rule=frame)
        for candidate, decision in zip(candidates, decisions, strict=True):
            item = candidate.origin.removeprefix("measure-option:")
            if isinstance(decision, Accepted):
                said = "accepted"
            else:
                said = f"rejected ({decision.rule}): {decision.reason}"
                option = next(o for o in read.project.measure_options if o.id == item)
                if item not in flagged:  # already named above, by what is wrong in the file
                    problems.append(
                        (option.source, f"{option.source or item}: the validator would reject "
                         f"it: {decision.reason}")
                    )  # fmt: skip
            kuttliste.append((item, candidate.title, candidate.claimed_saving_nok, said))
    ordered = tuple(dict.fromkeys(s for _f, s in sorted(problems, key=lambda p: p[0])))
    return BundleCheck(read.project, ordered, tuple(kuttliste), found_frame)
