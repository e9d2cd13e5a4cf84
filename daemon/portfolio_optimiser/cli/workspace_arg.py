"""Which folder a command works on: one reading of ``--workspace`` for every command.

Decides whether the folder a command was pointed at is a workspace, and refuses one that is not
(exit 64, EX_USAGE), naming the nearest workspace it can see: a mistyped ``--workspace`` must
not quietly become a new, empty workspace whose ``status`` says "nothing". Only ``demo`` and
``init`` make a workspace on purpose; ``run`` (the service's first start) also takes an empty
folder made for it. Never creates anything itself.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from portfolio_optimiser.daemon.workspace import POINTER
from portfolio_optimiser.errors import UserError
from portfolio_optimiser.invocation import command, source_checkout

__all__ = ["EX_USAGE", "NotAWorkspace", "is_workspace", "nearest_workspace", "workspace_for"]

EX_USAGE: Final = 64

_LOOK_AROUND: Final = 200
"""At most this many folders are looked at for the nearest workspace: a hint, not a search."""


class NotAWorkspace(UserError):
    """The folder a command was pointed at is no workspace; ``str(exc)`` says which is."""

    exit_code = EX_USAGE


def is_workspace(folder: Path) -> bool:
    """A folder the product has set up, or one set up for it: its inbox, the state it keeps
    (under systemd a pointer to it), or its own config file. The source checkout has an inbox
    and a config too, and is never one."""
    if not folder.is_dir() or folder.resolve() == source_checkout():
        return False
    return (
        (folder / "inbox" / "projects").is_dir()
        or (folder / ".state").is_dir()
        or (folder / POINTER).is_file()
        or (folder / "config" / "portfolio-optimiser.toml").is_file()
    )


def _around(folder: Path) -> Iterator[Path]:
    """Where a workspace the user meant may be: the folder's parents (a command run inside a
    workspace's outbox), its sub-folders (the demo's, made where the user stood), and folders
    beside the nearest one that exists whose names are alike (a typo); never a folder merely
    near, which would send the user to someone else's workspace."""
    folder = folder.absolute()
    yield from folder.parents
    existing = next((p for p in (folder, *folder.parents) if p.is_dir()), None)
    if existing is None:
        return
    if existing == folder:
        yield from _children(folder)
    beside = folder.parent if existing == folder else existing
    names = [p.name for p in _children(beside)]
    for name in difflib.get_close_matches(folder.name, names, n=3, cutoff=0.6):
        yield beside / name


def _children(folder: Path) -> Iterator[Path]:
    try:
        entries = sorted(folder.iterdir())[:_LOOK_AROUND]
    except OSError:
        return
    yield from (p for p in entries if not p.name.startswith(".") and p.is_dir())


def nearest_workspace(folder: Path) -> Path | None:
    """The workspace the user most likely meant by ``folder``, or None."""
    for seen, candidate in enumerate(_around(folder)):
        if seen >= _LOOK_AROUND:
            return None
        if candidate != folder.absolute() and is_workspace(candidate):
            return candidate
    return None


def _is_empty_folder(folder: Path) -> bool:
    try:
        return folder.is_dir() and not any(folder.iterdir())
    except OSError:
        return False


def workspace_for(folder: Path, *, takes_empty: bool = False) -> Path:
    """``folder`` if it is a workspace (or, with ``takes_empty``, an empty folder made for one);
    else :class:`NotAWorkspace`, saying what the folder is and which workspace is nearest."""
    if is_workspace(folder) or (takes_empty and _is_empty_folder(folder)):
        return folder
    shown = folder.absolute()
    near = nearest_workspace(folder)
    hint = f"; the nearest workspace is {near}: give --workspace {near}" if near else ""
    if folder.resolve() == source_checkout():
        raise NotAWorkspace(
            f"{shown} is portfolio-optimiser's source folder, not a workspace of yours{hint}"
            + ("" if near else "; give --workspace DIR (`demo` makes ./portfolio-optimiser-demo)")
        )
    if not folder.exists():
        what = f"{shown} does not exist"
    elif not folder.is_dir():
        what = f"{shown} is a file, not a workspace folder"
    else:
        what = f"{shown} is not a workspace (it has no inbox/projects/)"
    if near is not None and near in shown.parents:
        raise NotAWorkspace(f"{what}{hint}")  # a folder inside a workspace is no place for one
    make = command("init", str(shown))
    if near is None:
        raise NotAWorkspace(
            f"{what}; give --workspace DIR of your workspace, or make a new one there with `{make}`"
        )
    raise NotAWorkspace(f"{what}{hint}; or make a new workspace there with `{make}`")
