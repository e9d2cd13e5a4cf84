"""An xlsx kalkyle becomes a bundle (issue 17): several sheets, the values Excel saved, a
subtotal row, a cover sheet; and a workbook that must not be opened is refused with why."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
import structlog

from portfolio_optimiser.config import load_config
from portfolio_optimiser.context.imports import ImportRefused, read_estimate, write_bundle
from portfolio_optimiser.context.imports.xlsx_file import MAX_RATIO
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.daemon.once import run_once
from portfolio_optimiser.daemon.workspace import Workspace

from .estimates import imported_from, kalkyle_xlsx, lines


def test_a_two_sheet_workbook_keeps_every_figure_and_says_how_it_was_read(tmp_path: Path) -> None:
    bundle = write_bundle(read_estimate(kalkyle_xlsx(tmp_path / "nordvik.xlsx")), tmp_path)
    project = load_ir_projections(bundle)
    got = {
        line.code: (line.quantity, line.unit, line.unit_price_nok, line.amount_nok)
        for line in project.cost_lines
    }
    want = {
        line.code: (
            None if line.quantity is None else float(line.quantity),
            line.unit,
            None if line.unit_price is None else float(line.unit_price),
            float(line.amount),
        )
        for line in lines()
    }
    assert {
        k: tuple(float(v) if isinstance(v, int | float) else v for v in t) for k, t in got.items()
    } == want
    how = (bundle / "import.md").read_text("utf-8")
    assert "Sheet 'Forside' skipped" in how
    assert (
        "Sheet 'Bygg': header on row 3" in how and "Sheet 'Tekniske anlegg': header on row 1" in how
    )
    assert "a subtotal (Sum bygg)" in how
    assert imported_from(bundle, "36") == "nordvik.xlsx, sheet 'Tekniske anlegg', row 3"


@pytest.mark.loadbearing
def test_a_formula_excel_never_computed_is_reported_never_guessed(tmp_path: Path) -> None:
    source = kalkyle_xlsx(tmp_path / "unsaved.xlsx", saved=False)
    with pytest.raises(ImportRefused) as refused:
        read_estimate(source)
    text = str(refused.value)
    assert "7 problem(s)" in text  # six lines' amounts; the Sum row's formula is not read
    assert (
        "unsaved.xlsx, sheet 'Bygg', row 4, column F (amount): a formula (=C4*E4) with no saved value"
        in text
    )


def test_an_encrypted_or_damaged_workbook_is_named_as_such(tmp_path: Path) -> None:
    encrypted = tmp_path / "locked.xlsx"
    encrypted.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(600))
    with pytest.raises(ImportRefused, match="encrypted \\(password-protected\\)"):
        read_estimate(encrypted)
    whole = kalkyle_xlsx(tmp_path / "whole.xlsx").read_bytes()
    cut = tmp_path / "cut.xlsx"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ImportRefused, match="damaged or truncated"):
        read_estimate(cut)


@pytest.mark.loadbearing
def test_a_zip_bomb_is_refused_before_anything_expands(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bomb:
        bomb.writestr("xl/worksheets/sheet1.xml", b"0" * (MAX_RATIO * 20_000))
    into = tmp_path / "into"
    into.mkdir()
    (tmp_path / "bomb.xlsx").write_bytes(buffer.getvalue())
    with pytest.raises(ImportRefused, match="a zip bomb"):
        write_bundle(read_estimate(tmp_path / "bomb.xlsx"), into)
    assert list(into.iterdir()) == []


def test_a_workbook_dropped_into_the_inbox_as_it_is_runs(tmp_path: Path) -> None:
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    kalkyle_xlsx(tmp_path / "holmen-school.xlsx").rename(ws.inbox_projects / "holmen-school.xlsx")
    report = run_once(ws, load_config(), log=structlog.get_logger("t"), environ={"CI": "true"})
    assert [(r.kind, r.state) for r in report.results] == [("bundle", "done")]
    assert len(load_ir_projections(ws.bundles_projects / "holmen-school").cost_lines) == len(
        lines()
    )


def test_a_two_row_merged_header_and_hidden_rows_are_read_and_said(tmp_path: Path) -> None:
    from openpyxl import Workbook

    book = Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.title = "Kalkyle"
    sheet.append(["Konto", "Tekst", "Mengde og pris", None, None, "Sum"])
    sheet.append([None, None, "Mengde", "Enhet", "Enhetspris", None])
    for merged in ("A1:A2", "B1:B2", "C1:E1", "F1:F2"):
        sheet.merge_cells(merged)
    sheet.append(["21", "Grunn og fundamenter", 100, "m2", 2000, 200000])
    sheet.append(["22", "Bæresystemer", 50, "m3", 3000, 150000])
    sheet.append(["23", "Yttervegger", 10, "m2", 5000, 50000])
    sheet.row_dimensions[4].hidden = True
    sheet.row_dimensions[5].hidden = True
    book.save(tmp_path / "flettet.xlsx")
    estimate = read_estimate(tmp_path / "flettet.xlsx")
    got = {p.code: (p.quantity, p.unit, p.unit_price, p.amount) for p in estimate.posts}
    assert got == {
        "21": (100, "m2", 2000, 200000),
        "22": (50, "m3", 3000, 150000),
        "23": (10, "m2", 5000, 50000),
    }
    how = "\n".join(estimate.how)
    assert "Sheet 'Kalkyle': header on row 2 (merged cells A1:A2, B1:B2, F1:F2 read as one)" in how
    assert "row(s) 4-5 are hidden in the workbook; read like the others" in how


def test_unknown_headers_get_a_template_keyed_by_the_sheets_header_row(tmp_path: Path) -> None:
    from openpyxl import Workbook

    from portfolio_optimiser.context.imports import MappingNeeded

    book = Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.append(["Kalkyle Nordvik"])
    sheet.append([])
    sheet.append(["Kontonr", "Navn", "Beløp inkl. mva"])
    sheet.append(["21", "Grunn", 1000])
    book.save(tmp_path / "ukjent.xlsx")
    with pytest.raises(MappingNeeded) as needed:
        read_estimate(tmp_path / "ukjent.xlsx")
    template = needed.value.template
    assert '"Kontonr" = "code"' in template and '"Beløp inkl. mva" = ""  # fill in' in template
    mapping = {"Kontonr": "code", "Navn": "title", "Beløp inkl. mva": "amount"}
    estimate = read_estimate(tmp_path / "ukjent.xlsx", mapping=mapping)
    assert [(p.code, p.amount) for p in estimate.posts] == [("21", 1000)]


def test_a_stray_cell_far_beyond_the_estimate_is_refused_before_its_grid_is_read(
    tmp_path: Path,
) -> None:
    from openpyxl import Workbook

    from portfolio_optimiser.context.imports.xlsx_file import MAX_CELLS

    book = Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.append(["Konto", "Tekst", "Sum"])
    sheet.append(["21", "Grunn", 1000])
    sheet["ZZ20000"] = "x"
    book.save(tmp_path / "stray.xlsx")
    assert MAX_CELLS < 702 * 20000
    with pytest.raises(ImportRefused, match=r"reaches cell ZZ20000 \(20000 rows × 702 columns"):
        read_estimate(tmp_path / "stray.xlsx")


def test_a_malformed_cell_reference_is_a_damaged_workbook_not_a_crash(tmp_path: Path) -> None:
    whole = kalkyle_xlsx(tmp_path / "whole.xlsx")
    broken = tmp_path / "broken.xlsx"
    with zipfile.ZipFile(whole) as source, zipfile.ZipFile(broken, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            if info.filename == "xl/worksheets/sheet2.xml":
                data = data.replace(b'<row r="4"', b'<row r="x4"', 1)
            target.writestr(info, data)
    with pytest.raises(ImportRefused, match="is damaged or not a workbook"):
        read_estimate(broken)


# Issue 44, item 3: workbooks as planners keep them.


def _with_saved_values(path: Path, values: dict[str, str]) -> Path:
    """The workbook's cells whose value is a key of ``values`` (999991…) made formulas whose
    saved value is the text Excel writes: its 17 digits, float noise and all."""
    import re

    with zipfile.ZipFile(path) as written:
        members = {info: written.read(info) for info in written.infolist()}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as patched:
        for info, data in members.items():
            if info.filename.startswith("xl/worksheets/"):
                for placeholder, (formula, saved) in (
                    (k, v.split("=", 1)) for k, v in values.items()
                ):
                    data = re.sub(
                        rb"<v>" + placeholder.encode() + rb"</v>",
                        f"<f>{formula}</f><v>{saved}</v>".encode(),
                        data,
                    )
            patched.writestr(info, data)
    return path


@pytest.mark.loadbearing
def test_float_noise_in_saved_values_is_read_as_the_15_digits_excel_keeps(tmp_path: Path) -> None:
    from openpyxl import Workbook

    book = Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.append(["Konto", "Tekst", "Mengde", "Enhet", "Enhetspris", "Sum"])
    sheet.append(["21", "Grunn", 2.2, "m2", 8420.4, 999991])
    sheet.append(["22", "Bæring", 999992, "stk", 1000, 999993])
    sheet.append(["23", "Tak", 1450.0, "m2", 100.0, 145000.0])
    book.save(tmp_path / "noise.xlsx")
    source = _with_saved_values(
        tmp_path / "noise.xlsx",
        {
            "999991": "C2*E2=18524.879999999997",
            "999992": "0.1+0.2=0.30000000000000004",
            "999993": "C3*E3=300.00000000000006",
        },
    )
    estimate = read_estimate(source)
    got = {p.code: (str(p.quantity), str(p.unit_price), str(p.amount)) for p in estimate.posts}
    assert got == {
        "21": ("2.2", "8420.4", "18524.88"),
        "22": ("0.3", "1000", "300"),
        "23": ("1450", "100", "145000"),
    }
    assert all(p.amount.as_tuple().exponent >= -2 for p in estimate.posts)
    project = load_ir_projections(write_bundle(estimate, tmp_path))
    line = project.line("21")
    assert line is not None and line.amount_nok == 18524.88 != 18524.879999999997


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (18524.879999999997, "18524.88"),
        (0.1 + 0.2, "0.3"),
        (1450.0, "1450"),
        (145000.0, "145000"),
        (1e20, "100000000000000000000"),
        (-2.5, "-2.5"),
        (0.000125, "0.000125"),
        (123456789.123456789, "123456789.123457"),
        (0.0, "0"),
    ],
)
def test_a_float_is_its_15_significant_digits_exactly(value: float, text: str) -> None:
    from portfolio_optimiser.context.imports.numbers import excel_number

    assert str(excel_number(value)) == text


@pytest.mark.loadbearing
def test_a_sheets_heading_rows_and_notes_are_context_not_lines(tmp_path: Path) -> None:
    from openpyxl import Workbook

    book = Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.title = "Kalkyle"
    sheet.append(["Konto", "Beskrivelse", "Mengde", "Enhet", "Enhetspris", "Sum"])
    sheet.append(["2", "Bygning"])
    sheet.append(["21", "Grunn og fundamenter", 100, "m2", 2000, 200000])
    sheet.append([])
    sheet.append([None, "Alle priser eks. mva."])
    book.save(tmp_path / "overskrift.xlsx")
    estimate = read_estimate(tmp_path / "overskrift.xlsx")
    assert [(p.code, p.title, p.amount) for p in estimate.posts] == [
        ("21", "Grunn og fundamenter", 200000)
    ]
    how = "\n".join(estimate.how)
    assert "Headings taken as context, not as lines: sheet 'Kalkyle', row 2 (2 Bygning)." in how
    assert "Notes taken as context, not as lines: sheet 'Kalkyle', row 5 (Alle priser" in how
