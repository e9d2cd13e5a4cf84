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


# A kuttliste as planners keep one: number, measure, the line it touches, saving, type, decision
# point and consequence.
KUTTLISTE: list[tuple[str, str, str, Decimal, str, str, str]] = [
    ("1", "Enklere fasadeplater", "23", Decimal("420000"), "material_substitution",
     "2027-03-01", "Fasaden blir mindre variert"),
    ("2", "Én heis i stedet for to", "62", Decimal("1215000"), "scope_reduction",
     "Forprosjekt", "Lengre ventetid i rushtiden"),
]  # fmt: skip


def kuttliste_csv(path: Path, *, rows: list[str] | None = None) -> Path:
    """The kuttliste as a semicolon csv beside the estimate."""
    out = ["Nr;Tiltak;Konto;Besparelse;Type;Frist;Konsekvens"]
    out += [
        f"{nr};{title};{code};{norwegian(saving)};{kind};{when};{what}"
        for nr, title, code, saving, kind, when, what in KUTTLISTE
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(("\n".join(out + (rows or [])) + "\n").encode("utf-8-sig"))
    return path


@dataclass(frozen=True)
class Line:
    code: str
    title: str
    quantity: Decimal | None
    unit: str | None
    unit_price: Decimal | None
    amount: Decimal


def imported_from(bundle: Path, code: str) -> str:
    """Where the bundle's line ``code`` stands in its source, read as the product reads it; the
    file holding it must carry the ingest stamp naming that source."""
    from portfolio_optimiser.context.frontmatter import read_concept
    from portfolio_optimiser.context.ir import load_ir_projections

    line = load_ir_projections(bundle).line(code)
    assert line is not None and line.imported_from is not None
    meta = read_concept(bundle / line.source, line.source).frontmatter
    assert meta["generated"] is True
    assert meta["ingest_manifest"]["source"] == line.imported_from.split(",")[0]
    return line.imported_from


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


def triple(line: Line) -> tuple[Decimal, Decimal, Decimal]:
    """A triple estimate around the line's amount (min, most likely, max), as a planner's
    uncertainty columns give it: the amount is the most likely figure."""
    return (
        (line.amount * Decimal("0.9")).quantize(Decimal("0.01")),
        line.amount,
        (line.amount * Decimal("1.25")).quantize(Decimal("0.01")),
    )


def kalkyle_csv(
    path: Path, *, subtotals: bool = True, rows: list[str] | None = None, triples: bool = False
) -> Path:
    """A semicolon csv of the accounts, as Excel in Norwegian saves it (UTF-8 with a BOM);
    ``triples``: with Min, Sannsynlig and Maks columns."""
    out = [
        "Kalkyle Nordvik skole;;;;;",
        "Versjon 3;;;;;",
        ";;;;;",
        "Konto;Tekst;Mengde;Enhet;Enhetspris;Sum" + (";Min;Sannsynlig;Maks" if triples else ""),
    ]
    building = Decimal(0)
    for line in lines():
        extremes = ";" + ";".join(plain_nb(v) for v in triple(line)) if triples else ""
        if line.quantity is None:
            out.append(f"{line.code};{line.title};;;;{norwegian(line.amount)}{extremes}")
        else:
            out.append(
                f"{line.code};{line.title};{plain_nb(line.quantity)};{line.unit};"
                f"{plain_nb(line.unit_price or Decimal(0))};{norwegian(line.amount)}{extremes}"
            )
        if line.code.startswith("2"):
            building += line.amount
    if subtotals:
        out.insert(4, f"2;Bygning;;;;{norwegian(building)}")
        out.append(f";Sum prosjekt;;;;{norwegian(sum((ln.amount for ln in lines()), Decimal(0)))}")
    out += rows or []
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(("\n".join(out) + "\n").encode("utf-8-sig"))
    return path


def kalkyle_xlsx(path: Path, *, saved: bool = True, kuttliste: bool = False) -> Path:
    """The same accounts as a workbook, as a kalkyle template has them: a cover sheet, the
    building on one sheet (a merged title above the header, amounts as formulas, a "Sum" row),
    the installations and common costs on another. ``saved``: the formulas carry the values
    Excel saves with them (openpyxl writes none; they are put in as Excel would)."""
    import re
    import zipfile

    from openpyxl import Workbook

    book = Workbook()
    cover = book.active
    assert cover is not None
    cover.title = "Forside"
    cover["A1"] = "Kalkyle Nordvik skole"
    cover["A2"] = "Utarbeidet av planavdelingen"
    values: dict[tuple[str, str], Decimal] = {}
    building = book.create_sheet("Bygg")
    building["A1"] = "Bygg"
    building.merge_cells("A1:F1")
    building.append([])
    building.append(["Konto", "Tekst", "Mengde", "Enhet", "Enhetspris", "Sum"])
    rest = book.create_sheet("Tekniske anlegg")
    rest.append(["Account", "Text", "Quantity", "Unit", "Unit price", "Amount"])
    first = 4
    for line in lines():
        sheet = building if line.code.startswith("2") else rest
        row = sheet.max_row + 1
        if line.quantity is None:
            sheet.append([line.code, line.title, None, None, None, float(line.amount)])
            continue
        sheet.append(
            [line.code, line.title, float(line.quantity), line.unit, float(line.unit_price or 0)]
        )
        sheet[f"F{row}"] = f"=C{row}*E{row}"
        values[(sheet.title, f"F{row}")] = line.amount
    last = building.max_row
    building.append([None, "Sum bygg", None, None, None, f"=SUM(F{first}:F{last})"])
    if kuttliste:
        cuts = book.create_sheet("Kuttliste")
        cuts.append(["Nr", "Tiltak", "Konto", "Besparelse", "Type", "Frist", "Konsekvens"])
        for nr, title, code, saving, kind, when, what in KUTTLISTE:
            cuts.append([int(nr), title, code, float(saving), kind, when, what])
    book.save(path)
    if not saved:
        return path
    sheets = {ws.title: f"xl/worksheets/sheet{i}.xml" for i, ws in enumerate(book.worksheets, 1)}
    with zipfile.ZipFile(path) as original:
        members = {info: original.read(info) for info in original.infolist()}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as patched:
        for info, data in members.items():
            title = next((t for t, member in sheets.items() if member == info.filename), None)
            if title is not None:
                text = data.decode("utf-8")
                for (sheet, ref), value in values.items():
                    if sheet == title:
                        text = re.sub(
                            rf'(<c r="{ref}"[^>]*><f>[^<]*</f>)(?:<v ?/>|<v></v>)',  # stdlib or lxml writer
                            rf"\g<1><v>{value}</v>",
                            text,
                        )
                data = text.encode("utf-8")
            patched.writestr(info, data)
    return path


NS3459_POSTS: list[tuple[str, str, str, str, Decimal, Decimal]] = [
    # (GUID, Postnr, NS 3420 code, text, quantity, unit price) — unit m2 unless a third level says
    (
        "5f0c7a1e-0001-4c1e-9a11-000000000001",
        "01.21.1",
        "KB2.11",
        "Fundamenter\nPlasstøpt betong",
        Decimal("412.5"),
        Decimal("2410.75"),
    ),
    (
        "5f0c7a1e-0001-4c1e-9a11-000000000002",
        "01.23.1",
        "HA1.1",
        "Yttervegg\nBindingsverk",
        Decimal("1625.25"),
        Decimal("6480"),
    ),
    (
        "5f0c7a1e-0001-4c1e-9a11-000000000003",
        "01.36.1",
        "AV1.1",
        "Ventilasjon\nAggregat og kanaler",
        Decimal("3600"),
        Decimal("2310"),
    ),
    (
        "5f0c7a1e-0001-4c1e-9a11-000000000004",
        "01.44.1",
        "EL2.1",
        "Lys\nArmaturer",
        Decimal("3600.123456"),
        Decimal("1010.5"),
    ),
]


def ns3459_xml(
    path: Path,
    *,
    priced: bool = True,
    version: str = "2012",
    posts: list[tuple[str, str, str, str, Decimal, Decimal]] | None = None,
    sums: dict[str, str] | None = None,
    doctype: str = "",
    image_bytes: int = 20_000,
    encoding: str = "utf-8",
) -> Path:
    """A price request or priced tender of coded posts, as the tools write NS 3459
    (``tests/ns3459_files``): the post-number plan with its levels, posts with GUIDs, NS 3420
    codes and headings, pictures inside the RTF. ``sums`` overrides a post's Sum (by Postnr)."""
    from .ns3459_files import posts_of, write_ns3459

    return write_ns3459(
        path,
        posts_of(posts if posts is not None else NS3459_POSTS, sums),
        kind="Pristilbud" if priced else "Prisforesporsel",
        project="Nordvik skole",
        version=version,
        doctype=doctype,
        picture_bytes=image_bytes // 2,
        encoding=encoding,
    )
