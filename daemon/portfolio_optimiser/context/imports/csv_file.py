"""A csv export of a kalkyle or a cost breakdown, read into an estimate as a stream.

Decides whether the file may be read at all (within ``[imports] max_bytes``, from its size, before
a byte of it is read), its encoding (UTF-8, with or without a byte-order mark, else Windows-1252
as Norwegian Excel saves it), its dialect (the delimiter of ``;``, ``,``, tab or ``|`` that splits
its first lines alike), its header row (the first that names a code and an amount, within the
first rows), its number format (``numbers``, from the figures of the rows under the header), and
the project it estimates (a side file, else the file's name). States each of these in the
estimate's ``how`` for the import report.

Reads the file three times, a row at a time and never whole: its bytes once (the digest, and
whether it is UTF-8), its rows for the number format, and its rows again into posts. What is held
is the posts: a 200 MiB file is read in the memory of its lines, not of its text.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import hashlib
import io
from collections.abc import Generator, Iterator, Mapping, Sequence
from itertools import islice
from pathlib import Path
from typing import IO, Any, Final

from .kuttliste import NOT_A_KUTTLISTE, read_kuttliste
from .numbers import detect_format
from .posts import Estimate, ImportRefused, Measure, Origin, Post, Problem, estimate_of
from .tabular import HEADER_ROWS, Columns, columns_of, header_row, template_of
from .tabular_rows import MAX_LINES, posts_of

__all__ = ["MAX_BYTES", "MappingNeeded", "read_csv_estimate", "read_csv_kuttliste"]

MAX_BYTES: Final = 200 * 1024 * 1024
"""The ``[imports] max_bytes`` default: far past any kalkyle (a 20 000-line one is a few MB)."""
_DELIMITERS: Final = (";", "\t", ",", "|")
_NUMERIC: Final = ("quantity", "unit_price", "amount")
_CHUNK: Final = 1 << 20
_LINE_SAMPLE: Final = 1 << 16
"""Characters of a first line read to tell the dialect: a header is never longer."""
_FORMAT_ROWS: Final = 2 * MAX_LINES
"""Rows whose figures tell the number format: every row of any file a bundle can hold."""


class MappingNeeded(ImportRefused):
    """The header names no code or no amount column: ``template`` is the mapping to fill in."""

    def __init__(self, source: str, problems: Sequence[Problem], template: str) -> None:
        super().__init__(source, problems)
        self.template = template


def _refuse(name: str, message: str, row: int | None = None) -> ImportRefused:
    return ImportRefused(name, [Problem(Origin(name, row=row), None, message)])


_BINARY: Final = "is binary, not a csv text file; export it as csv (semicolon-separated)"


def _size(n: int) -> str:
    if n < 1_048_576:
        return f"{n:,} bytes".replace(",", " ")
    return f"{n / 1_048_576:.1f}".removesuffix(".0") + " MiB"


def _check_size(path: Path, name: str, max_bytes: int) -> None:
    """Refuse a file past the limit from its size alone, before it is opened."""
    size = path.stat().st_size
    if size <= max_bytes:
        return
    shown, limit = _size(size), _size(max_bytes)
    if shown == limit:  # 200 MiB and a byte past it: said in bytes
        shown = f"{size:,} bytes".replace(",", " ")
        limit = f"{max_bytes:,} bytes".replace(",", " ") + f" ({limit})"
    raise _refuse(
        name,
        f"is {shown}, past the {limit} a csv may be ([imports] max_bytes in the config); split "
        "the file, or raise the setting if a kalkyle really is this large",
    )


def _decode(data: bytes, name: str) -> tuple[str, str]:
    if b"\x00" in data[:4096]:
        raise _refuse(name, _BINARY)
    try:
        return data.decode("utf-8-sig"), "UTF-8"
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace"), "Windows-1252 (not UTF-8)"


def _encoding(path: Path, name: str) -> tuple[str, str, str]:
    """The file's codec, how the report names it, and its SHA-256: one pass over its bytes, a
    megabyte at a time. UTF-8 only if the whole file is (a file is one encoding or the other)."""
    digest = hashlib.sha256()
    decoder: codecs.IncrementalDecoder | None = codecs.getincrementaldecoder("utf-8")()
    with path.open("rb") as handle:
        first = handle.read(_CHUNK)
        if b"\x00" in first[:4096]:
            raise _refuse(name, _BINARY)
        chunk = first
        while chunk:
            digest.update(chunk)
            if decoder is not None:
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError:
                    decoder = None
            chunk = handle.read(_CHUNK)
    if decoder is not None:
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            decoder = None
    if decoder is None:
        return "cp1252", "Windows-1252 (not UTF-8)", digest.hexdigest()
    return "utf-8-sig", "UTF-8", digest.hexdigest()


def _open(path: Path, codec: str) -> IO[str]:
    # Windows-1252 leaves five bytes undefined: each is read as U+FFFD, never refused.
    errors = "replace" if codec == "cp1252" else "strict"
    return path.open(encoding=codec, errors=errors, newline="")


def _dialect(lines: Sequence[str]) -> str:
    """The delimiter that splits the most of the first lines into the same number of fields."""
    best, score = ";", -1
    sample = [ln for ln in lines[:HEADER_ROWS] if ln.strip()]
    for delimiter in _DELIMITERS:
        widths = [len(next(csv.reader([ln], delimiter=delimiter), [])) for ln in sample]
        common = max(set(widths), key=widths.count) if widths else 1
        hits = sum(1 for w in widths if w == common) if common > 1 else 0
        if hits > score:
            best, score = delimiter, hits
    return best


_Rows = Generator[tuple[int, list[str]], None, None]


def _rows(data: bytes, name: str) -> tuple[list[list[str]], str, str]:
    """A small file's rows (a kuttliste), its encoding and its delimiter."""
    text, encoding = _decode(data, name)
    delimiter = _dialect(text.splitlines()[:HEADER_ROWS])
    return list(csv.reader(io.StringIO(text), delimiter=delimiter)), encoding, delimiter


def _stream(path: Path, codec: str, delimiter: str, name: str) -> _Rows:
    """The file's rows, numbered from 1, one at a time."""
    number = 0
    with _open(path, codec) as handle:
        try:
            for number, row in enumerate(csv.reader(handle, delimiter=delimiter), start=1):
                yield number, row
        except csv.Error as exc:  # a cell past the csv module's field limit, a stray NUL
            raise _refuse(
                name,
                f"cannot be read as csv ({exc}); export it again from the spreadsheet",
                row=number + 1,
            ) from None


def read_csv_kuttliste(path: Path, posts: Sequence[Post]) -> tuple[list[Measure], str]:
    """The measures of a kuttliste csv beside an estimate, and how it was read; raises
    :class:`ImportRefused` with every problem of it."""
    _check_size(path, path.name, MAX_BYTES)
    rows, encoding, delimiter = _rows(path.read_bytes(), path.name)
    read = read_kuttliste(
        rows,
        lambda n: Origin(path.name, row=n),
        posts,
        named=True,
        comma_by_default=delimiter == ";",
    )
    if read is None:
        raise ImportRefused(path.name, [Problem(Origin(path.name, row=1), None, NOT_A_KUTTLISTE)])
    if read.problems:
        raise ImportRefused(path.name, read.problems)
    return read.measures, (
        f"Kuttliste {path.name} ({encoding}, header on row {read.header_at + 1}): "
        f"{len(read.measures)} item(s) imported."
    )


def _figures(rows: Iterator[tuple[int, list[str]]], columns: Columns) -> Iterator[str]:
    at = [columns.index[f] for f in _NUMERIC if f in columns.index]
    for _number, row in islice(rows, _FORMAT_ROWS):
        for i in at:
            if i < len(row) and row[i].strip():
                yield row[i]


def read_csv_estimate(
    path: Path,
    *,
    mapping: Mapping[str, str] | None = None,
    project: Mapping[str, Any] | None = None,
    name: str | None = None,
    units: Sequence[str] | None = None,
    max_bytes: int = MAX_BYTES,
) -> Estimate:
    """The estimate ``path`` holds (``name``: its name as the planner gave it); raises
    :class:`ImportRefused` with every problem at once (:class:`MappingNeeded` when its columns
    cannot be told). ``units``: the config's own units (None: units are not checked);
    ``max_bytes``: a larger file is refused unread."""
    name = name or path.name
    _check_size(path, name, max_bytes)
    codec, encoding, digest = _encoding(path, name)
    with _open(path, codec) as handle:
        delimiter = _dialect([handle.readline(_LINE_SAMPLE) for _ in range(HEADER_ROWS)])
    with contextlib.closing(_stream(path, codec, delimiter, name)) as stream:
        first_rows = [row for _n, row in islice(stream, HEADER_ROWS)]
    header_at = header_row(first_rows, mapping)
    if header_at is None:
        first = next((row for row in first_rows if any(c.strip() for c in row)), [])
        found = columns_of(first, mapping).index
        missing = [f for f in ("code", "amount") if f not in found]
        raise MappingNeeded(
            name,
            [
                Problem(
                    Origin(name, row=1),
                    None,
                    f"no column recognised as {' or '.join(missing)} among "
                    f"{', '.join(repr(h) for h in first) or 'no headers'}; name them in a "
                    "mapping file (--mapping) and import again",
                )
            ],
            template_of(first),
        )
    columns = columns_of(first_rows[header_at], mapping)

    def body() -> _Rows:
        with contextlib.closing(_stream(path, codec, delimiter, name)) as stream:
            yield from ((n, row) for n, row in stream if n > header_at + 1)

    with contextlib.closing(body()) as rows:
        fmt = detect_format(_figures(rows, columns), comma_by_default=delimiter == ";")
    with contextlib.closing(body()) as rows:
        read = posts_of(((Origin(name, row=n), columns, row) for n, row in rows), fmt, units=units)
    if not read.posts and not read.problems:
        raise _refuse(name, "has no cost line under its header")
    if read.problems:
        raise ImportRefused(name, read.problems)
    shown = {";": "semicolon", ",": "comma", "\t": "tab", "|": "bar"}[delimiter]
    how = (
        f"Read {name} (SHA-256 {digest[:16]}…) as csv: {encoding}, {shown}-separated, header on "
        f"row {header_at + 1}.",
        f"Figures: {fmt.describe()}.",
        f"Columns: {columns.describe()}.",
        *read.report(),
    )
    return estimate_of(name, digest, read.posts, how, project)
