"""The command line: ``portfolio-optimiser COMMAND`` (also ``python -m portfolio_optimiser``).

A function of argv: ``main([...])`` parses, runs one handler and returns the exit code. Expected
failures print one sentence on stderr and never a traceback: 78 for configuration errors
(EX_CONFIG), 2 for usage, 1 for a bad input, 70 for a defect in this program.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from portfolio_optimiser._text import strip_control
from portfolio_optimiser.config import EX_CONFIG, ConfigError
from portfolio_optimiser.context.errors import BundleError
from portfolio_optimiser.context.verdict import VerdictError
from portfolio_optimiser.daemon.archive import ArchiveError
from portfolio_optimiser.daemon.claim import ClaimError
from portfolio_optimiser.daemon.ledger import LedgerError
from portfolio_optimiser.daemon.lock import LockHeld
from portfolio_optimiser.pipeline.budget import SpendFileError
from portfolio_optimiser.reasoning.policy import Confidence, Materiality
from portfolio_optimiser.reasoning.store import Refusal

from . import commands, daemon_commands, reasoning_commands

__all__ = ["build_parser", "main"]

EX_SOFTWARE = 70


def _common(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    # Accepted before or after the command name; after it, the default must not clobber before.
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument(
        "--workspace",
        type=Path,
        default=default if suppress else Path(),
        metavar="DIR",
        help="the workspace folder (default: the current folder)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=default,
        metavar="FILE",
        help="config file (default: DIR/config/portfolio-optimiser.toml, else the packaged default)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="portfolio-optimiser",
        description="Find cost savings inside each project of a portfolio.",
    )
    _common(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="run the example portfolio offline twice, with a promoted expert verdict between the runs",
    )
    _common(demo, suppress=True)
    demo.add_argument(
        "--into",
        type=Path,
        metavar="DIR",
        help="build the demo workspace here (default: a new temporary folder)",
    )
    demo.set_defaults(handler=commands.demo)

    check_verdict = sub.add_parser(
        "check-verdict", help="validate a hand-edited verdict file without dropping it"
    )
    _common(check_verdict, suppress=True)
    check_verdict.add_argument("file", type=Path, metavar="FILE")
    check_verdict.set_defaults(handler=commands.check_verdict)

    check_bundle = sub.add_parser(
        "check-bundle", help="check a project bundle before dropping it into the inbox"
    )
    _common(check_bundle, suppress=True)
    check_bundle.add_argument("bundle", type=Path, metavar="DIR")
    check_bundle.set_defaults(handler=commands.check_bundle)

    advisors = sub.add_parser(
        "advisors", help="every advisor, its status and why; capacity per capability"
    )
    _common(advisors, suppress=True)
    advisors.add_argument("--json", action="store_true", help="machine-readable output")
    advisors.set_defaults(handler=reasoning_commands.advisors)

    preview = sub.add_parser(
        "plan", help="preview the consultation plan for an uncertainty; records nothing"
    )
    _common(preview, suppress=True)
    preview.add_argument("--materiality", required=True, choices=[m.value for m in Materiality])
    preview.add_argument(
        "--capabilities", required=True, metavar="A,B", help="comma-separated capabilities"
    )
    preview.add_argument("--confidence", default="medium", choices=[c.value for c in Confidence])
    preview.add_argument("--json", action="store_true", help="machine-readable output")
    preview.set_defaults(handler=reasoning_commands.plan_preview)

    status = sub.add_parser(
        "status", help="inbox, advisors and each task's reasoning state, with a handover report"
    )
    _common(status, suppress=True)
    status.add_argument("--task", help="only this task")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(handler=reasoning_commands.status)

    explain = sub.add_parser(
        "explain", help="the provenance chain of a candidate, assessment or conclusion"
    )
    _common(explain, suppress=True)
    explain.add_argument("id", metavar="ID")
    explain.add_argument("--json", action="store_true", help="machine-readable output")
    explain.set_defaults(handler=reasoning_commands.explain)

    run = sub.add_parser(
        "run", help="the daemon: watch the inbox and process what arrives until SIGTERM"
    )
    _common(run, suppress=True)
    run.set_defaults(handler=daemon_commands.run)

    once = sub.add_parser("once", help="process everything ready in the inbox now, then exit")
    _common(once, suppress=True)
    once.set_defaults(handler=daemon_commands.once)

    doctor = sub.add_parser(
        "doctor",
        help="check config, folders, permissions, file systems, inotify limits, ledgers, advisors",
    )
    _common(doctor, suppress=True)
    doctor.set_defaults(handler=daemon_commands.doctor)

    retry = sub.add_parser(
        "retry", help="put a quarantined bundle from outbox/failed/ back into the inbox"
    )
    _common(retry, suppress=True)
    retry.add_argument("name", metavar="NAME")
    retry.set_defaults(handler=daemon_commands.retry)
    return parser


def fail(message: str, code: int) -> int:
    print(f"portfolio-optimiser: {strip_control(message)}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except ConfigError as exc:
        return fail(str(exc), EX_CONFIG)
    except (
        BundleError,
        VerdictError,
        Refusal,
        SpendFileError,
        LedgerError,
        LockHeld,
        ClaimError,
        ArchiveError,
    ) as exc:
        return fail(str(exc), 1)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`status | head`): not an error of ours. Point stdout at devnull
        # so the interpreter's final flush does not fail again (Python's signal docs).
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (
        Exception
    ) as exc:  # a defect: say so in one line, keep the traceback out of the user's way
        return fail(f"internal error ({type(exc).__name__}: {exc}); please report it", EX_SOFTWARE)
    return code
