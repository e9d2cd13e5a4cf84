"""How fast, and in how much memory, an estimate file becomes a bundle (issue 17).

    uv run python -m tests.bench.bench_import          # 20 000 posts and rows
    uv run python -m tests.bench.bench_import --quick  # 2 000

Each measure runs in a fresh interpreter (its peak RSS is its own): an NS 3459 priced tender of
N posts, each with an embedded image as real files carry them (about 50 MB at 20 000 posts),
read (``read_estimate``) and written as a bundle (``write_bundle``); and an xlsx of N rows read by
openpyxl, beside python-calamine reading the same workbook's values where it is installed.
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
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so it would be the parent's peak.
status = Path("/proc/self/status").read_text()
rss_mb = int(next(ln for ln in status.splitlines() if ln.startswith("VmHWM")).split()[1]) / 1024
print(json.dumps({"read_s": read_s, "total_s": total_s, "rss_mb": rss_mb, "posts": len(estimate.posts)}))
"""

_CALAMINE = r"""
import json, sys, time
start = time.perf_counter()
from python_calamine import CalamineWorkbook
book = CalamineWorkbook.from_path(sys.argv[1])
rows = sum(len(book.get_sheet_by_name(n).to_python()) for n in book.sheet_names)
print(json.dumps({"read_s": time.perf_counter() - start, "rows": rows}))
"""


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


def _child(code: str, *args: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    )
    data: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return data


def _xlsx(path: Path, n: int) -> Path:
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
    return path


def main(argv: list[str] | None = None) -> int:
    from tests.estimates import ns3459_xml

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    n = 2_000 if args.quick else 20_000
    started = time.perf_counter()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-import-") as tmp:
        root = Path(tmp)
        xml = ns3459_xml(root / "tender.xml", posts=_posts(n), image_bytes=2_300)
        size_mb = xml.stat().st_size / 1_000_000
        (root / "a").mkdir()
        got = _child(_CHILD, str(xml), str(root / "a"))
        rows.append(
            Row(
                f"NS 3459 priced tender, {n} posts with images ({size_mb:.0f} MB): read, and "
                "written as a bundle",
                "≤ 5 s; RSS ≤ 200 MB",
                f"{got['total_s']:.2f} s (read {got['read_s']:.2f} s); peak RSS {got['rss_mb']:.0f} MB",
                got["total_s"] <= 5 and got["rss_mb"] <= 200,
            )
        )
        book = _xlsx(root / "kalkyle.xlsx", n)
        (root / "b").mkdir()
        got = _child(_CHILD, str(book), str(root / "b"))
        try:
            calamine = _child(_CALAMINE, str(book))
            beside = f"; python-calamine reads its values in {calamine['read_s']:.2f} s"
        except subprocess.CalledProcessError:
            beside = "; python-calamine is not installed here (pip install python-calamine)"
        rows.append(
            Row(
                f"xlsx kalkyle, {n} rows: read with openpyxl (values and formulas), and written",
                "≤ 5 s",
                f"{got['total_s']:.2f} s (read {got['read_s']:.2f} s); peak RSS "
                f"{got['rss_mb']:.0f} MB{beside}",
                got["total_s"] <= 5,
            )
        )
    scale = "quick (2 000)" if args.quick else "full (20 000)"
    return report(rows, scale, time.perf_counter() - started)


if __name__ == "__main__":
    sys.exit(main())
