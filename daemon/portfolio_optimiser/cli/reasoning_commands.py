"""The reasoning commands: ``advisors``, ``plan``, ``status`` and ``explain``.

Projections of the records and the catalogue: none holds a list of advisors of its own, and none
names an advisor, vendor or model (``tests/test_provider_independence.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from portfolio_optimiser.config import Config, ConfigError
from portfolio_optimiser.daemon.inbox_count import count_inbox, refusal_of
from portfolio_optimiser.daemon.workspace import Workspace
from portfolio_optimiser.invocation import command
from portfolio_optimiser.pipeline.budget import read_spend
from portfolio_optimiser.reasoning.environment import admission_for
from portfolio_optimiser.reasoning.policy import (
    Confidence,
    Materiality,
    PlanRequest,
    capacity,
    plan,
)
from portfolio_optimiser.reasoning.report import explain as explain_chain
from portfolio_optimiser.reasoning.report import handover, task_status, tasks_of
from portfolio_optimiser.reasoning.store import Store, availability_now

from .commands import resolve_config, say
from .daemon_view import daemon_view
from .scale_commands import say_shared

__all__ = ["advisors", "explain", "plan_preview", "status"]


def _now() -> datetime:
    return datetime.now(UTC)


def _context(args: argparse.Namespace) -> tuple[Any, Store, Any]:
    config = resolve_config(args)
    ctx = admission_for(config, now=_now())
    store = Store(Workspace.at(args.workspace).state)
    return config, store, ctx


def _emit_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def advisors(args: argparse.Namespace) -> int:
    _config, store, ctx = _context(args)
    states = availability_now(store.load(), ctx)
    capabilities = sorted({c for a in ctx.catalogue.advisors for c in a.capabilities})
    table = capacity(states, capabilities)
    if args.json:
        _emit_json(
            {
                "mode": str(ctx.mode.mode),
                "mode_source": ctx.mode.source,
                "operational": True,
                "advisors": [
                    {
                        "id": s.advisor,
                        "name": ctx.catalogue.get(s.advisor).name,
                        "adapter": s.adapter,
                        "local": s.local,
                        "capabilities": list(s.capabilities),
                        "status": str(s.status),
                        "reason": s.reason,
                        "recovering": s.recovering,
                    }
                    for s in states
                ],
                "capacity": table,
            }
        )
        return 0
    say(f"mode: {ctx.mode.mode} (from {ctx.mode.source})")
    if not states:
        say("no advisors are declared; every review runs locally")
    for s in states:
        flag = " (recovering)" if s.recovering else ""
        say(
            f"  {s.advisor:<28} {s.status}{flag} — {s.reason} [{s.adapter}{', local' if s.local else ''}]"
        )
    say("capacity (available advisors per capability):")
    for capability, count in table.items():
        say(f"  {capability:<28} {count}")
    say("Operational either way: with no advisor, each review runs the structured local review.")
    return 0


def plan_preview(args: argparse.Namespace) -> int:
    _config, store, ctx = _context(args)
    states = availability_now(store.load(), ctx)
    request = PlanRequest(
        materiality=Materiality(args.materiality),
        capabilities=tuple(args.capabilities.split(",")),  # checked by the parser
        confidence=Confidence(args.confidence),
    )
    review = plan(request, ctx.mode.mode, states)
    if args.json:
        _emit_json(
            {
                "outcome": str(review.outcome),
                "mode": str(review.mode),
                "budget": review.budget,
                "reason": review.reason,
                "selected": [vars(s) for s in review.selected],
                "excluded": [vars(e) for e in review.excluded],
                "local_review": list(review.local_review),
                "uncovered": list(review.uncovered),
                "recorded": False,
            }
        )
        return 0
    say(f"{review.outcome}: {review.reason} (budget {review.budget}, mode {review.mode})")
    for s in review.selected:
        say(f"  selected {s.advisor}: {s.why}")
    for e in review.excluded:
        say(f"  not selected {e.advisor}: {e.reason}")
    for number, step in enumerate(review.local_review, start=1):
        say(f"  local review {number}. {step}")
    say("(a preview: nothing was recorded)")
    return 0


def _daemon_kept(workspace: Path) -> str:
    """What a running daemon made of the config ``status`` could not read."""
    ws = Workspace.at(workspace)
    try:
        last = json.loads(ws.status_file.read_text("utf-8"))
    except (OSError, ValueError):
        return ""
    if last.get("state") != "running" or not (last.get("config") or {}).get("refused"):
        return ""
    return "; the daemon refused this edit too and runs on the settings before it"


def _say_inbox(inbox: dict[str, Any]) -> None:
    """What lies in the inbox, as the daemon's filter sees it (``count_inbox``)."""
    signed = f", {inbox['signatures']} signature(s)" if inbox["signatures"] else ""
    say(
        f"inbox: {inbox['projects']} project(s) waiting; inbox/verdicts/ holds "
        f"{inbox['verdicts']} verdict file(s){signed}"
    )
    for name in inbox["not_taken"]:
        say(f"  {name}: not a bundle the inbox takes; the next run sets it aside in outbox/failed/")
    for item in inbox["refused_verdicts"]:
        say(f"  refused {item['file']}: {item['why']} (inbox/verdicts/{item['file']}.error.txt)")
    for name in inbox["not_verdicts"]:
        say(f"  {name}: not a verdict file; the next run writes why beside it")


def _reference_line(reference: dict[str, Any]) -> str:
    """The reference fit's version as ``status`` says it: which, of how many projects, how old,
    and the refit due (the projects scored against it since)."""
    age = reference["age_s"]
    ago = f"{age // 3600} h" if age >= 7200 else f"{age // 60} min" if age >= 120 else f"{age} s"
    line = (
        f"reference fit: version {reference['version']} of {reference['projects']} project "
        f"folder(s), fitted {reference['fitted_at']} ({ago} ago)"
    )
    arrived, due = reference["arrivals_since"], reference["refit_due_at"]
    if arrived and due:
        return line + f"; {arrived} project(s) scored against it since, the next fit due {due}"
    return line + "; no refit due"


def status(args: argparse.Namespace) -> int:
    try:
        _config, store, ctx = _context(args)
    except ConfigError as exc:
        raise ConfigError(f"{exc}{_daemon_kept(args.workspace)}") from None
    loaded = store.load()
    states = availability_now(loaded, ctx)
    if args.task and args.task not in tasks_of(loaded):
        known = ", ".join(tasks_of(loaded)) or "none yet"
        print(
            f"portfolio-optimiser: no task {args.task!r} has records (tasks: {known})",
            file=sys.stderr,
        )
        return 1
    chosen = [args.task] if args.task else tasks_of(loaded)
    statuses = [task_status(loaded, t) for t in chosen]
    workspace: Path = args.workspace
    ws = Workspace.at(workspace)
    counted = count_inbox(ws)
    refused = [{"file": name, "why": refusal_of(ws, name)} for name in counted.reports]
    inbox = {
        "projects": len(counted.bundles),
        "not_taken": counted.not_taken,
        "verdicts": len(counted.verdicts),
        "signatures": counted.signatures,
        "refused_verdicts": refused,
        "not_verdicts": [n for n in counted.not_verdicts if n not in counted.reports],
    }
    available = sum(1 for s in states if s.available)
    spend_path = workspace / "outbox" / "spend.json"
    report = workspace / "outbox" / "portfolio.md"
    spend = read_spend(spend_path)  # strict: a corrupt ledger is an error, never zero
    config = _config
    ledger = {
        "spent_tokens": spend.spent_tokens,
        "portfolio_tokens": config.budget.portfolio_tokens,
        "remaining_tokens": max(0, config.budget.portfolio_tokens - spend.spent_tokens),
        "runs": len(spend.runs),
    }
    daemon = daemon_view(workspace, config)
    if args.json:
        _emit_json(
            {
                "workspace": str(workspace),
                "state_dir": str(store.root.parent),
                "daemon": daemon,
                "inbox": inbox,
                "mode": str(ctx.mode.mode),
                "advisors": {
                    "declared": len(states),
                    "available": available,
                    "states": [
                        {
                            "id": s.advisor,
                            "status": str(s.status),
                            "reason": s.reason,
                            "recovering": s.recovering,
                        }
                        for s in states
                    ],
                },
                "spend": ledger,
                "portfolio_report": str(report) if report.is_file() else None,
                "tasks": [s.to_json() for s in statuses],
                "unreadable_records": [list(u) for u in loaded.unreadable],
                "handover": handover(statuses),
            }
        )
        return 0
    say(f"workspace {workspace}: daemon {daemon['state']}; {daemon['runs']} run(s) in outbox/runs/")
    if daemon["config_refused"]:
        say(f"config: the daemon refused the last edit and runs on the settings before it: "
            f"{daemon['config_refused']}")  # fmt: skip
    awaiting = daemon["awaiting"]
    waiting_ids = sum(len(a["ids"]) for a in awaiting)
    if awaiting:
        say(f"awaiting a verdict: {waiting_ids} candidate(s) in {len(awaiting)} project(s)")
        for item in awaiting:
            shown = Path(item["folder"])
            where = shown.relative_to(ws.root) if shown.is_relative_to(ws.root) else shown
            say(f"  {item['project']}: {len(item['ids'])} — templates in {where}/")
    else:
        say("awaiting a verdict: nothing")
    failed = daemon["failed"]
    say(f"failed: {len(failed) or 'nothing'}" + (" (fix it, then retry):" if failed else ""))
    for name in failed:
        say(f"  {name}: why in outbox/failed/{name}.error.txt; then {command('retry', name)}")
    for name in daemon["not_taken"]:
        say(f"  set aside: {name}, not a bundle the inbox takes (outbox/failed/{name}.error.txt)")
    running = daemon["jobs_in_flight"]
    say(f"running now: {len(running) or 'nothing'}")
    for job in running:
        say(f"  {job['bundle']}: past {job['stage']} (run {job['run']})")
    _say_inbox(inbox)
    for name, reason in daemon["waiting"].items():
        say(f"  {name}: {reason}")
    if daemon["shared"] is not None:
        say(f"ledger and workflows: {daemon['database']}; executor {daemon['executor']}")
        say_shared(daemon["shared"])
    if daemon["held_tokens"]:
        say(f"tokens held for jobs in flight: {daemon['held_tokens']}")
    if daemon["reference"] is not None:
        say(_reference_line(daemon["reference"]))
    say(
        f"spend: {ledger['spent_tokens']:,} of {ledger['portfolio_tokens']:,} portfolio tokens "
        f"over {ledger['runs']} run(s); advisors: {available} of {len(states)} available "
        f"(mode {ctx.mode.mode})".replace(",", " ")
    )
    for state in states:
        # The breaker's word on an advisor that has been failing: why it is out, and until when.
        if state.circuit is not None:
            word = "recovering" if state.recovering else str(state.status)
            say(f"  advisor {state.advisor}: {word} — {state.reason}")
    if report.is_file():
        say("portfolio: outbox/portfolio.md")
    for path, why in loaded.unreadable:
        say(f"  unreadable record {path}: {why}")
    if args.reasoning or args.task:
        say()
        say(handover(statuses))
    elif statuses:
        say(f"each task's reasoning: {command('status', '--reasoning')}")
    return 0


def _verdict_steps(workspace: Path, config: Config, ident: str) -> list[dict[str, Any]]:
    """The expert's part of the chain: verdicts from the ledger, promotion from the wiki."""
    from portfolio_optimiser.context.frontmatter import read_concept
    from portfolio_optimiser.daemon.stores import existing_ledger

    ws = Workspace.at(workspace)
    steps: list[dict[str, Any]] = []
    ledger = existing_ledger(ws, config)
    if ledger is not None:
        with ledger:
            for row in ledger.records.verdict_history(ident):
                written = _as_written(ws.inbox_verdicts / row.name, row.digest)
                who = f" by {written.reviewer}" if written is not None else ""
                signed = ledger.records.signature(row.digest)
                if signed is not None:
                    who += f" (signed by {signed.principal} with {signed.fingerprint})"
                decided = written.decided_at if written is not None else None
                when = f", decided {decided}" if decided else ""
                steps.append(
                    {
                        "kind": "verdict",
                        # On the timeline when the expert decided, not when the daemon read it.
                        "recorded_at": decided or row.recorded_at,
                        "id": row.name,
                        "summary": f"expert verdict {row.decision}{who}{when} ({row.name}; read "
                        f"{_utc(row.recorded_at)})",
                    }
                )
    page = ws.wiki / "verdicts" / f"{ident}.md"
    if page.is_file():
        front = read_concept(page, f"verdicts/{ident}.md").frontmatter
        verified = front.get("verified") or {}
        status = front.get("status", "stable")
        signed = front.get("signed")
        key = (
            f", signed with {signed.get('fingerprint')}"
            if isinstance(signed, dict) and signed.get("fingerprint")
            else ""
        )
        steps.append(
            {
                "kind": "promotion",
                "recorded_at": str(verified.get("at", "")) if isinstance(verified, dict) else "",
                "id": f"bundles/wiki/verdicts/{ident}.md",
                "summary": f"promoted to the wiki, verified by {verified.get('by') if isinstance(verified, dict) else '?'}{key}; status {status}",
            }
        )
    return steps


def _as_written(path: Path, digest: str) -> Any:
    """The verdict the ledger recorded, read back from its file; None if it changed or went."""
    import hashlib

    from portfolio_optimiser.context.verdict import VerdictError, parse_verdict

    try:
        data = path.read_bytes()
    except OSError:
        return None
    if hashlib.sha256(data).hexdigest() != digest:
        return None  # edited since: its fields now are not the ones that row recorded
    try:
        return parse_verdict(data, path.name)
    except VerdictError:
        return None


def _utc(stamp: str) -> str:
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def explain(args: argparse.Namespace) -> int:
    config, store, _ctx = _context(args)
    chain = explain_chain(store.load(), args.id)
    extra = _verdict_steps(args.workspace, config, args.id)
    if chain is not None and extra:
        chain.steps.extend({**step, "redacted": []} for step in extra)
        # One timeline: the records and the expert's steps by when they happened, in one format.
        for step in chain.steps:
            step["recorded_at"] = _utc(step["recorded_at"])
        chain.steps.sort(key=lambda step: step["recorded_at"])
    if chain is None:
        print(
            f"portfolio-optimiser: no record or assessment mentions {args.id!r}; `status` lists what is recorded",
            file=sys.stderr,
        )
        return 1
    if args.json:
        _emit_json(chain.to_json())
        return 0
    say(f"provenance of {chain.subject!r}:")
    for step in chain.steps:
        redacted = f" (redacted: {', '.join(step['redacted'])})" if step["redacted"] else ""
        say(
            f"  {step['recorded_at']}  {step['kind']:<12} {step['id']}  {step['summary']}{redacted}"
        )
    return 0
