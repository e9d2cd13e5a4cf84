"""Estimate files as planners' tools export them, made by the tests (no third-party file is
committed): csv cost breakdowns by account, semicolon-separated with decimal commas, figures
grouped by spaces and followed by ``kr``, a title block above the header and subtotal rows."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

# account: (title, quantity, unit, unit price) — quantity None for a lump sum (amount only)
ACCOUNTS: dict[str, tuple[str, Decimal | None, str | None, Decimal]] = {
    "21": ("Grunn og fundamenter", Decimal("1450.5"), "m2", Decimal("2410.75")),
    "22": ("Bæresystemer", Decimal("3600"), "m2", Decimal("3815.5")),
    "23": ("Yttervegger", Decimal("1625.25"), "m2", Decimal("6480")),
    "31": ("Sanitær", Decimal("3600"), "m2", Decimal("1495.25")),
    "36": ("Luftbehandling", Decimal("3600"), "m2", Decimal("2310")),
    "44": ("Lys", Decimal("3600"), "m2", Decimal("1010.5")),
    "62": ("Heis", Decimal("2"), "stk", Decimal("1215000")),
    "1": ("Felleskostnader", None, None, Decimal("4850000")),
}


@dataclass(frozen=True)
class Line:
    code: str
    title: str
    quantity: Decimal | None
    unit: str | None
    unit_price: Decimal | None
    amount: Decimal


def lines() -> list[Line]:
    found = []
    for code, (title, quantity, unit, price) in ACCOUNTS.items():
        if quantity is None:
            found.append(Line(code, title, None, None, None, price))
        else:
            found.append(
                Line(
                    code, title, quantity, unit, price, (quantity * price).quantize(Decimal("0.01"))
                )
            )
    return found


def norwegian(value: Decimal) -> str:
    """1 234 567,89 kr: spaces between thousands, a decimal comma, ``kr`` after."""
    whole, _, cents = f"{value:.2f}".partition(".")
    grouped = f"{int(whole):,}".replace(",", " ")
    return f"{grouped},{cents} kr" if cents != "00" else f"{grouped} kr"


def plain_nb(value: Decimal) -> str:
    text = f"{value.normalize():f}"
    return text.replace(".", ",")


def kalkyle_csv(path: Path, *, subtotals: bool = True, rows: list[str] | None = None) -> Path:
    """A semicolon csv of the accounts, as Excel in Norwegian saves it (UTF-8 with a BOM)."""
    out = [
        "Kalkyle Nordvik skole;;;;;",
        "Versjon 3;;;;;",
        ";;;;;",
        "Konto;Tekst;Mengde;Enhet;Enhetspris;Sum",
    ]
    building = Decimal(0)
    for line in lines():
        if line.quantity is None:
            out.append(f"{line.code};{line.title};;;;{norwegian(line.amount)}")
        else:
            out.append(
                f"{line.code};{line.title};{plain_nb(line.quantity)};{line.unit};"
                f"{plain_nb(line.unit_price or Decimal(0))};{norwegian(line.amount)}"
            )
        if line.code.startswith("2"):
            building += line.amount
    if subtotals:
        out.insert(4, f"2;Bygning;;;;{norwegian(building)}")
        out.append(f";Sum prosjekt;;;;{norwegian(sum((ln.amount for ln in lines()), Decimal(0)))}")
    out += rows or []
    path.write_bytes(("\n".join(out) + "\n").encode("utf-8-sig"))
    return path
