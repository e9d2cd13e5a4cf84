"""Unpacking an archived bundle (``.zip``, ``.tar.gz``/``.tgz``) into a folder, safely or not at all.

Decides: whether every member of an archive may become a file of a bundle, and which folder of
the archive is the bundle (``index.md`` at the archive's root, or in its one top-level folder).
Refused, each with an :class:`ArchiveError` naming the member and what to do: paths that climb out
(``..``), absolute paths and drive letters (zip-slip), symbolic and hard links, devices and pipes,
encrypted members, more than ``max_members`` members, and more than ``max_total_bytes``
uncompressed (zip bombs — counted as bytes are written, so a header that lies does not help).

Never uses ``extractall`` and never trusts an archive's modes or times; never leaves anything
behind on refusal (it unpacks into a ``.tmp-*`` folder beside the destination and renames the
bundle into place only when complete); never replaces an existing destination.

An estimate file dropped alone (``context.imports``: a csv cost breakdown) is the other input
that becomes a bundle here: imported into the same ``.tmp-*`` folder, renamed into place whole,
and refused with every problem of the file in one :class:`ArchiveError`.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import os
import re
import secrets
import shutil
import stat
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from portfolio_optimiser._atomic import fsync_dir, publish_tree, write_tree
from portfolio_optimiser.context.imports import MAX_BYTES as MAX_IMPORT_BYTES
from portfolio_optimiser.context.imports import SUFFIXES as ESTIMATE_SUFFIXES
from portfolio_optimiser.context.imports import (
    ImportRefused,
    bundle_files_of,
    estimate_in,
    read_estimate,
)
from portfolio_optimiser.daemon.claim import TMP_PREFIX
from portfolio_optimiser.daemon.filters import BUNDLE_INDEX
from portfolio_optimiser.errors import UserError

__all__ = ["MAX_MEMBERS", "MAX_TOTAL_BYTES", "ArchiveError", "extract_bundle", "is_archive"]

# Generous for folders of markdown, small enough that one bad drop cannot fill the disk.
MAX_MEMBERS: Final = 10_000
MAX_TOTAL_BYTES: Final = 50 * 1024 * 1024  # the [daemon] max_bundle_bytes default

_ZIP_SUFFIXES: Final = (".zip",)
_TAR_GZ_SUFFIXES: Final = (".tar.gz", ".tgz")
_CHUNK_BYTES: Final = 1 << 16
_DRIVE: Final = re.compile(r"[A-Za-z]:")
# Finder adds resource forks under this folder to every zip it makes; they are never content.
_MACOS_FORKS: Final = "__MACOSX"
_RECREATE: Final = "re-create the archive from inside the bundle folder"


class ArchiveError(UserError):
    """An archive cannot become a bundle; ``str()`` is one sentence naming the member and the fix."""

    def __init__(self, message: str, *, archive: Path, member: str | None = None) -> None:
        super().__init__(message)
        self.archive = archive
        self.member = member


def is_archive(path: Path) -> bool:
    """A file that becomes a bundle: an archive, or an estimate file."""
    lowered = path.name.lower()
    return lowered.endswith(_ZIP_SUFFIXES + _TAR_GZ_SUFFIXES + ESTIMATE_SUFFIXES)


@dataclass(frozen=True)
class Reading:
    """How the inbox reads an estimate it imports: the config's own units beside the
    vocabulary (None: units are not checked), and the largest csv it reads."""

    units: tuple[str, ...] | None = None
    max_bytes: int = MAX_IMPORT_BYTES


def _bundle_of(
    estimate: Path, archive: Path, name: str | None = None, reading: Reading = Reading()
) -> dict[str, str]:
    """The bundle an estimate file becomes; its problems refuse the input they came in."""
    try:
        return bundle_files_of(
            read_estimate(estimate, name=name, units=reading.units, max_bytes=reading.max_bytes)
        )
    except ImportRefused as exc:
        raise ArchiveError(str(exc), archive=archive) from None


def _import_estimate(job: _Extraction) -> None:
    """The estimate file's bundle, written into the extraction's folder."""
    files = _bundle_of(job.archive, job.archive, job.name, job.reading)
    for rel in files:
        job.count(rel)
    write_tree(job.root, files)


class _Extraction:
    """One archive being unpacked into ``root``; counts members and bytes against the limits."""

    def __init__(self, archive: Path, root: Path, *, max_members: int, max_total_bytes: int):
        self.archive = archive
        self.root = root
        self.max_members = max_members
        self.max_total_bytes = max_total_bytes
        self.members = 0
        self.total_bytes = 0
        self.name = archive.name
        """The input's name as it was dropped."""
        self.reading = Reading()

    def refuse(self, member: str, problem: str, fix: str) -> ArchiveError:
        return ArchiveError(
            f"{self.archive.name}: member {member!r} {problem}; {fix}",
            archive=self.archive,
            member=member,
        )

    def count(self, member: str) -> None:
        self.members += 1
        if self.members > self.max_members:
            raise self.refuse(
                member,
                f"is one more than the {self.max_members} members a bundle may have",
                "split the bundle or leave out files that are not part of it",
            )

    def parts(self, member: str) -> tuple[str, ...]:
        """The member's path as safe components; () for the archive's own root (``./``)."""
        if "\x00" in member:
            raise self.refuse(member, "has a NUL byte in its name", _RECREATE)
        # Backslashes are separators too: zips made on Windows use them, and "..\\" must not pass.
        path = member.replace("\\", "/")
        if path.startswith("/"):
            raise self.refuse(member, "has an absolute path", _RECREATE + " (relative paths)")
        if _DRIVE.match(path):
            raise self.refuse(member, "starts with a drive letter", _RECREATE + " (relative paths)")
        parts = tuple(part for part in path.split("/") if part not in ("", "."))
        if ".." in parts:
            raise self.refuse(member, "climbs out of the bundle with '..'", _RECREATE)
        return parts

    def make_dir(self, member: str, parts: tuple[str, ...]) -> None:
        try:
            self.root.joinpath(*parts).mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise self.refuse(member, "clashes with a file of the same name", _RECREATE) from None

    def write_file(self, member: str, parts: tuple[str, ...], source: IO[bytes]) -> None:
        target = self.root.joinpath(*parts)
        if len(parts) > 1:
            self.make_dir(member, parts[:-1])
        try:
            # O_EXCL: a second member of the same name must not overwrite the first unnoticed.
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except (FileExistsError, IsADirectoryError, NotADirectoryError):
            raise self.refuse(
                member, "appears twice, or clashes with a folder of the same name", _RECREATE
            ) from None
        with os.fdopen(fd, "wb") as out:
            while chunk := source.read(_CHUNK_BYTES):
                self.total_bytes += len(chunk)
                if self.total_bytes > self.max_total_bytes:
                    raise self.refuse(
                        member,
                        f"takes the bundle past {self.max_total_bytes} bytes uncompressed",
                        "leave large files out of the bundle or raise [daemon] max_bundle_bytes",
                    )
                out.write(chunk)


def _zip_members(job: _Extraction) -> None:
    with zipfile.ZipFile(job.archive) as archive:
        infos = archive.infolist()
        declared = 0
        for info in infos:
            # The central directory is already read: refuse a too-big archive before writing.
            job.count(info.filename)
            declared += info.file_size
            if declared > job.max_total_bytes:
                raise job.refuse(
                    info.filename,
                    f"takes the bundle past {job.max_total_bytes} bytes uncompressed",
                    "leave large files out of the bundle or raise [daemon] max_bundle_bytes",
                )
        for info in infos:
            name = info.filename
            parts = job.parts(name)
            mode = info.external_attr >> 16  # Unix mode when made on Unix, else 0
            if info.flag_bits & 0x1:
                raise job.refuse(name, "is encrypted", "re-create the archive without a password")
            if stat.S_ISLNK(mode):
                raise job.refuse(
                    name,
                    "is a symbolic link, which a bundle may not contain",
                    "replace it with the file it points to and re-create the archive",
                )
            if stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise job.refuse(
                    name, "is a device, pipe or socket", "leave it out and re-create the archive"
                )
            if parts and parts[0] == _MACOS_FORKS:
                continue
            if info.is_dir():
                if parts:
                    job.make_dir(name, parts)
            elif not parts:
                raise job.refuse(name, "has no name", _RECREATE)
            else:
                with archive.open(info) as source:
                    job.write_file(name, parts, source)


def _tar_members(job: _Extraction) -> None:
    with tarfile.open(job.archive, "r:gz") as archive:
        # Iterated lazily: a tar has no directory, so counting as we go stops a bomb of members.
        for member in archive:
            name = member.name
            job.count(name)
            parts = job.parts(name)
            if member.issym():
                raise job.refuse(
                    name,
                    "is a symbolic link, which a bundle may not contain",
                    "replace it with the file it points to and re-create the archive",
                )
            if member.islnk():
                raise job.refuse(
                    name,
                    "is a hard link, which a bundle may not contain",
                    "replace it with a copy of the file and re-create the archive",
                )
            if parts and parts[0] == _MACOS_FORKS:
                continue
            if member.isdir():
                if parts:
                    job.make_dir(name, parts)
            elif not member.isfile():
                raise job.refuse(
                    name, "is a device, pipe or socket", "leave it out and re-create the archive"
                )
            elif not parts:
                raise job.refuse(name, "has no name", _RECREATE)
            else:
                source = archive.extractfile(member)
                if source is None:  # pragma: no cover - isfile() members always have data
                    raise job.refuse(name, "has no data", _RECREATE)
                with source:
                    job.write_file(name, parts, source)


def _estimate_files(
    folder: Path, archive: Path, reading: Reading = Reading()
) -> dict[str, str] | None:
    """The bundle of the estimate ``folder`` holds (with its side file and kuttliste), or None."""
    try:
        estimate = estimate_in(folder)
    except ImportRefused as exc:
        raise ArchiveError(str(exc), archive=archive) from None
    return None if estimate is None else _bundle_of(estimate, archive, reading=reading)


def import_folder(folder: Path, dest: Path, *, reading: Reading = Reading()) -> Path | None:
    """The bundle of the estimate a folder dropped as a project holds, published as the new
    folder ``dest``; None when the folder holds no estimate (it is a bundle itself)."""
    files = _estimate_files(folder, folder, reading)
    if files is None:
        return None
    return publish_tree(dest, files, staging=dest.parent / f"{TMP_PREFIX}{secrets.token_hex(8)}")


def _bundle_root(job: _Extraction) -> Path:
    if (job.root / BUNDLE_INDEX).is_file():
        return job.root
    children = list(job.root.iterdir())
    if len(children) == 1 and (children[0] / BUNDLE_INDEX).is_file():
        return children[0]
    for folder in (job.root, *(c for c in children if len(children) == 1 and c.is_dir())):
        files = _estimate_files(folder, job.archive, job.reading)
        if files is not None:
            imported = job.root / ".imported"
            write_tree(imported, files)
            return imported
    raise ArchiveError(
        f"{job.archive.name} has no {BUNDLE_INDEX} at its root or in its one top-level folder; "
        f"put {BUNDLE_INDEX} at the top of the bundle folder and {_RECREATE}",
        archive=job.archive,
    )


def _damaged(archive: Path, exc: BaseException) -> ArchiveError:
    return ArchiveError(
        f"{archive.name} is not a readable archive ({exc}); re-create it and drop it again",
        archive=archive,
    )


def extract_bundle(
    archive: Path,
    dest: Path,
    *,
    max_members: int = MAX_MEMBERS,
    max_total_bytes: int = MAX_TOTAL_BYTES,
    name: str | None = None,
    reading: Reading = Reading(),
) -> Path:
    """Unpack the bundle in ``archive`` to the new folder ``dest``; returns ``dest``.

    ``name`` is the input's name as it was dropped (an estimate's project is named after it).
    Raises :class:`ArchiveError` when the archive is refused (nothing is left behind) and
    ``FileExistsError`` when ``dest`` already exists. Other ``OSError`` (disk full) propagate.
    """
    lowered = archive.name.lower()
    if lowered.endswith(_ZIP_SUFFIXES):
        unpack = _zip_members
    elif lowered.endswith(_TAR_GZ_SUFFIXES):
        unpack = _tar_members
    elif lowered.endswith(ESTIMATE_SUFFIXES):
        unpack = _import_estimate
    else:
        raise ArchiveError(
            f"{archive.name} is not a .zip, .tar.gz or .tgz archive or an estimate file "
            f"({', '.join(ESTIMATE_SUFFIXES)}); drop the bundle folder itself or one of those",
            archive=archive,
        )
    if os.path.lexists(dest):
        raise FileExistsError(errno.EEXIST, f"{dest} already exists; refusing to replace it")
    work = dest.parent / f"{TMP_PREFIX}{secrets.token_hex(8)}"
    work.mkdir(parents=True)
    job = _Extraction(archive, work, max_members=max_members, max_total_bytes=max_total_bytes)
    job.name = name or archive.name
    job.reading = reading
    try:
        try:
            unpack(job)
        except (
            zipfile.BadZipFile,
            tarfile.TarError,
            gzip.BadGzipFile,
            EOFError,
            zlib.error,
        ) as exc:
            raise _damaged(archive, exc) from None
        except NotImplementedError as exc:  # a zip compression method Python cannot read
            raise _damaged(archive, exc) from None
        bundle = _bundle_root(job)
        # Checked again just before the rename: rename onto an existing EMPTY folder replaces it.
        if os.path.lexists(dest):
            raise FileExistsError(errno.EEXIST, f"{dest} already exists; refusing to replace it")
        bundle.rename(dest)
        fsync_dir(dest.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(work)
    return dest
