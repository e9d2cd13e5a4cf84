"""Which inbox entries are inputs: an allow-list of bundle and verdict shapes beside a deny-list.

Decides, from a name and one ``lstat``: whether an entry is junk (editor and OS temporaries, sync
and download partials, dotfiles, the daemon's own reports), whether it has the shape of a project
bundle (a folder with ``index.md`` at its root, a ``.zip``, a ``.tar.gz``/``.tgz``) or of a verdict
(``.json``), and which top-level inbox entry an event path belongs to.

Never reads file contents, never follows a symlink, never decides *when* an entry is complete
(``stability`` does) and never moves anything (``claim`` does). The lists are data: user patterns
extend the defaults and never replace them (paperless ``ConsumerFilter``, watchfiles).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path, PurePath
from typing import Final

__all__ = [
    "BUNDLE_INDEX",
    "BUNDLE_SUFFIXES",
    "DENY_PATTERNS",
    "VERDICT_SUFFIXES",
    "InboxFilter",
    "top_level_entry",
]

# A bundle folder is recognised by its OKF entry page, required at the root only (DESIGN §3).
BUNDLE_INDEX: Final = "index.md"

# Archived bundles; a folder with BUNDLE_INDEX is the other bundle shape. Matched case-insensitively
# because archives made on Windows and macOS arrive as ``.ZIP`` as often as ``.zip``.
BUNDLE_SUFFIXES: Final[tuple[str, ...]] = (
    ".zip",
    ".tar.gz",
    ".tgz",
    ".csv",  # estimate files dropped alone: imported into their bundle at the claim
    ".xlsx",
    ".xml",  # NS 3459
)

# Expert verdicts are hand-edited JSON at the top of inbox/verdicts/.
VERDICT_SUFFIXES: Final[tuple[str, ...]] = (".json",)

# Regular expressions, each matched against the WHOLE name, case-insensitively (research/daemon.md
# F4, F17). Several are also dotfiles; they are listed anyway so each one says where it comes from.
DENY_PATTERNS: Final[tuple[str, ...]] = (
    r"\d+",  # vim's write-permission probe ``4913`` (and any pure-digit temporary)
    r".*\.sw[a-px]",  # vim swap files .swp, .swo, … and the .swx probe
    r".*~",  # backups from vim, emacs, gedit, nano
    r"\.#.*",  # emacs lock files (dangling symlinks)
    r"#.*#",  # emacs auto-save files
    r"\.goutputstream-.*",  # gedit / GIO atomic-save temporaries
    r".*___jb_(tmp|old)___",  # JetBrains "safe write" temporaries
    r".*\.part",  # Firefox, KDE and curl partial downloads
    r".*\.crdownload",  # Chrome partial downloads
    r".*\.tmp",  # generic temporaries
    r"\.~lock\..*#",  # LibreOffice lock files
    r"~\$.*",  # Microsoft Office owner files
    r"\.syncthing\..*\.tmp",  # Syncthing temporaries
    r"\..+\.[a-z0-9]{6}",  # rsync temporaries ``.NAME.abcdef``
    r"\.DS_Store",  # macOS Finder metadata
    r"\._.*",  # macOS AppleDouble resource forks
    r"Thumbs\.db",  # Windows thumbnail cache
    r"desktop\.ini",  # Windows folder settings
    r"\..*",  # every dotfile: writers rename in from a hidden name (Maildir); our .state too
    r".*\.error\.txt",  # the daemon's own error reports beside bad inputs: never an input (F17)
)


def _compile(patterns: Iterable[str]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(pattern, re.IGNORECASE) for pattern in patterns)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _has_suffix(name: str, suffixes: tuple[str, ...]) -> bool:
    lowered = name.lower()
    # ``.zip`` alone is a dotfile, not an archive: a suffix needs a stem before it.
    return any(lowered.endswith(s) and len(lowered) > len(s) for s in suffixes)


class InboxFilter:
    """Answers "is this entry an input, and of which kind?" from its name and one ``lstat``."""

    def __init__(self) -> None:
        self._deny: Final = _compile(DENY_PATTERNS)

    def is_junk(self, name: str) -> bool:
        """True for a name the daemon never treats as an input, whatever it contains."""
        return not name or any(p.fullmatch(name) for p in self._deny)

    def is_bundle_candidate(self, path: Path) -> bool:
        """A real (not symlinked) folder, or an archive file.

        A folder without ``index.md`` is still a candidate: processing quarantines it with the
        sentence that says so, where ignoring it would leave the planner waiting for ever.
        """
        info = _lstat(path)
        if info is None:
            return False
        # vim's probe 4913 is a file: a folder named by a project number is a bundle like any other.
        if self.is_junk(path.name) and not (stat.S_ISDIR(info.st_mode) and path.name.isdigit()):
            return False
        if stat.S_ISDIR(info.st_mode):
            return True
        return stat.S_ISREG(info.st_mode) and _has_suffix(path.name, BUNDLE_SUFFIXES)

    def is_verdict_candidate(self, path: Path) -> bool:
        """A regular (not symlinked) ``.json`` file that is not junk."""
        if self.is_junk(path.name) or not _has_suffix(path.name, VERDICT_SUFFIXES):
            return False
        info = _lstat(path)
        return info is not None and stat.S_ISREG(info.st_mode)


def top_level_entry(inbox: Path, path: Path | str) -> Path | None:
    """The entry directly under ``inbox`` that ``path`` lies in; None for the inbox or outside it.

    Lexical only (no ``resolve``): a watcher reports paths under the folder it was given, and
    resolving would follow the very symlinks the filter refuses.
    """
    root = PurePath(os.path.normpath(inbox))
    candidate = PurePath(os.path.normpath(path))
    try:
        relative = candidate.relative_to(root)
    except ValueError:
        return None
    if not relative.parts:
        return None
    return inbox / relative.parts[0]
