"""A bundle's cost lines written back as the csv a planner's spreadsheet opens: the round trip of
an import, every field and every figure exactly as the bundle holds it.

Semicolon-separated, decimal comma, no thousands grouping (a spreadsheet reads it as numbers),
UTF-8 with a byte-order mark (Excel in Norwegian opens it so); the code column is ``Postnr`` when
the lines are posts, else ``Konto``; the headers are the ones the import reads back (``Min``,
``Sannsynlig`` and ``Maks`` for a triple estimate), so an import of the file gives the same lines.
A line's distribution and correlation group, where the bundle sets them, are written too; the
project's own fields (its name, stated frame and correlation groups) go into the side file beside
the csv, so an import of the pair gives back the project the bundle holds.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from decimal import Decimal
from typing import Final

from portfolio_optimiser.context.models import CostLine, Project

__all__ = ["export_csv", "export_side_file"]


def _figure(value: int | float | None) -> str:
    if value is None:
        return ""
    return f"{Decimal(str(value)).normalize():f}".replace(".", ",")


def _text(value: str | None) -> str:
    return value or ""


_Column = tuple[str, Callable[[CostLine], str], Callable[[CostLine], bool]]


def _always(_line: CostLine) -> bool:
    return True


_COLUMNS: Final[tuple[_Column, ...]] = (
    ("NS3451", lambda ln: _text(ln.ns3451), _always),
    ("NS3420", lambda ln: _text(ln.ns3420), _always),
    ("Tekst", lambda ln: ln.title, _always),
    ("Mengde", lambda ln: _figure(ln.quantity), _always),
    ("Enhet", lambda ln: _text(ln.unit), _always),
    ("Enhetspris", lambda ln: _figure(ln.unit_price_nok), _always),
    ("Sum", lambda ln: _figure(ln.amount_nok), _always),
    # Written where any line has one: a file without triples stays the file the planner knows.
    ("Min", lambda ln: _figure(ln.min_nok), lambda ln: ln.min_nok is not None),
    ("Sannsynlig", lambda ln: _figure(ln.likely_nok), lambda ln: ln.likely_nok is not None),
    ("Maks", lambda ln: _figure(ln.max_nok), lambda ln: ln.max_nok is not None),
    ("Fordeling", lambda ln: ln.distribution, lambda ln: ln.distribution != "pert"),
    (
        "Korrelasjonsgruppe",
        lambda ln: _text(ln.correlation_group),
        lambda ln: ln.correlation_group is not None,
    ),
)


def export_csv(project: Project) -> str:
    """The project's cost lines as csv text (without the byte-order mark)."""
    lines = project.cost_lines
    posts = any(line.post for line in lines)
    columns = [c for c in _COLUMNS if c[2] is _always or any(c[2](line) for line in lines)]
    out = io.StringIO()
    writer = csv.writer(out, delimiter=";", lineterminator="\n")
    writer.writerow(["Postnr" if posts else "Konto", *(header for header, _v, _w in columns)])
    for line in lines:
        writer.writerow([line.code, *(value(line) for _h, value, _w in columns)])
    return out.getvalue()


def _toml_value(value: object) -> str:
    # A JSON string or number is a TOML basic string or number: no TOML writer needed for these.
    return json.dumps(value)


def export_side_file(project: Project) -> str:
    """The side file that names the exported csv's project (``<id>.toml`` beside it)."""
    out = [f"id = {_toml_value(project.id)}", f"name = {_toml_value(project.name)}"]
    for key in ("category", "base_estimate_nok", "p50_nok", "p85_nok"):
        value = getattr(project, key)
        if value is not None:
            out.append(f"{key} = {_toml_value(value)}")
    if project.correlation:
        out.append("")
        out.append("[correlation]")
        out.extend(f"{_toml_value(g)} = {c!r}" for g, c in sorted(project.correlation.items()))
    return "\n".join(out) + "\n"
