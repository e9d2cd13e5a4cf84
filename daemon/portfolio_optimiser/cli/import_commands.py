"""``portfolio-optimiser import``: the planner's own estimate files become project bundles."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from portfolio_optimiser._atomic import publish_atomic, publish_text
from portfolio_optimiser._text import strip_control
from portfolio_optimiser.context.errors import BundleError
from portfolio_optimiser.context.imports import (
    Estimate,
    ImportRefused,
    MappingNeeded,
    read_estimate,
    read_mapping,
    write_bundle,
)
from portfolio_optimiser.context.imports.export import export_csv, export_side_file
from portfolio_optimiser.context.ir import load_ir_projections

from .commands import resolve_config

__all__ = ["import_files"]


def _err(text: str) -> None:
    print(strip_control(f"portfolio-optimiser: {text}"), file=sys.stderr)


def _counted(estimate: Estimate, bundle: Path) -> str:
    """What the bundle holds, as the planner counts it: the file's lines (a table holds up to
    500), never the files they are written in."""
    tables = sum(1 for _ in (bundle / "cost").glob("*.md"))
    said = [
        f"{len(estimate.posts)} cost line{'s' if len(estimate.posts) != 1 else ''} in {tables} "
        f"table{'s' if tables != 1 else ''}"
    ]
    if estimate.options:
        said.append(f"{len(estimate.options)} option(s) apart from the base sum")
    if estimate.measures:
        said.append(f"{len(estimate.measures)} kuttliste item(s)")
    return ", ".join(said)


def import_files(args: argparse.Namespace) -> int:
    """Each file into a bundle in ``--into`` (default: the workspace's inbox, where the daemon
    runs it); 1 when any file was refused (each refusal lists all of its problems). With
    ``--export csv``, the other way: each bundle's cost lines as csv into ``--into``."""
    if args.export:
        return _export(args)
    workspace: Path = getattr(args, "workspace", None) or Path()
    into: Path = args.into or workspace / "inbox" / "projects"
    if not into.is_dir():
        _err(f"{into} is not a folder; create it or name another with --into")
        return 1
    mapping = read_mapping(args.mapping) if args.mapping else None
    # The config says which units beside the vocabulary are this organisation's, and how large
    # a csv may be: the import refuses what check-bundle would.
    config = resolve_config(args)
    failed = 0
    for path in args.files:
        try:
            estimate = read_estimate(
                path,
                mapping=mapping,
                units=config.bundles.units,
                max_bytes=config.imports.max_bytes,
            )
            bundle = write_bundle(estimate, into)
        except MappingNeeded as exc:
            failed += 1
            template = path.with_name(path.name + ".mapping.toml")
            if not template.exists():
                publish_text(template, exc.template)
            _err(
                f"{exc}\n  A mapping to fill in is in {template}; then: import {path} --mapping {template}"
            )
        except ImportRefused as exc:
            failed += 1
            _err(str(exc))
        else:
            print(strip_control(f"{path} → {bundle} ({_counted(estimate, bundle)})"))
    return 1 if failed else 0


def _export(args: argparse.Namespace) -> int:
    into: Path = args.into or Path()
    if not into.is_dir():
        _err(f"{into} is not a folder; create it or name another with --into")
        return 1
    failed = 0
    for bundle in args.files:
        try:
            project = load_ir_projections(bundle)
        except BundleError as exc:
            failed += 1
            _err(f"{bundle}: {exc}")
            continue
        target = into / f"{project.id}.csv"
        publish_atomic(target, export_csv(project).encode("utf-8-sig"))
        publish_atomic(target.with_suffix(".toml"), export_side_file(project).encode("utf-8"))
        print(strip_control(f"{bundle} → {target} ({len(project.cost_lines)} cost lines)"))
    return 1 if failed else 0
