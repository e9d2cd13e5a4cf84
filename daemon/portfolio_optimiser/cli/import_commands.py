"""``portfolio-optimiser import``: the planner's own estimate files become project bundles."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from portfolio_optimiser._atomic import publish_atomic, publish_text
from portfolio_optimiser._text import strip_control
from portfolio_optimiser.context.errors import BundleError
from portfolio_optimiser.context.imports import (
    ImportRefused,
    MappingNeeded,
    read_estimate,
    read_mapping,
    write_bundle,
)
from portfolio_optimiser.context.imports.export import export_csv
from portfolio_optimiser.context.ir import load_ir_projections

__all__ = ["import_files"]


def _err(text: str) -> None:
    print(strip_control(f"portfolio-optimiser: {text}"), file=sys.stderr)


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
    failed = 0
    for path in args.files:
        try:
            bundle = write_bundle(read_estimate(path, mapping=mapping), into)
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
            lines = len(list((bundle / "cost").glob("*.md")))
            print(strip_control(f"{path} → {bundle} ({lines} cost lines)"))
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
        print(strip_control(f"{bundle} → {target} ({len(project.cost_lines)} cost lines)"))
    return 1 if failed else 0
