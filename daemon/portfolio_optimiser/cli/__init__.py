"""The command line: ``portfolio-optimiser COMMAND`` (also ``python -m portfolio_optimiser``).

A function of argv: ``main([...])`` parses, runs one handler and returns the exit code. Expected
failures print one sentence on stderr and never a traceback: 78 for configuration errors
(EX_CONFIG), 2 for usage, 1 for a bad input, 70 for a defect in this program.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from portfolio_optimiser._text import strip_control
from portfolio_optimiser.config import EX_CONFIG, ConfigError
from portfolio_optimiser.errors import UserError
from portfolio_optimiser.reasoning.catalogue import KNOWN_CAPABILITIES
from portfolio_optimiser.reasoning.policy import Confidence, Materiality

from . import commands, daemon_commands, import_commands, reasoning_commands, scale_commands

__all__ = ["build_parser", "main"]

EX_SOFTWARE = 70


SHOW_CONFIG: Final = Path("\0show")
"""``doctor --config`` without a file: print the effective config (of the workspace's own file)."""


def _common(parser: argparse.ArgumentParser, *, suppress: bool, config_shown: bool = False) -> None:
    # Accepted before or after the command name; after it, the default must not clobber before.
    # None until given: a workspace named on purpose is held to being one (``workspace_arg``).
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument(
        "--workspace",
        type=Path,
        default=default,
        metavar="DIR",
        help="the workspace folder (default: the current folder)",
    )
    if config_shown:
        parser.add_argument(
            "--config",
            type=Path,
            nargs="?",
            const=SHOW_CONFIG,
            default=default,
            metavar="FILE",
            help="also print the effective config, each value with where it came from (of FILE "
            "over the packaged default; without FILE, of DIR/config/portfolio-optimiser.toml)",
        )
        return
    parser.add_argument(
        "--config",
        type=Path,
        default=default,
        metavar="FILE",
        help="the config laid over the packaged default, naming only what it changes (default: "
        "DIR/config/portfolio-optimiser.toml, where there is one)",
    )


Handler = Callable[[argparse.Namespace], int]


def _capabilities(text: str) -> str:
    """A comma-separated list of known capabilities; a typo is a usage error naming the list."""
    names = [c.strip() for c in text.split(",") if c.strip()]
    unknown = [n for n in names if n not in KNOWN_CAPABILITIES]
    if not names or unknown:
        what = f"{', '.join(unknown)} is not a capability" if unknown else "names none"
        raise argparse.ArgumentTypeError(
            f"{what}; give one or more of {', '.join(KNOWN_CAPABILITIES)}"
        )
    return ",".join(names)


def _command(
    sub: Any,
    name: str,
    help: str,
    handler: Handler,
    *,
    json: bool = False,
    config_shown: bool = False,
) -> argparse.ArgumentParser:
    """One subcommand: its help, the common options after its name, and its handler."""
    command: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=f"{help[0].upper()}{help[1:]}."
    )
    _common(command, suppress=True, config_shown=config_shown)
    if json:
        command.add_argument("--json", action="store_true", help="machine-readable output")
    command.set_defaults(handler=handler)
    return command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="portfolio-optimiser",
        description="Find cost savings inside each project of a portfolio.",
    )
    _common(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _command(
        sub,
        "run",
        "the daemon: watch the inbox and process what arrives until SIGTERM",
        daemon_commands.run,
    )
    _command(
        sub,
        "once",
        "process everything in the inbox (waiting for what is still settling), then exit",
        daemon_commands.once,
    ).add_argument(
        "--no-wait",
        action="store_true",
        help="do not wait for inputs still settling: report them and exit 75 (for cron)",
    )
    _command(
        sub,
        "init",
        "make a new workspace: the inbox, outbox and wiki folders, and a config that names only "
        "what you change",
        commands.init,
    ).add_argument(
        "folder",
        type=Path,
        nargs="?",
        metavar="DIR",
        help="the new workspace's folder (default: --workspace DIR, else the current folder)",
    )
    demo = _command(
        sub,
        "demo",
        "the example portfolio through the daemon: runs, a verdict, its promotion, a project that learns",
        commands.demo,
    )
    demo.add_argument(
        "--into",
        type=Path,
        metavar="DIR",
        help="build the demo workspace here, a new or empty folder (default: a new "
        "portfolio-optimiser-demo folder in the current one; --workspace DIR works too)",
    )
    demo.add_argument(
        "--signed",
        action="store_true",
        help="approvals must be signed: the expert signs the verdict with an SSH key the demo "
        "makes (needs ssh-keygen)",
    )
    status = _command(
        sub,
        "status",
        "what awaits a verdict, what failed, what runs now, the inbox, spend and advisors",
        reasoning_commands.status,
        json=True,
    )
    status.add_argument(
        "--reasoning",
        action="store_true",
        help="also each task's reasoning state, with a handover report",
    )
    status.add_argument(
        "--task", metavar="TASK", help="the reasoning of this task only (as --reasoning lists them)"
    )
    _command(
        sub,
        "explain",
        "the provenance chain of a candidate, assessment or conclusion",
        reasoning_commands.explain,
        json=True,
    ).add_argument(
        "id",
        metavar="ID",
        help="a candidate id (c-…, from a report or a verdict template), an assessment or a "
        "conclusion id",
    )
    _command(
        sub,
        "check-verdict",
        "validate a hand-edited verdict file without dropping it",
        commands.check_verdict,
    ).add_argument("file", type=Path, metavar="FILE", help="the verdict file (JSON) to check")
    _command(
        sub,
        "check-bundle",
        "check a project bundle (a folder or an archive) before dropping it into the inbox",
        commands.check_bundle,
    ).add_argument(
        "bundle", type=Path, metavar="DIR", help="the bundle's folder, or a .zip or .tar.gz of it"
    )
    importing = _command(
        sub,
        "import",
        "turn estimate files (NS 3459 XML, xlsx, csv) into project bundles, by default into the inbox",
        import_commands.import_files,
    )
    importing.add_argument(
        "files",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="estimate files: NS 3459 (.xml), .xlsx or .csv (with --export: bundle folders)",
    )
    importing.add_argument(
        "--into",
        type=Path,
        metavar="DIR",
        help="write the bundles here (default: the workspace's inbox/projects/, where they run)",
    )
    importing.add_argument(
        "--export",
        choices=["csv"],
        help="the other way: write each bundle FILE's cost lines as csv into --into "
        "(default: the current folder), every figure as the bundle holds it",
    )
    importing.add_argument(
        "--mapping",
        type=Path,
        metavar="FILE",
        help="which column is which, for headers the import does not know (import writes a "
        "template to fill in when it cannot tell)",
    )
    _command(
        sub,
        "advisors",
        "every advisor, its status and why; capacity per capability",
        reasoning_commands.advisors,
        json=True,
    )
    preview = _command(
        sub,
        "plan",
        "preview the consultation plan for an uncertainty; records nothing",
        reasoning_commands.plan_preview,
        json=True,
    )
    preview.add_argument(
        "--materiality",
        required=True,
        choices=[m.value for m in Materiality],
        help="how much the uncertainty is worth, as the review grades it",
    )
    preview.add_argument(
        "--capabilities",
        required=True,
        metavar="A,B",
        type=_capabilities,
        help=f"comma-separated, of {', '.join(KNOWN_CAPABILITIES)}",
    )
    preview.add_argument(
        "--confidence",
        default="medium",
        choices=[c.value for c in Confidence],
        help="how sure the proposer was (default: medium)",
    )
    _command(
        sub,
        "doctor",
        "check config, folders, permissions, file systems, inotify limits, ledgers, advisors",
        daemon_commands.doctor,
        config_shown=True,
    )
    _command(
        sub,
        "retry",
        "put a quarantined bundle from outbox/failed/ back into the inbox",
        daemon_commands.retry,
    ).add_argument("name", metavar="NAME", help="the name in outbox/failed/, as it was dropped")
    _command(
        sub,
        "worker",
        "on a shared database: take bundle jobs from the queue every machine shares, until SIGTERM",
        scale_commands.worker,
    ).add_argument(
        "--executor",
        metavar="NAME",
        help="this worker's name among the machines (default: PORTFOLIO_OPTIMISER_EXECUTOR, "
        "else the host name); restarted under the same name, it finishes its own jobs",
    )
    _command(
        sub,
        "recover",
        "on a shared database: hand the jobs of a machine that is gone to the live workers",
        scale_commands.recover,
    ).add_argument(
        "--executor",
        metavar="NAME",
        required=True,
        help="the dead machine's executor name (status lists them)",
    )
    return parser


def fail(message: str, code: int) -> int:
    from portfolio_optimiser.reasoning.redaction import safe_text

    print(f"portfolio-optimiser: {safe_text(strip_control(message))}", file=sys.stderr)
    return code


_ON_A_WORKSPACE: Final = frozenset(
    {"run", "once", "status", "explain", "retry", "worker", "recover", "doctor", "advisors", "plan"}
)
"""Commands that read or write a workspace's inbox, outbox or state: each refuses a folder that
is not one. The others (``check-bundle``, ``check-verdict``) read a workspace only when given one."""
_MAKES_A_WORKSPACE: Final = frozenset({"demo", "init"})


def _resolve_workspace(args: argparse.Namespace) -> None:
    """``args.workspace``, the current folder unless given, held to being a workspace where the
    command needs one (``workspace_arg``): one reading for every command."""
    from .workspace_arg import workspace_for

    given: Path | None = getattr(args, "workspace", None)
    args.workspace = given if given is not None else Path()
    args.show_config = getattr(args, "config", None) is not None and args.command == "doctor"
    if getattr(args, "config", None) == SHOW_CONFIG:
        args.config = None  # the workspace's own file, as every command reads it
    if args.command in _MAKES_A_WORKSPACE:
        return
    into_inbox = args.command == "import" and args.into is None and args.export is None
    if given is not None or args.command in _ON_A_WORKSPACE or into_inbox:
        workspace_for(args.workspace, takes_empty=args.command == "run")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _resolve_workspace(args)
        code: int = args.handler(args)
    except ConfigError as exc:
        return fail(str(exc), EX_CONFIG)
    except UserError as exc:  # every expected failure: one sentence, exit 1
        return fail(str(exc), getattr(exc, "exit_code", 1))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`status | head`): not an error of ours. Point stdout at devnull
        # so the interpreter's final flush does not fail again (Python's signal docs).
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # a defect: one line, and the traceback kept where the line says
        kept = _keep_traceback(getattr(args, "workspace", None))
        where = f"its traceback is in {kept}" if kept else "its traceback could not be written"
        return fail(
            f"internal error ({type(exc).__name__}: {exc}); {where}; please report it with that file",
            EX_SOFTWARE,
        )
    return code


def _keep_traceback(workspace: Path | None) -> Path | None:
    """The current exception's traceback, scrubbed, in the workspace's state (else the temp
    folder): the user sees one sentence, the report still has everything a developer needs."""
    import os
    import tempfile
    import time
    import traceback

    from portfolio_optimiser._atomic import publish_text
    from portfolio_optimiser.reasoning.redaction import safe_text

    text = safe_text(strip_control(traceback.format_exc()))
    name = f"internal-error-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.txt"
    folders = [Path(tempfile.gettempdir())]
    from .workspace_arg import is_workspace

    if workspace is not None and is_workspace(workspace):  # never into a folder of someone else's
        from portfolio_optimiser.daemon.workspace import Workspace

        folders.insert(0, Workspace.at(workspace).state / "tracebacks")
    for folder in folders:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            publish_text(folder / name, text)
        except OSError:
            continue
        return folder / name
    return None
