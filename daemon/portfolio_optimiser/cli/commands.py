"""Handlers of the command line; each takes the parsed arguments and returns an exit code."""

from __future__ import annotations

import argparse
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from portfolio_optimiser._text import strip_control
from portfolio_optimiser.config import Config, load_config
from portfolio_optimiser.context.bundle_check import check_bundle as check_whole_bundle
from portfolio_optimiser.context.conformance import check_conformance
from portfolio_optimiser.context.errors import BundleError
from portfolio_optimiser.context.imports import estimate_in
from portfolio_optimiser.context.navigate import ProblemKind, navigate_bundle
from portfolio_optimiser.context.render import render_context
from portfolio_optimiser.context.signature import SignatureRefused
from portfolio_optimiser.context.verdict import Verdict, decided_in_the_future, parse_verdict
from portfolio_optimiser.errors import UserError
from portfolio_optimiser.outputs.frame_report import decision_date

__all__ = ["check_bundle", "check_verdict", "config_file", "demo", "init", "resolve_config"]

_DATED = re.compile(r"\d{1,4}[./-]\d{1,2}[./-]\d{1,4}")
"""A date in a decision point, however it is written."""


def say(text: str = "") -> None:
    print(strip_control(text))


def nok(value: float) -> str:
    return f"{value:,.0f}".replace(",", " ")


def config_file(args: argparse.Namespace) -> Path:
    """The file laid over the packaged default: ``--config``, else the workspace's own
    ``config/portfolio-optimiser.toml`` (which need not exist: then the default is all of it)."""
    explicit: Path | None = getattr(args, "config", None)
    if explicit is not None:
        return explicit
    workspace: Path = getattr(args, "workspace", None) or Path()
    return workspace / "config" / "portfolio-optimiser.toml"


def resolve_config(args: argparse.Namespace) -> Config:
    """The packaged default overlaid by ``config_file``: every command reads it this one way."""
    path = config_file(args)
    given = getattr(args, "config", None) is not None
    return load_config(path if given or path.is_file() else None)


def check_verdict(args: argparse.Namespace) -> int:
    path: Path = args.file
    try:
        data = path.read_bytes()
    except OSError as exc:
        print(
            strip_control(f"portfolio-optimiser: {path}: cannot be read ({exc.strerror})"),
            file=sys.stderr,
        )
        return 1
    verdict = parse_verdict(data, str(path))
    future = decided_in_the_future(verdict, data, str(path), now=datetime.now(UTC))
    if future is not None:
        raise UserError(future)
    unknown = _unknown_candidate(args, verdict.id)
    if unknown:
        print(strip_control(f"portfolio-optimiser: {path}: {unknown}"), file=sys.stderr)
        return 1
    said = (
        f"{path}: a valid verdict — {verdict.decision.value} on {verdict.id} by {verdict.reviewer}"
    )
    try:
        said += _signed(args, verdict, data, path)
    except SignatureRefused as exc:
        print(strip_control(f"portfolio-optimiser: {path}: {exc}"), file=sys.stderr)
        return 1
    if unknown is None:
        workspace = getattr(args, "workspace", None) or Path()
        said += (
            f"; whether {verdict.id} awaits a verdict was not checked: {workspace.resolve()} is "
            "no workspace with runs (give --workspace DIR of the workspace its report came from)"
        )
    say(said)
    return 0


def _signed(args: argparse.Namespace, verdict: Verdict, data: bytes, path: Path) -> str:
    """What the file's signature proves under the workspace's policy and trust files, as the
    daemon would decide it now; raises :class:`SignatureRefused` where it would be refused."""
    from portfolio_optimiser.daemon.signing import Signing, signature_path

    workspace: Path = getattr(args, "workspace", None) or Path()
    signing = Signing(resolve_config(args).verdicts.require_signature, workspace / "config")
    try:
        sig: bytes | None = signature_path(path).read_bytes()
    except FileNotFoundError:
        sig = None
    proof, unchecked = signing.prove(verdict, data, sig, path.name, at=datetime.now(UTC))
    if proof is not None:
        return f", signed by {proof.principal} with {proof.fingerprint}"
    return f"; {unchecked}" if unchecked else ""


def _unknown_candidate(args: argparse.Namespace, candidate_id: str) -> str | None:
    """What the daemon would say of the id ("" when it awaits a verdict), or None when this
    workspace has no ledger to ask."""
    from portfolio_optimiser.daemon.stores import existing_ledger
    from portfolio_optimiser.daemon.workspace import Workspace

    workspace: Path = getattr(args, "workspace", None) or Path()
    ledger = existing_ledger(Workspace.at(workspace), resolve_config(args))
    if ledger is None:
        return None
    with ledger:
        if ledger.records.candidate(candidate_id) is not None:
            return ""
    return (
        f"the verdict is well formed, but {candidate_id!r} names no candidate awaiting a verdict in "
        f"{workspace}; copy the id verbatim from a template in outbox/runs/<project>/<run>/verdicts/"
    )


def _check_one(bundle: Path, config: Config) -> list[str]:
    """Print what the foundation sees in one bundle, every problem at once; return them."""
    checked = check_whole_bundle(
        bundle,
        extra_types=config.bundles.measure_types,
        units=config.bundles.units,
        frame=config.uncertainty.rule(),
    )
    project = checked.project
    problems = list(checked.problems)
    if project is not None:
        say(f"{project.id}: {project.name}")
        figures = [f"base estimate {nok(project.cost_total_nok)} NOK"]
        if project.p50_nok is not None:
            figures.append(f"P50 {nok(project.p50_nok)}")
        if project.p85_nok is not None:
            figures.append(f"P85 {nok(project.p85_nok)}")
        say(f"  {len(project.cost_lines)} cost lines, {', '.join(figures)}")
        frame = checked.frame
        if frame is not None:
            say(
                f"  uncertainty frame: P50 {nok(round(frame.p50_nok))}, P85 "
                f"{nok(round(frame.p85_nok))}, kostnadsramme {nok(round(frame.kostnadsramme_nok))} "
                f"NOK (P85 less the kuttliste); from {len(frame.uncertain)} lines' triple "
                f"estimates, {len(frame.assumed)} with an assumed spread, {len(frame.certain)} "
                "taken as certain"
            )
    try:
        navigation = navigate_bundle(bundle)
    except BundleError as exc:
        problems.append(str(exc))
    else:
        context = render_context(navigation, budget_chars=config.context.budget_chars)
        counts = {k: sum(1 for p in navigation.problems if p.kind is k) for k in ProblemKind}
        say(
            f"  navigation read {len(navigation.concepts)} concepts into {len(context)} characters "
            f"of context; {counts[ProblemKind.BROKEN]} broken link(s) tolerated, "
            f"{counts[ProblemKind.CYCLE]} cycle(s) ended, {counts[ProblemKind.ESCAPE]} escaping "
            "link(s) refused"
        )
        for link in navigation.problems:
            if link.kind is ProblemKind.BROKEN:
                say(f"    note: {link}")
            elif link.kind is ProblemKind.ESCAPE:
                problems.append(str(link))
    if project is not None:
        for option in project.measure_options:
            if option.id_minted:
                say(
                    f"    note: {option.source}: no id; it is {option.id!r}, minted from its path "
                    "(the same on every run; write id: to choose one)"
                )
            point = option.decision_point
            if point and decision_date(point) is None and _DATED.search(point):
                say(
                    f"    note: {option.source}: its decision point {point!r} begins with no date "
                    "the report can rank or the portfolio page can see pass; write the date first, "
                    "as 2027-03-01"
                )
    problems += [str(issue) for issue in check_conformance(bundle)]
    for item, title, saving, said in checked.kuttliste:
        say(f"  {item:>6}  {nok(saving):>13} NOK  {title[:48]:<48}  {said}")
    # The IR, the navigation and the OKF check may each meet the same unreadable file: once.
    seen: set[str] = set()
    unique = []
    for sentence in problems:
        key = re.sub(r"[^a-z0-9]", "", sentence.lower())
        if key not in seen:
            seen.add(key)
            unique.append(sentence)
    for sentence in unique:
        say(f"    problem: {sentence}")
    return unique


def check_bundle(args: argparse.Namespace) -> int:
    import tempfile

    from portfolio_optimiser.daemon.archive import Reading, extract_bundle, is_archive

    config = resolve_config(args)
    bundle: Path = args.bundle
    if not bundle.is_dir() and not (bundle.is_file() and is_archive(bundle)):
        raise UserError(
            f"{bundle}: is not a folder; a bundle is a folder with index.md at its root (or a "
            ".zip or .tar.gz of one)"
        )
    if bundle.is_dir() and estimate_in(bundle) is not None:
        raise UserError(
            f"{bundle} holds an estimate file, not a bundle; import it first (portfolio-optimiser "
            f"import FILE --into DIR) and check what it becomes"
        )
    if bundle.is_file() and is_archive(bundle):
        # The inbox takes archives too: unpack it the way the daemon does, safely, and check that.
        with tempfile.TemporaryDirectory(prefix="check-bundle-") as scratch:
            root = extract_bundle(
                bundle,
                Path(scratch) / "bundle",
                max_total_bytes=config.daemon.max_bundle_bytes,
                reading=Reading(units=config.bundles.units, max_bytes=config.imports.max_bytes),
            )
            problems = _check_one(root, config)
    else:
        problems = _check_one(bundle, config)
    if len(problems) == 1:
        print(strip_control(f"portfolio-optimiser: {problems[0]}"), file=sys.stderr)
    elif problems:
        print(
            strip_control(
                f"portfolio-optimiser: {len(problems)} problems in {bundle.name}; fix them all "
                "before dropping it into inbox/projects/ (listed above)"
            ),
            file=sys.stderr,
        )
    return 1 if problems else 0


WORKSPACE_CONFIG: Final = """\
# This workspace's settings. Name only what you change: every other value is the packaged
# default, which `portfolio-optimiser doctor --config` prints whole, each value with where it
# came from. The daemon reads this file again when it changes (a bad edit is refused and the
# settings before it kept; the log and `status` say so). For instance:
#
# [verdicts]
# require_signature = "approvals"   # approvals must be signed (config/allowed_signers)
#
# [budget]
# portfolio_tokens = 2000000
"""


def init(args: argparse.Namespace) -> int:
    """A new workspace, made on purpose: its folders and a config that overlays the defaults."""
    from portfolio_optimiser._atomic import publish_text
    from portfolio_optimiser.daemon.workspace import Workspace
    from portfolio_optimiser.invocation import command, source_checkout

    from .workspace_arg import is_workspace

    folder: Path = args.folder or args.workspace
    if folder.resolve() == source_checkout():
        raise UserError(
            f"{folder.absolute()} is portfolio-optimiser's source folder; make the workspace "
            "somewhere of its own, e.g. `init ~/portfolio-optimiser`"
        )
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{folder.absolute()} is a file; name a folder for the workspace")
    existed = is_workspace(folder)
    workspace = Workspace.at(folder)
    workspace.ensure()
    settings = workspace.root / "config" / "portfolio-optimiser.toml"
    if not settings.exists():
        publish_text(settings, WORKSPACE_CONFIG)
    root = workspace.root
    say(
        f"{root} was a workspace already; its folders are all there"
        if existed
        else f"made a workspace in {root}"
    )
    say(f"  drop project bundles into {root / 'inbox' / 'projects'}/")
    say(f"  its settings: {settings} (names only what you change)")
    say(f"  start the daemon: {command('run', '--workspace', str(root))}")
    return 0


def demo(args: argparse.Namespace) -> int:
    """The embedded default through the daemon's own path: see ``daemon.demo``."""
    from portfolio_optimiser.daemon.demo import demo_folder, render_demo, run_demo
    from portfolio_optimiser.daemon.logging import configure_logging, get_logger
    from portfolio_optimiser.daemon.workspace import Workspace

    config = resolve_config(args)
    # --workspace is global (default: the current folder); only one given explicitly is taken.
    given = args.into or (args.workspace if args.workspace != Path() else None)
    root = demo_folder(given, cwd=Path.cwd()).absolute()
    root.mkdir(parents=True, exist_ok=True)
    state = Workspace.at(root).state
    state.mkdir(parents=True, exist_ok=True)
    log_file = state / "demo.log"
    with log_file.open("a", encoding="utf-8") as stream:
        configure_logging(json=True, stream=stream)
        try:
            report = run_demo(
                root,
                config,
                log=get_logger("portfolio_optimiser"),
                log_file=log_file,
                progress=say,
                signed=args.signed,
            )
        finally:
            configure_logging()
    say("")
    say(render_demo(report))
    return 0 if report.proven else 1
