"""Bundles from the planner's own files: an estimating tool's export becomes a project bundle.

``read_estimate`` reads one file (an NS 3459 price request or tender, an xlsx kalkyle or a csv
cost breakdown), the small side file that names its project, and its kuttliste (a sheet of the
workbook, or ``kuttliste.csv``/``.xlsx`` beside it); ``write_bundle`` publishes the bundle it becomes, whole or not at all. Every later
stage reads that bundle as it reads a hand-made one. Never imports a framework.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

from portfolio_optimiser._atomic import publish_tree
from portfolio_optimiser.context.errors import BundleError
from portfolio_optimiser.context.frontmatter import read_concept

from .bundle import bundle_files_of
from .csv_file import MAX_BYTES, MappingNeeded, read_csv_estimate, read_csv_kuttliste
from .kuttliste import is_kuttliste_name, kuttliste_beside
from .ns3459 import read_ns3459_estimate
from .posts import Estimate, ImportRefused, Origin, Problem
from .xlsx_file import read_xlsx_estimate, read_xlsx_kuttliste

__all__ = [
    "MAX_BYTES",
    "SUFFIXES",
    "Estimate",
    "ImportRefused",
    "MappingNeeded",
    "bundle_files_of",
    "estimate_in",
    "read_estimate",
    "read_mapping",
    "side_file",
    "write_bundle",
]

SUFFIXES: Final = (".csv", ".xlsx", ".xml")
_KUTTLISTE: Final = {".csv": read_csv_kuttliste, ".xlsx": read_xlsx_kuttliste}
_PROJECT_KEYS: Final = (
    "id",
    "name",
    "category",
    "base_estimate_nok",
    "p50_nok",
    "p85_nok",
    "correlation",
)
_ID: Final = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def side_file(path: Path) -> Path | None:
    """The file that names ``path``'s project: ``<name>.toml`` beside it, else ``project.toml``,
    else ``project.md`` (a project concept's frontmatter)."""
    for candidate in (
        path.with_suffix(".toml"),
        path.with_name("project.toml"),
        path.with_name("project.md"),
    ):
        if candidate.is_file():
            return candidate
    return None


def estimate_in(folder: Path) -> Path | None:
    """The estimate file a folder dropped as a project holds (beside it its side file and its
    kuttliste), or None when the folder is a bundle (it has an ``index.md``) or holds none."""
    if (folder / "index.md").is_file():
        return None
    found = sorted(
        p
        for p in folder.iterdir()
        if p.is_file()
        and p.suffix.lower() in SUFFIXES
        and not p.name.startswith(".")
        and not is_kuttliste_name(p.name)
    )
    if len(found) > 1:
        raise ImportRefused(
            folder.name,
            [
                Problem(
                    Origin(folder.name),
                    None,
                    f"holds {len(found)} estimate files ({', '.join(p.name for p in found)}); "
                    "drop one project's estimate per folder",
                )
            ],
        )
    return found[0] if found else None


def _read_toml(path: Path, what: str) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ImportRefused(
            path.name, [Problem(Origin(path.name), None, f"{what} cannot be read ({exc})")]
        ) from None


def _project(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    if path.suffix == ".md":
        try:
            data = {
                k: v for k, v in read_concept(path, path.name).frontmatter.items() if k != "type"
            }
        except BundleError as exc:
            raise ImportRefused(path.name, [Problem(Origin(path.name), None, str(exc))]) from None
    else:
        data = _read_toml(path, "the project's side file")
    problems = [
        Problem(
            Origin(path.name),
            key,
            f"is not a project field; write one of {', '.join(_PROJECT_KEYS)}",
        )
        for key in data
        if key not in _PROJECT_KEYS
    ]
    if "id" in data and not (isinstance(data["id"], str) and _ID.fullmatch(data["id"])):
        problems.append(
            Problem(
                Origin(path.name),
                "id",
                f"{data['id']!r} is not a project id; write lower-case letters, digits and dashes",
            )
        )
    if problems:
        raise ImportRefused(path.name, problems)
    return data


def read_mapping(path: Path) -> dict[str, str]:
    """A mapping file: ``[columns]`` header as written → field."""
    columns = _read_toml(path, "the mapping file").get("columns", {})
    if not isinstance(columns, dict):
        raise ImportRefused(
            path.name, [Problem(Origin(path.name), "columns", "is not a table of header = field")]
        )
    return {str(k): str(v) for k, v in columns.items() if str(v)}


def read_estimate(
    path: Path,
    *,
    mapping: Mapping[str, str] | None = None,
    name: str | None = None,
    units: Sequence[str] | None = None,
    max_bytes: int = MAX_BYTES,
) -> Estimate:
    """The estimate ``path`` holds, its project named by its side file (else by ``name``, the
    file's name as the planner gave it, which defaults to the path's); raises
    :class:`ImportRefused` with every problem of the file at once.

    ``units``: the config's ``[bundles] units``, beside the vocabulary, against which a csv's or
    a workbook's units are checked; None leaves them unchecked, for a caller without the config
    (a unit the config adds must not refuse a file there). ``max_bytes``: ``[imports]
    max_bytes``, past which a csv is refused unread."""
    if path.suffix.lower() not in SUFFIXES:
        raise ImportRefused(
            path.name,
            [
                Problem(
                    Origin(path.name),
                    None,
                    f"is not a file this version imports ({', '.join(SUFFIXES)}); export it from the estimating tool as NS 3459 XML, xlsx or csv",
                )
            ],
        )
    if is_kuttliste_name(path.name):
        raise ImportRefused(
            path.name,
            [
                Problem(
                    Origin(path.name),
                    None,
                    "is a kuttliste, not an estimate; import the estimate beside it, and the "
                    "kuttliste is read with it",
                )
            ],
        )
    try:
        project, named = _project(side_file(path)), name or path.name
        suffix = path.suffix.lower()
        if suffix == ".csv":
            estimate = read_csv_estimate(
                path, mapping=mapping, project=project, name=named, units=units, max_bytes=max_bytes
            )
        elif suffix == ".xlsx":
            estimate = read_xlsx_estimate(
                path, mapping=mapping, project=project, name=named, units=units
            )
        else:
            estimate = read_ns3459_estimate(
                path, mapping=mapping, project=project, name=named, units=units
            )
        _refuse_undeclared_groups(estimate)
        beside = kuttliste_beside(path)
        if beside is None or estimate.measures:
            return estimate
        measures, how = _KUTTLISTE[beside.suffix.lower()](beside, estimate.posts)
        return replace(estimate, measures=tuple(measures), how=(*estimate.how, how))
    except OSError as exc:
        raise ImportRefused(
            path.name, [Problem(Origin(path.name), None, f"cannot be read ({exc.strerror})")]
        ) from None


def _refuse_undeclared_groups(estimate: Estimate) -> None:
    """A line's correlation group must be one its project declares (the side file's
    ``correlation``): said at the import, not by the run that would refuse the bundle."""
    declared = estimate.header.get("correlation")
    groups = set(declared) if isinstance(declared, Mapping) else set()
    problems = [
        Problem(
            post.origin,
            "correlation group",
            f"{post.correlation_group!r} is not a group the project declares; add it to the side "
            f"file's correlation (e.g. correlation = {{ {post.correlation_group} = 0.5 }}) or leave "
            "the cell empty",
        )
        for post in estimate.posts
        if post.correlation_group and post.correlation_group not in groups
    ]
    if problems:
        raise ImportRefused(estimate.source, problems)


def write_bundle(estimate: Estimate, into: Path) -> Path:
    """Publish the estimate's bundle as ``into/<project id>/``, whole or not at all: written
    beside it under a hidden name, synced, then renamed into place. An existing bundle of that
    name is never overwritten."""
    target = into / estimate.project_id
    if target.exists():
        raise ImportRefused(
            estimate.source,
            [
                Problem(
                    Origin(estimate.source),
                    None,
                    f"{target} already exists; a revised estimate of {estimate.project_id} goes "
                    "into the inbox, or import it with another project id in its side file",
                )
            ],
        )
    staging = into / f".{estimate.project_id}.importing-{os.getpid()}"
    return publish_tree(target, bundle_files_of(estimate), staging=staging)
