"""How fast, and in how much memory, an estimate file becomes a bundle (issues 17 and 44).

    uv run python -m tests.bench.bench_import          # 20 000 posts and rows; csv of ~200 MiB
    uv run python -m tests.bench.bench_import --quick  # 2 000; csv of ~20 MiB

Each measure runs in a fresh interpreter (its peak RSS is its own): an NS 3459 priced tender of
N posts, each with an embedded image as real files carry them (about 60 MB at 20 000 posts),
read (``read_estimate``) and written as a bundle (``write_bundle``); and an xlsx kalkyle of N rows
whose sums are formulas with their saved values, read the same way (python-calamine for the values,
a streaming scan of the sheet XML for hidden rows and unsaved formulas), beside openpyxl reading
the same workbook as the product did before (read-only, once for the values, once for the
formulas). And a csv past ``[imports] max_bytes`` (210 MiB of short post rows, 3.4 million of
them): refused from its size at the default limit; read as a stream under a raised one, until it
has more lines than a bundle holds; and a csv of as many lines as a bundle holds, each row 2 KB
wide with the resource columns a Calcus export has beside the ones read (205 MiB), read to its
end under the raised limit and imported.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from ._table import Row, report

_CHILD = r"""
import json, sys, time
from pathlib import Path
from portfolio_optimiser.context.imports import read_estimate, write_bundle
source, into = Path(sys.argv[1]), Path(sys.argv[2])
start = time.perf_counter()
estimate = read_estimate(source)
read_s = time.perf_counter() - start
bundle = write_bundle(estimate, into)
total_s = time.perf_counter() - start
from portfolio_optimiser.context.ir import load_ir_projections
lines = len(load_ir_projections(bundle).cost_lines)
ir_s = time.perf_counter() - start - total_s
files = sum(1 for _ in bundle.rglob("*.md"))
# VmHWM (after the bundle is read back, which is not timed), not ru_maxrss: Linux keeps ru_maxrss across exec, so it would be the parent's peak.
status = Path("/proc/self/status").read_text()
rss_mb = int(next(ln for ln in status.splitlines() if ln.startswith("VmHWM")).split()[1]) / 1024
print(json.dumps({"read_s": read_s, "total_s": total_s, "rss_mb": rss_mb, "posts": len(estimate.posts),
                  "ir_s": ir_s, "lines": lines, "files": files}))
"""

_OPENPYXL = r"""
import json, sys, time
start = time.perf_counter()
from openpyxl import load_workbook
rows = 0
for data_only in (True, False):
    book = load_workbook(sys.argv[1], read_only=True, data_only=data_only)
    rows += sum(1 for sheet in book.worksheets for _ in sheet.iter_rows(values_only=True))
    book.close()
print(json.dumps({"read_s": time.perf_counter() - start, "rows": rows}))
"""


_CSV_CHILD = r"""
import json, sys, time
from pathlib import Path
from portfolio_optimiser.context.imports import ImportRefused, read_estimate, write_bundle
source, into, limit = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
start = time.perf_counter()
try:
    estimate = read_estimate(source, units=(), max_bytes=limit)
    read_s = time.perf_counter() - start
    write_bundle(estimate, into)
    outcome = f"imported, {len(estimate.posts)} lines"
except ImportRefused as exc:
    read_s = time.perf_counter() - start
    outcome = "refused: " + exc.problems[0].message.split(";")[0]
total_s = time.perf_counter() - start
status = Path("/proc/self/status").read_text()
rss_mb = int(next(ln for ln in status.splitlines() if ln.startswith("VmHWM")).split()[1]) / 1024
print(json.dumps({"read_s": read_s, "total_s": total_s, "rss_mb": rss_mb, "outcome": outcome}))
"""
_MIB = 1024 * 1024
_DEFAULT_LIMIT = 200 * _MIB
_RESOURCES = ";".join(f"Ressurs {k}" for k in range(1, 41))


def _csv(path: Path, target: int, *, wide: bool = False, rows: int | None = None) -> int:
    """A semicolon csv of post rows, decimal commas and grouped thousands, until ``target``
    bytes (or ``rows`` rows); ``wide``: 40 resource columns the import does not read beside them,
    and a remark. Returns its rows."""
    header = "Postnr;NS3420;Tekst;Mengde;Enhet;Enhetspris;Sum"
    if wide:
        header += f";{_RESOURCES};Kommentar"
    written = 0
    with path.open("w", encoding="utf-8", newline="") as out:
        out.write(header + "\n")
        while (rows is None and out.tell() < target) or (rows is not None and written < rows):
            batch = []
            for i in range(written, written + 10_000):
                quantity, price = 1 + i % 50, 100 + i % 900
                cents = quantity * (price * 100 + 50)
                amount = f"{cents // 100:,}".replace(",", " ") + f",{cents % 100:02d}"
                line = (
                    f"{1 + i // 100_000:02d}.{21 + i % 50}.{i % 100_000};AV{i % 40}.{i % 7};Post {i} bæring;"
                    + f"{quantity};m2;{price:,}".replace(",", " ")
                    + f",50;{amount}"
                )
                if wide:
                    line += ";" + ";".join(f"{(i * k) % 9973},{k % 10}0" for k in range(1, 41))
                    line += ";" + f"Kontrollert mot tegning {i % 400}, revisjon C. " * 43
                batch.append(line)
            out.write("\n".join(batch) + "\n")
            written += len(batch)
    return written


def _csv_rows(root: Path, quick: bool) -> list[Row]:
    """The csv measures: past the limit at the default and at a raised one; under it."""
    scale = 10 if quick else 1
    limit = _DEFAULT_LIMIT // scale
    big = root / "kalkyle-stor.csv"
    rows = _csv(big, 210 * _MIB // scale)
    mib = big.stat().st_size / _MIB
    measured: list[Row] = []
    for name, max_bytes, target in (
        ("the default limit", limit, "refused unread; ≤ 0.5 s"),
        ("a raised limit", 4 * limit, "RSS ≤ 300 MB"),
    ):
        into = root / f"csv-{len(measured)}"
        into.mkdir()
        got = _child(_CSV_CHILD, str(big), str(into), str(max_bytes))
        within = got["total_s"] <= 0.5 if max_bytes == limit else got["rss_mb"] <= 300
        measured.append(
            Row(
                f"csv past the limit, {rows} rows, {mib:.0f} MiB, at {name} "
                f"({max_bytes // _MIB} MiB)",
                target,
                f"{got['total_s']:.2f} s; peak RSS {got['rss_mb']:.0f} MB; {got['outcome']}",
                within and "refused" in str(got["outcome"]),
            )
        )
    wide = root / "kalkyle-bred.csv"
    rows = _csv(wide, 0, wide=True, rows=100_000 // scale)
    mib = wide.stat().st_size / _MIB
    into = root / "csv-wide"
    into.mkdir()
    got = _child(_CSV_CHILD, str(wide), str(into), str(4 * limit))
    measured.append(
        Row(
            f"csv past the limit, {rows} rows of 47 columns"
            + ("" if quick else " (as many lines as a bundle holds)")
            + ", "
            f"{mib:.0f} MiB, at a raised limit ({4 * limit // _MIB} MiB): read as a stream to its "
            "end, and written as a bundle",
            "RSS ≤ 300 MB",
            f"{got['total_s']:.2f} s (read {got['read_s']:.2f} s); peak RSS {got['rss_mb']:.0f} MB;"
            f" {got['outcome']}",
            got["rss_mb"] <= 300 and "imported" in str(got["outcome"]),
        )
    )
    return measured


def _posts(n: int) -> list[tuple[str, str, str, str, Decimal, Decimal]]:
    return [
        (
            f"5f0c7a1e-0000-4000-8000-{i:012d}",
            f"{1 + i // 10_000:02d}.{21 + i % 50}.{i}",
            f"AV{i % 40}.{i % 7}",
            f"Post {i}\nBeskrivelse av post {i}",
            Decimal(100 + i % 900) + Decimal("0.125"),
            Decimal(250 + i % 4000) + Decimal("0.5"),
        )
        for i in range(n)
    ]


def _child(code: str, *args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    )
    data: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return data


def _xlsx(path: Path, n: int) -> Path:
    """A kalkyle of ``n`` post rows whose sums are formulas with the values Excel saves."""
    import re
    import zipfile

    from openpyxl import Workbook

    book = Workbook(write_only=True)
    sheet = book.create_sheet("Kalkyle")
    sheet.append(["Postnr", "NS3420", "Tekst", "Mengde", "Enhet", "Enhetspris", "Sum"])
    for _g, postnr, code, text, quantity, price in _posts(n):
        amount = (quantity * price).quantize(Decimal("0.01"))
        sheet.append(
            [postnr, code, text.splitlines()[0], float(quantity), "m2", float(price), float(amount)]
        )
    book.save(path)
    with zipfile.ZipFile(path) as written:
        members = {info: written.read(info) for info in written.infolist()}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as patched:
        for info, data in members.items():
            if info.filename.startswith("xl/worksheets/"):
                data = re.sub(rb'(<c r="G(\d+)"[^>]*>)(<v>)', rb"\1<f>D\2*F\2</f>\3", data)
            patched.writestr(info, data)
    return path


def _bundle_note(got: dict[str, Any]) -> str:
    return (
        f"; the bundle: {got['files']:.0f} files, read back by the IR ({got['lines']:.0f} lines) "
        f"in {got['ir_s']:.2f} s"
    )


def main(argv: list[str] | None = None) -> int:
    from tests.estimates import ns3459_xml

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--csv-only", action="store_true", help="only the csv measures")
    args = parser.parse_args(argv)
    n = 2_000 if args.quick else 20_000
    started = time.perf_counter()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-import-") as tmp:
        root = Path(tmp)
        rows += _csv_rows(root, args.quick)
        if args.csv_only:
            return report(rows, "csv only", time.perf_counter() - started)
        xml = ns3459_xml(root / "tender.xml", posts=_posts(n), image_bytes=2_300)
        size_mb = xml.stat().st_size / 1_000_000
        (root / "a").mkdir()
        got = _child(_CHILD, str(xml), str(root / "a"))
        rows.append(
            Row(
                f"NS 3459 priced tender, {n} posts with images ({size_mb:.0f} MB): read, and "
                "written as a bundle",
                "≤ 5 s; RSS ≤ 200 MB",
                f"{got['total_s']:.2f} s (read {got['read_s']:.2f} s); peak RSS {got['rss_mb']:.0f} MB"
                + _bundle_note(got),
                got["total_s"] <= 5 and got["rss_mb"] <= 200 and got["lines"] == n,
            )
        )
        book = _xlsx(root / "kalkyle.xlsx", n)
        (root / "b").mkdir()
        got = _child(_CHILD, str(book), str(root / "b"))
        try:
            before = _child(_OPENPYXL, str(book))
            beside = f"; openpyxl reads it (values, then formulas) in {before['read_s']:.2f} s"
        except subprocess.CalledProcessError:
            beside = "; openpyxl is not installed here (uv sync installs it with the dev group)"
        rows.append(
            Row(
                f"xlsx kalkyle, {n} rows, sums as formulas: read (python-calamine and a scan of the "
                "sheet XML), and written as a bundle",
                "≤ 5 s",
                f"{got['total_s']:.2f} s (read {got['read_s']:.2f} s); peak RSS "
                f"{got['rss_mb']:.0f} MB{beside}" + _bundle_note(got),
                got["total_s"] <= 5 and got["lines"] == n,
            )
        )
    scale = "quick (2 000)" if args.quick else "full (20 000)"
    return report(rows, scale, time.perf_counter() - started)


if __name__ == "__main__":
    sys.exit(main())
