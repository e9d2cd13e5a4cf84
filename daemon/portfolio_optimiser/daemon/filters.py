"""Which inbox entries are inputs: an allow-list of bundle and verdict shapes beside a deny-list.

Decides, from a name and one ``lstat``: whether an entry is junk (editor and OS temporaries, sync
and download partials, dotfiles, the daemon's own reports), whether it has the shape of a project
bundle (a folder with ``index.md`` at its root, a ``.zip``, a ``.tar.gz``/``.tgz``) or of a verdict
(``.json``), what an entry of neither shape is (``not_taken``: every input is answered, never
ignored), and which top-level inbox entry an event path belongs to.

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
    "TAKEN_IN_PROJECTS",
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

TAKEN_IN_PROJECTS: Final = (
    "a bundle folder (index.md at its root), a .zip, .tar.gz or .tgz of one, or an estimate file "
    "(NS 3459 .xml, .xlsx, .csv)"
)
"""What inbox/projects/ takes, in the words of every refusal of something else."""

_KNOWN_KINDS: Final[tuple[tuple[tuple[str, ...], str], ...]] = (
    ((".pdf",), "a PDF document"),
    ((".doc", ".docx", ".odt", ".rtf"), "a text document"),
    ((".xls", ".xlsm", ".xlsb"), "an Excel workbook in a format the import does not read (save it as .xlsx)"),
    ((".ods",), "a spreadsheet in OpenDocument format (save it as .xlsx)"),
    ((".md", ".markdown"), "a markdown file on its own (a bundle is a folder of them, with index.md)"),
    ((".json",), "a JSON file (a verdict goes into inbox/verdicts/)"),
    ((".txt",), "a text file"),
    ((".7z", ".rar", ".gz", ".bz2", ".xz", ".tar"), "an archive of a kind the inbox does not unpack"),
    ((".png", ".jpg", ".jpeg", ".gif", ".tif", ".tiff", ".heic"), "a picture"),
    ((".dwg", ".dxf", ".ifc", ".rvt"), "a drawing or model file"),
    ((".eml", ".msg"), "an e-mail"),
)  # fmt: skip
"""What a file the inbox does not take most likely is, by its suffix, for the one sentence."""

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
        """A real (not symlinked) folder, or an archive or estimate file.

        A folder without ``index.md`` is still a candidate: processing quarantines it with the
        sentence that says so, where ignoring it would leave the planner waiting for ever (as
        what the inbox does not take is set aside, ``not_taken``).
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

    def not_taken(self, path: Path, *, verdicts: bool = False, name: str = "") -> str | None:
        """Why an entry that is not junk is no input of its inbox (one sentence naming what it
        looks like and what is taken), or None when it is one (or junk, or gone).

        In inbox/projects/ such an entry is set aside into outbox/failed/ with the sentence; in
        inbox/verdicts/ the sentence is written beside it (an expert's files are never moved).
        """
        name = name or path.name  # a claimed entry is known by the name it was dropped under
        info = _lstat(path)
        if info is None or self.is_junk(name):
            return None
        if verdicts:
            if stat.S_ISREG(info.st_mode) and _has_suffix(name, VERDICT_SUFFIXES):
                return None
            if stat.S_ISREG(info.st_mode) and name.lower().endswith(".sig"):
                return None  # a signature, read with its verdict (``signing``)
            if stat.S_ISREG(info.st_mode) and ".json." in name.lower():
                stem = name[: name.lower().index(".json.") + 5]
                return (
                    f"{name} is not read as a verdict: its name does not end in .json (an editor "
                    f"added {name[len(stem) :]!r}); rename it to {stem}"
                )
            return (
                f"{name} is not read as a verdict: inbox/verdicts/ takes verdict files (a "
                "template from outbox/runs/<project>/<run>/verdicts/, filled in and saved under "
                "its own NAME.json) and their signatures (NAME.json.sig)"
            )
        if stat.S_ISLNK(info.st_mode):
            what = "a symbolic link, which the inbox does not follow"
        elif stat.S_ISDIR(info.st_mode) or _has_suffix(name, BUNDLE_SUFFIXES):
            return None
        elif not stat.S_ISREG(info.st_mode):
            what = "not a regular file (a pipe, socket or device)"
        else:
            lowered = name.lower()
            what = next(
                (kind for suffixes, kind in _KNOWN_KINDS if lowered.endswith(suffixes)),
                "a file of a kind the inbox does not take",
            )
        return (
            f"{name} is {what}; nothing of it was read: inbox/projects/ takes {TAKEN_IN_PROJECTS}"
        )

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
