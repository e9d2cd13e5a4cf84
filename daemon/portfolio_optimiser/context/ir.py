"""Project the IR out of a bundle: the project header, its cost lines and its kuttliste.

Fail-fast: the first malformed concept raises :class:`IRError` naming the file and the field and
saying what to write instead. Unknown keys and unknown types are tolerated (OKF §11). Every
markdown file inside the bundle is read, linked or not, so a cost line nobody linked still counts;
a symlink that leads out of the bundle is refused.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .errors import BundleError, BundleEscapeError, IRError
from .frontmatter import Concept, read_concept
from .models import CostLine, MeasureOption, Project
from .navigate import MAX_CONCEPT_BYTES, MAX_CONCEPTS, RESERVED_NAMES, safe_resolve

__all__ = ["bundle_files", "load_ir_projections"]

M = TypeVar("M", bound=BaseModel)

_PROJECT_KEYS = (
    "id",
    "name",
    "currency",
    "base_estimate_nok",
    "p50_nok",
    "p85_nok",
    "total_budget_nok",
)
_COST_LINE_KEYS = tuple(k for k in CostLine.model_fields if k != "source")
_MEASURE_KEYS = tuple(k for k in MeasureOption.model_fields if k != "source")
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
                path, resolved_rel = safe_resolve(base, "/" + rel, from_rel=rel)
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


def load_ir_projections(root: Path) -> Project:
    """Read the IR of the bundle at ``root``. Raises :class:`BundleError` subclasses."""
    headers: list[Concept] = []
    lines: list[CostLine] = []
    options: list[MeasureOption] = []
    files = bundle_files(root)
    for path, rel in files:
        if path.name in RESERVED_NAMES:
            continue
        if path.stat().st_size > MAX_CONCEPT_BYTES:
            raise BundleError(f"{rel}: is larger than {MAX_CONCEPT_BYTES // 1024} KiB; split it")
        concept = read_concept(path, rel)
        kind = concept.type
        if kind == "project":
            headers.append(concept)
        elif kind == "cost-line":
            lines.append(_build(CostLine, concept, _COST_LINE_KEYS))
        elif kind == "measure-option":
            options.append(_build(MeasureOption, concept, _MEASURE_KEYS))

    if not headers:
        raise IRError(
            f"{root.name}: no concept has 'type: project'; add a project.md with id, name and currency"
        )
    if len(headers) > 1:
        names = ", ".join(c.rel for c in headers)
        raise IRError(f"{root.name}: more than one 'type: project' concept ({names}); keep one")
    _unique(lines, "code", "cost line code")
    _unique(options, "id", "measure option id")
    concept = headers[0]
    project = _build(
        Project,
        concept,
        _PROJECT_KEYS,
        extra={
            "cost_lines": tuple(lines),
            "measure_options": tuple(options),
            "files": frozenset(rel for _, rel in files),
        },
    )
    _check_header_figures(project, concept.rel)
    return project


def _pick(concept: Concept, keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: concept.frontmatter[k] for k in keys if k in concept.frontmatter}


def _build(
    model: type[M], concept: Concept, keys: tuple[str, ...], *, extra: dict[str, Any] | None = None
) -> M:
    data = _pick(concept, keys)
    for key in ("affected_codes",):
        if isinstance(data.get(key), list):
            data[key] = tuple(data[key])
    data["source"] = concept.rel
    data.update(extra or {})
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise IRError(_sentence(concept, exc)) from None


def _sentence(concept: Concept, exc: ValidationError) -> str:
    """The first error of ``exc`` as one sentence a planner can act on."""
    error = exc.errors()[0]
    loc = [
        str(part) for part in error["loc"] if str(part) not in {"int", "float", "tuple[str, ...]"}
    ]
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


def _unique(items: list[Any], attr: str, what: str) -> None:
    seen: dict[str, str] = {}
    for item in items:
        key = getattr(item, attr)
        if key in seen:
            raise IRError(
                f"{item.source}: {what} {key!r} is also used by {seen[key]}; each must be unique"
            )
        seen[key] = item.source


def _check_header_figures(project: Project, rel: str) -> None:
    if project.base_estimate_nok is not None:
        total = project.cost_total_nok
        if not math.isclose(total, project.base_estimate_nok, abs_tol=0.5):
            raise IRError(
                f"{rel} field base_estimate_nok: {project.base_estimate_nok!r} but the cost lines add "
                f"up to {total:.0f}; correct the figure or the cost line that is wrong"
            )
    if (
        project.p50_nok is not None
        and project.p85_nok is not None
        and project.p85_nok < project.p50_nok
    ):
        raise IRError(
            f"{rel} field p85_nok: {project.p85_nok!r} is below p50_nok {project.p50_nok!r}; "
            "P85 (the cost frame) is never below P50"
        )
