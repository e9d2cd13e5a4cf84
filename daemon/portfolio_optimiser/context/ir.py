"""Project the IR out of a bundle: the project header, its cost lines and its kuttliste.

A cost line is a ``cost-line`` concept, or one row of a ``cost-lines`` concept's table
(:mod:`.cost_table`): an imported tender's building part is one file, not thousands.

Every problem at once, like a compiler: all malformed concepts are reported in one
:class:`IRError`, sorted by file, each naming the file and the field and saying what to write
instead. A measure option without ``id`` gets one minted from its path (stable: the same file
gives the same id on every run); a missing ``measure_type`` is reported with the types the bundle
(and, when given, the wiki) already use. Unknown keys and unknown types are tolerated (OKF §11). Every
markdown file inside the bundle is read, linked or not, so a cost line nobody linked still counts;
a symlink that leads out of the bundle is refused.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .cost_table import cost_table_lines
from .errors import BundleError, BundleEscapeError, FrontmatterError, IRError
from .frame_checks import frame_problems
from .frame_inputs import Outcome
from .frontmatter import Concept, read_concept
from .models import CostLine, MeasureOption, Project, Uncertainty, UncertaintyDriver
from .navigate import MAX_CONCEPT_BYTES, MAX_CONCEPTS, RESERVED_NAMES, resolve_inside

__all__ = ["IRRead", "bundle_files", "load_ir_projections", "minted_id", "read_ir"]

M = TypeVar("M", bound=BaseModel)

_PROJECT_KEYS = (
    "id",
    "name",
    "currency",
    "base_estimate_nok",
    "p50_nok",
    "p85_nok",
    "total_budget_nok",
    "category",
    "correlation",
    "correlation_between",
    "document",
    "derived_from",
)
_COST_LINE_KEYS = tuple(k for k in CostLine.model_fields if k != "source")
_MEASURE_KEYS = tuple(k for k in MeasureOption.model_fields if k not in {"source", "id_minted"})
_UNCERTAINTY_KEYS = tuple(k for k in Uncertainty.model_fields if k != "source")
_DRIVER_KEYS = tuple(k for k in UncertaintyDriver.model_fields if k != "source")
_OUTCOME_KEYS = tuple(k for k in Outcome.model_fields if k != "source")
MAX_COST_LINES = 100_000
"""Cost lines of one bundle (a 20 000-post tender is large): each is an object in memory."""
_NUMBER_HINT = "write a plain number without spaces or thousands separators, e.g. 12480000"


def bundle_files(root: Path) -> list[tuple[Path, str]]:
    """Every ``.md`` file inside the bundle as (resolved path, bundle-relative path), sorted.

    Hidden folders are skipped. A symlink whose target is outside the bundle raises.
    """
    base = root.resolve()
    found: dict[Path, str] = {}
    for folder, dirs, files in os.walk(base, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if not name.lower().endswith(".md") or name.startswith("."):
                continue
            rel = (Path(folder) / name).relative_to(base).as_posix()
            try:
                path, resolved_rel = resolve_inside(base, "/" + rel, from_rel=rel)
            except BundleEscapeError:
                raise BundleEscapeError(
                    f"{rel}: is a symlink to a file outside the bundle; put a copy of the file "
                    "inside the bundle instead"
                ) from None
            if not path.is_file():
                raise BundleError(
                    f"{rel}: is a symlink to {resolved_rel}, which does not exist; remove the "
                    "symlink or restore its target"
                )
            found.setdefault(path, resolved_rel)
            if len(found) > MAX_CONCEPTS:
                raise BundleError(
                    f"{root.name}: more than {MAX_CONCEPTS} markdown files; split the bundle"
                )
    return sorted(((p, r) for p, r in found.items()), key=lambda item: item[1])


def minted_id(rel: str) -> str:
    """The id of a measure option that names none: its bundle path, as an id (stable)."""
    stem = rel.removesuffix(".md").lower()
    return re.sub(r"[^a-z0-9]+", "-", stem).strip("-") or "measure"


def load_ir_projections(
    root: Path, *, known_types: Iterable[str] = (), read: dict[str, Concept] | None = None
) -> Project:
    """Read the IR of the bundle at ``root``. Raises :class:`BundleError` subclasses.

    ``known_types`` are measure types used elsewhere (the wiki's), offered with the bundle's own
    when a measure option names none. ``read``: given, every concept read is kept in it by its
    bundle-relative path (for ``navigate_bundle``).
    """
    result = read_ir(root, known_types=known_types, read=read)
    if result.problems or result.project is None:
        _raise_all(result.problems, result.unreadable, root.name)
    assert result.project is not None
    return result.project


@dataclass(frozen=True)
class IRRead:
    """What a bundle's files gave, problems or not: ``check-bundle`` goes on checking the lines
    and options that were sound when the project as a whole is refused."""

    project: Project | None
    lines: tuple[CostLine, ...]
    options: tuple[MeasureOption, ...]
    problems: list[tuple[str, str]]
    """(file, sentence), each problem once."""
    unreadable: set[str]
    named_codes: frozenset[str] = frozenset()
    """Every code a cost line names, sound or not: a measure on a broken line is no orphan."""


def read_ir(
    root: Path, *, known_types: Iterable[str] = (), read: dict[str, Concept] | None = None
) -> IRRead:
    """Every concept of the bundle read, every problem kept (``BundleError`` only for a bundle
    that cannot be walked at all: too many files, a symlink out of it); each concept read kept
    in ``read`` when one is given."""
    headers: list[Concept] = []
    lines: list[CostLine] = []
    options: list[MeasureOption] = []
    risks: list[Uncertainty] = []
    drivers: list[UncertaintyDriver] = []
    outcomes: list[tuple[str, Outcome]] = []
    problems: list[tuple[str, str]] = []
    unreadable: set[str] = set()
    """The problems that are frontmatter errors (a lone one keeps its own kind of error)."""
    untyped: list[str] = []
    named: set[str] = set()
    types: set[str] = set()
    files = bundle_files(root)
    for path, rel in files:
        if path.name in RESERVED_NAMES:
            continue
        if path.stat().st_size > MAX_CONCEPT_BYTES:
            problems.append(
                (rel, f"{rel}: is larger than {MAX_CONCEPT_BYTES // 1024} KiB; split it")
            )
            continue
        try:
            concept = read_concept(path, rel)
        except FrontmatterError as exc:
            problems.append((rel, str(exc)))
            unreadable.add(str(exc))
            continue
        if read is not None:
            read[rel] = concept
        kind = concept.type
        if kind == "project":
            headers.append(concept)
        elif kind == "cost-line":
            named.add(str(concept.frontmatter.get("code", "")))
            lines.extend(_build(CostLine, concept, _COST_LINE_KEYS, problems))
        elif kind == "cost-lines":
            if len(lines) > MAX_COST_LINES:
                problems.append(
                    (rel, f"{rel}: the bundle has more than {MAX_COST_LINES} cost lines; split "
                     "the project")
                )  # fmt: skip
                break
            table, found, codes = cost_table_lines(concept)
            named |= codes
            lines.extend(table)
            problems += [(rel, sentence) for sentence in found]
        elif kind == "measure-option":
            minted = (
                {} if concept.frontmatter.get("id") else {"id": minted_id(rel), "id_minted": True}
            )
            declared = concept.frontmatter.get("measure_type")
            if not declared:
                untyped.append(rel)
            elif isinstance(declared, str):
                types.add(declared)
            options.extend(
                _build(MeasureOption, concept, _MEASURE_KEYS, problems, extra=minted, skip=untyped)
            )
        elif kind == "outcome":
            outcomes += [
                (rel, found) for found in _build(Outcome, concept, _OUTCOME_KEYS, problems)
            ]
        elif kind in ("uncertainty", "uncertainty-driver"):
            named_id = {} if concept.frontmatter.get("id") else {"id": minted_id(rel)}
            if kind == "uncertainty":
                risks += _build(Uncertainty, concept, _UNCERTAINTY_KEYS, problems, extra=named_id)
            else:
                drivers += _build(
                    UncertaintyDriver, concept, _DRIVER_KEYS, problems, extra=named_id
                )

    if untyped:
        used = sorted(types | set(known_types))
        offer = f" (types already used: {', '.join(used)})" if used else ""
        problems += [
            (
                rel,
                f"{rel}: field measure_type is missing; add 'measure_type: …', the kind of measure{offer}",
            )
            for rel in untyped
        ]
    if not headers:
        problems.append(
            (
                "",
                f"{root.name}: no concept has 'type: project'; add a project.md with id, name and currency",
            )
        )
    if len(headers) > 1:
        names = ", ".join(c.rel for c in headers)
        problems.append(
            ("", f"{root.name}: more than one 'type: project' concept ({names}); keep one")
        )
    problems += _duplicates(lines, "code", "cost line code")
    problems += _duplicates(options, "id", "measure option id")
    problems += _duplicates(risks, "id", "uncertainty id")
    problems += _duplicates(drivers, "id", "uncertainty driver id")
    if len(outcomes) > 1:
        named_twice = ", ".join(rel for rel, _found in outcomes)
        problems.append(
            (
                outcomes[1][0],
                f"{root.name}: more than one 'type: outcome' concept ({named_twice}); keep one",
            )
        )
    project = None
    if len(headers) == 1:
        concept = headers[0]
        built = _build(
            Project,
            concept,
            _PROJECT_KEYS,
            problems,
            extra={
                "cost_lines": tuple(lines),
                "measure_options": tuple(options),
                "uncertainties": tuple(risks),
                "drivers": tuple(drivers),
                "outcome": outcomes[0][1] if len(outcomes) == 1 else None,
                "files": frozenset(rel for _, rel in files),
            },
        )
        if built and not problems:
            # Only over sound cost lines: a total that is off because a line failed is no news.
            project = built[0]
            problems += [(concept.rel, p) for p in _header_figures(project, concept.rel)]
    return IRRead(
        project, tuple(lines), tuple(options), problems, unreadable, frozenset(named - {""})
    )


def _raise_all(problems: list[tuple[str, str]], unreadable: set[str], bundle: str) -> None:
    """One problem as its own kind of error; several as one IRError, sorted by file, each once
    (a figure that is neither an int nor a float is two validation errors, one sentence)."""
    ordered = list(dict.fromkeys(s for _rel, s in sorted(problems, key=lambda p: p[0])))
    if len(ordered) == 1 and ordered[0] in unreadable:
        raise FrontmatterError(ordered[0])
    raise IRError(ordered, bundle=bundle)


def _pick(concept: Concept, keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: concept.frontmatter[k] for k in keys if k in concept.frontmatter}


def _build(
    model: type[M],
    concept: Concept,
    keys: tuple[str, ...],
    problems: list[tuple[str, str]],
    *,
    extra: dict[str, Any] | None = None,
    skip: list[str] | None = None,
) -> list[M]:
    """The concept as ``model`` (a list of one), or no model and every problem noted.

    A missing field listed in ``skip`` is reported by the caller, with its suggestions.
    """
    data = _pick(concept, keys)
    for key in ("affected_codes", "applies_to"):
        if isinstance(data.get(key), list):
            data[key] = tuple(data[key])
    data["source"] = concept.rel
    data.update(extra or {})
    try:
        return [model.model_validate(data)]
    except ValidationError as exc:
        errors = exc.errors()
        # An item's error ("affected_codes.0 is not text") says more than its list's; keep it alone.
        itemised = {e["loc"][0] for e in errors if len([p for p in e["loc"] if not _tag(p)]) > 1}
        errors = [
            e
            for e in errors
            if e["loc"][:1] == ()
            or e["loc"][0] not in itemised
            or len([p for p in e["loc"] if not _tag(p)]) > 1
        ]
        for error in errors:
            if (
                error["type"] == "missing"
                and skip is not None
                and concept.rel in skip
                and error["loc"][:1] == ("measure_type",)
            ):
                continue
            problems.append((concept.rel, _sentence(concept, error)))
        return []


def _tag(part: Any) -> bool:
    """A union branch pydantic names in an error's location, not a field or an index."""
    return str(part) in {"int", "float", "tuple[str, ...]"}


def _sentence(concept: Concept, error: Any) -> str:
    """One validation error as one sentence a planner can act on."""
    loc = [str(part) for part in error["loc"] if not _tag(part)]
    field = loc[0] if loc else ""
    value = concept.frontmatter.get(field, None)
    where = f"{concept.rel} field {'.'.join(loc)}" if loc else concept.rel
    kind = error["type"]
    if kind == "missing":
        return f"{concept.rel}: field {field} is missing; add '{field}: …' to the frontmatter"
    if field == "code" and value == "":
        return f'{where}: the code is empty; write the account code in quotes, e.g. code: "02.3"'
    if field == "code" or (field == "affected_codes" and len(loc) > 1):
        return (
            f'{where}: {value!r} is not text; put account codes in quotes, e.g. code: "02.3" '
            "(unquoted, 02.3 is read as the number 2.3)"
        )
    if kind in {"int_type", "float_type", "finite_number"} or "number" in str(error.get("msg", "")):
        return f"{where}: {value!r} is not a number; {_NUMBER_HINT}"
    if kind == "literal_error" and field == "currency":
        return f"{where}: {value!r} is not supported; amounts are in NOK, so write currency: NOK"
    if kind == "string_pattern_mismatch" and field == "id":
        return (
            f"{where}: {value!r} is not a valid project id; use lowercase letters, digits and '-'"
        )
    if kind in {"tuple_type", "too_short"} and field == "affected_codes":
        return f'{where}: must be a non-empty list of codes, e.g. affected_codes: ["02.3"]'
    message = str(error.get("msg", "is not valid")).removeprefix("Value error, ")
    shown = f" {value!r}" if value is not None else ""
    return f"{where}:{shown} {message[0].lower() + message[1:]}"


def _duplicates(items: list[Any], attr: str, what: str) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    found = []
    for item in items:
        key = getattr(item, attr)
        if key in seen:
            found.append(
                (
                    item.source,
                    f"{item.source}: {what} {key!r} is also used by {seen[key]}; each must be unique",
                )
            )
        else:
            seen[key] = item.source
    return found


def _header_figures(project: Project, rel: str) -> list[str]:
    found = []
    if project.base_estimate_nok is not None:
        total = project.cost_total_nok
        if not math.isclose(total, project.base_estimate_nok, abs_tol=0.5):
            found.append(
                f"{rel} field base_estimate_nok: {project.base_estimate_nok!r} but the cost lines add "
                f"up to {total:.0f}; correct the figure or the cost line that is wrong"
            )
    return found + frame_problems(project, rel)
