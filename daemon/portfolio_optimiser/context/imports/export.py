"""A bundle's cost lines written back as the csv a planner's spreadsheet opens: the round trip of
an import, every figure exactly as the bundle holds it.

Semicolon-separated, decimal comma, no thousands grouping (a spreadsheet reads it as numbers),
UTF-8 with a byte-order mark (Excel in Norwegian opens it so); the code column is ``Postnr`` when
the lines are posts, else ``Konto``.
"""

from __future__ import annotations

import csv
import io
from decimal import Decimal

from portfolio_optimiser.context.models import Project

__all__ = ["export_csv"]


def _figure(value: int | float | None) -> str:
    if value is None:
        return ""
    return f"{Decimal(str(value)).normalize():f}".replace(".", ",")


def export_csv(project: Project) -> str:
    """The project's cost lines as csv text (without the byte-order mark)."""
    posts = any(line.post for line in project.cost_lines)
    out = io.StringIO()
    writer = csv.writer(out, delimiter=";", lineterminator="\n")
    code = "Postnr" if posts else "Konto"
    writer.writerow([code, "NS3451", "NS3420", "Tekst", "Mengde", "Enhet", "Enhetspris", "Sum"])
    for line in project.cost_lines:
        writer.writerow(
            [
                line.code,
                line.ns3451 or "",
                line.ns3420 or "",
                line.title,
                _figure(line.quantity),
                line.unit or "",
                _figure(line.unit_price_nok),
                _figure(line.amount_nok),
            ]
        )
    return out.getvalue()
