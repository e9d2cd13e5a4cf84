"""The daemon's commands: ``run``, ``once``, ``doctor`` and ``retry``."""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from portfolio_optimiser.config import ConfigError

from .commands import config_file, resolve_config, say

__all__ = ["doctor", "once", "retry", "run"]


def run(args: argparse.Namespace) -> int:
    from portfolio_optimiser.daemon.lock import LockHeld
    from portfolio_optimiser.daemon.logging import configure_logging, get_logger
    from portfolio_optimiser.daemon.service import Service
    from portfolio_optimiser.daemon.workspace import Workspace

    config = resolve_config(args)
    configure_logging()
    service = Service(
        Workspace.at(args.workspace),
        config_file(args),
        config,
        log=get_logger("portfolio_optimiser"),
    )
    service.install_signal_handlers()
    try:
        return service.run()
    except LockHeld as exc:
        print(f"portfolio-optimiser: {exc}", file=sys.stderr)
        return 1


def once(args: argparse.Namespace) -> int:
    from portfolio_optimiser.daemon.lock import LockHeld
    from portfolio_optimiser.daemon.logging import configure_logging, get_logger
    from portfolio_optimiser.daemon.once import run_once
    from portfolio_optimiser.daemon.workspace import Workspace

    config = resolve_config(args)
    configure_logging()
    try:
        report = run_once(
            Workspace.at(args.workspace),
            config,
            log=get_logger("portfolio_optimiser"),
            wait=not args.no_wait,
        )
    except LockHeld as exc:
        print(f"portfolio-optimiser: {exc}", file=sys.stderr)
        return 1
    workspace = Workspace.at(args.workspace)
    for result in report.results:
        say(
            f"{result.kind} {result.name}: {result.state}"
            + (f" — {result.message}" if result.message else "")
            + _where(workspace, result)
        )
    for name in report.pending:
        say(f"{name}: still changing; it will be processed once it has been quiet for a while")
    if not report.results and not report.pending:
        say(_nothing_new(workspace))
    return 0 if report.all_defined else 75  # EX_TEMPFAIL: run again later


def _shown(workspace: Any, path: Path) -> str:
    return (
        str(path.relative_to(workspace.root)) if path.is_relative_to(workspace.root) else str(path)
    )


def _where(workspace: Any, result: Any) -> str:
    """Where to look: a run's report, a failure's reason, a promoted page."""
    output: Path | None = result.output
    if output is None:
        return ""
    if result.state == "done" and (output / "report.md").is_file():
        return f" → {_shown(workspace, output / 'report.md')}"
    if result.state == "failed" and result.kind == "bundle":
        return f" → why: {_shown(workspace, output.with_name(output.name + '.error.txt'))}"
    return f" → {_shown(workspace, output)}"


def _nothing_new(workspace: Any) -> str:
    """What ``once`` says when no input was new: what the inbox holds, counted as ``status``
    counts it, rather than an "empty" that may not be so."""
    from portfolio_optimiser.daemon.inbox_count import count_inbox

    counted = count_inbox(workspace)
    if not counted.bundles and not counted.verdicts and not counted.not_verdicts:
        return "nothing to do: the inbox is empty"
    held = [f"{len(counted.verdicts)} verdict file(s) in inbox/verdicts/, each read before"]
    if counted.reports:
        held.append(f"{len(counted.reports)} refused (status says why)")
    return "nothing new to do: " + "; ".join(held)


def retry(args: argparse.Namespace) -> int:
    from portfolio_optimiser.daemon.retry import retry_quarantined
    from portfolio_optimiser.daemon.stores import open_ledger
    from portfolio_optimiser.daemon.workspace import Workspace

    workspace = Workspace.at(args.workspace)
    workspace.ensure()
    ledger = open_ledger(workspace, resolve_config(args))
    try:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        destination = retry_quarantined(workspace, ledger, args.name, now_iso=now)
    except FileNotFoundError as exc:
        print(f"portfolio-optimiser: {exc}", file=sys.stderr)
        return 1
    finally:
        ledger.close()
    say(f"{args.name} is back in {destination.parent}; the daemon (or `once`) will run it again")
    return 0


def _probe(folder: Path) -> str | None:
    """Create, rename and remove a file: what the daemon does, done once, up front."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".doctor-{os.getpid()}-{time.monotonic_ns()}"
        probe.write_bytes(b"probe")
        moved = probe.with_name(probe.name + ".moved")
        probe.rename(moved)
        moved.unlink()
    except OSError as exc:
        return f"{folder}: {exc.strerror}"
    return None


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def doctor(args: argparse.Namespace) -> int:
    from portfolio_optimiser.daemon.claim import same_filesystem
    from portfolio_optimiser.daemon.ledger import LedgerError
    from portfolio_optimiser.daemon.signing import Signing
    from portfolio_optimiser.daemon.stores import open_ledger
    from portfolio_optimiser.daemon.watcher import NETWORK_FILESYSTEMS, filesystem_type
    from portfolio_optimiser.daemon.workspace import Workspace
    from portfolio_optimiser.pipeline.budget import SpendFileError, read_spend
    from portfolio_optimiser.reasoning.environment import admission_for
    from portfolio_optimiser.reasoning.store import Store, availability_now

    problems = 0

    def check(ok: bool, good: str, bad: str) -> None:
        nonlocal problems
        problems += not ok
        say(f"  {'ok  ' if ok else 'FIX '} {good if ok else bad}")

    say("portfolio-optimiser doctor")
    try:
        config = resolve_config(args)
    except ConfigError as exc:
        say(f"  FIX  configuration: {exc}")
        return 78
    check(True, f"configuration: {config.source}", "")
    workspace = Workspace.at(args.workspace)
    workspace.ensure()
    for folder in (
        workspace.inbox_projects,
        workspace.inbox_verdicts,
        workspace.outbox,
        workspace.wiki,
        workspace.state,
    ):
        problem = _probe(folder)
        check(
            problem is None, f"writable: {folder}", f"cannot write: {problem}; fix its permissions"
        )
    check(
        same_filesystem(workspace.inbox_projects, workspace.state),
        "the state directory is on the inbox's file system (claims are atomic renames)",
        f"{workspace.state} is on another file system than the inbox; claims will use inbox/.claimed instead",
    )
    fstype = filesystem_type(workspace.inbox_projects)
    check(
        fstype not in NETWORK_FILESYSTEMS,
        f"inbox file system: {fstype} (native events)",
        f"inbox file system: {fstype}, a network file system inotify cannot see; the daemon polls instead",
    )
    watches = _read_int("/proc/sys/fs/inotify/max_user_watches")
    instances = _read_int("/proc/sys/fs/inotify/max_user_instances")
    check(
        ((watches or 0) >= 64 and (instances or 0) >= 8) or watches is None,
        f"inotify limits: {watches} watches, {instances} instances",
        f"inotify limits are low ({watches} watches, {instances} instances); raise fs.inotify.max_user_instances",
    )
    try:
        spend = read_spend(workspace.spend_file)
        check(
            True,
            f"spend ledger: {spend.spent_tokens} of {config.budget.portfolio_tokens} tokens used",
            "",
        )
    except SpendFileError as exc:
        check(False, "", str(exc))
    try:
        with open_ledger(workspace, config) as opened:
            check(True, f"item ledger: {opened.where}", "")
    except LedgerError as exc:
        check(False, "", str(exc))
    policy = config.verdicts.require_signature
    trust, _stamp = Signing(policy, workspace.root / "config").trust()
    listed = f"{len(trust.signers)} signer line(s) in config/allowed_signers" + "".join(
        f"; {skipped}" for skipped in trust.skipped
    )
    check(
        not trust.problems and (trust.present or policy == "off"),
        f"signed verdicts: require_signature = {policy}; "
        + (listed if trust.present else "no config/allowed_signers"),
        "signed verdicts: "
        + ("; ".join(trust.problems) or f"require_signature = {policy} but there is no "
           "config/allowed_signers: every verdict it covers is refused until it exists"),
    )  # fmt: skip
    states = availability_now(
        Store(workspace.state).load(), admission_for(config, now=datetime.now(UTC))
    )
    available = [s.advisor for s in states if s.available]
    say(
        f"  info advisors: {len(available)} of {len(states)} available ({', '.join(available) or 'none: runs review locally'})"
    )
    for probe in _probe_advisors(config, workspace, available):
        check(
            probe.reachable,
            f"advisor {probe.advisor}: {probe.said}",
            f"advisor {probe.advisor}: {probe.said}",
        )
    say("all checks passed" if not problems else f"{problems} thing(s) to fix")
    if args.show_config:
        _say_effective(config)
    return 0 if not problems else 1


def _say_effective(config: Any) -> None:
    """``doctor --config``: every setting in effect, as TOML, each with where it came from (a
    database address without its password)."""
    from portfolio_optimiser.config import effective_settings

    say("")
    say(f"# the effective config: the packaged default, overlaid by {config.source}")
    sections: dict[str, list[tuple[str, Any, str]]] = {}
    for key, value, where in effective_settings(config):
        section, _, name = key.rpartition(".")
        sections.setdefault(section, []).append((name, value, where))
    for section, settings in sections.items():
        tables = [(n, v, w) for n, v, w in settings if _is_tables(v)]
        plain = [(n, v, w) for n, v, w in settings if not _is_tables(v)]
        if plain:
            say(f"\n[{section}]" if section else "")
        for name, value, where in plain:
            say(f"{name} = {_toml(value)}  # {where}")
        for name, value, where in tables:
            for entry in value:
                say(f"\n[[{f'{section}.' if section else ''}{name}]]  # {where}")
                for field, item in entry.items():
                    say(f"{field} = {_toml(item)}")


def _is_tables(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _toml(value: Any) -> str:
    import json
    import re

    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return '""'
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, str):
        value = re.sub(r"(://[^:/@\s]*):[^@/\s]*@", r"\1:***@", value)  # never a password
    return json.dumps(value, ensure_ascii=False)


def _probe_advisors(config: Any, workspace: Any, available: list[str]) -> list[Any]:
    """One probe per advisor the mode admits, concurrently; each says what the next run meets."""
    import asyncio

    from portfolio_optimiser.pipeline.probe import probe_advisor
    from portfolio_optimiser.reasoning.catalogue import catalogue_from_config
    from portfolio_optimiser.reasoning.negotiation import refused_by
    from portfolio_optimiser.reasoning.store import Store

    catalogue = catalogue_from_config(config.advisors)
    records = Store(workspace.state).load().records
    since = datetime.now(UTC) - timedelta(hours=config.reasoning.refusal_memory_hours)
    chosen = [a for a in catalogue.advisors if a.id in available]

    async def all_of() -> list[Any]:
        return list(
            await asyncio.gather(
                *(probe_advisor(a, refused=refused_by(records, a.id, since=since)) for a in chosen)
            )
        )

    return asyncio.run(all_of()) if chosen else []
