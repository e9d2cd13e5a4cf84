"""NS 3459 files as the tools really write them (issue 44): ISY Linker's main posts with sub-posts
that carry no code of their own, text posts and coded headings, two posts sharing one number,
options, a tender that leaves out its unpriced posts; ISY Beskrivelse's sub-posts that repeat
their main post's code. Files from ``tests/ns3459_files`` (our generator, shaped as the public
files are; no third-party file is kept here)."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest
import structlog

from portfolio_optimiser.cli import main
from portfolio_optimiser.config import load_config
from portfolio_optimiser.context.imports import ImportRefused, read_estimate, write_bundle
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.daemon.once import run_once
from portfolio_optimiser.daemon.workspace import Workspace

from .ns3459_files import beskrivelse_posts, guid, linker_posts, write_ns3459


def _tender(tmp_path: Path, **options: object) -> Path:
    return write_ns3459(tmp_path / "tilbud.xml", linker_posts(), **options)  # type: ignore[arg-type]


@pytest.mark.loadbearing
def test_a_linker_tender_imports_whole_and_every_sub_post_carries_its_main_posts_code(
    tmp_path: Path,
) -> None:
    bundle = write_bundle(read_estimate(_tender(tmp_path)), tmp_path)
    lines = {line.code: line for line in load_ir_projections(bundle).cost_lines}
    # The sub-posts have no Kode in the file: each takes its main post's, and its heading.
    assert lines["36.362.1.1"].ns3420 == lines["36.362.1.2"].ns3420 == "VB1.2A"
    assert lines["36.364.5.1"].title == "LYDDEMPER PÅ VENTILASJONSANLEGG — Dim 600x400 mm"
    assert lines["36.364.5.1"].ns3420 == "VE2.111272"
    # Text posts, headings and main posts carried by their sub-posts are no lines.
    assert "36.360.0" not in lines and "36.362.1" not in lines and "36.365.1" not in lines
    # No post is titled by its bare number where the file gives a heading or a text; a text
    # that opens with blank lines is titled by its first line with words.
    assert all(line.title != line.code for line in lines.values())
    assert lines["36.369.1"].title == "Innregulering av anlegget"
    # The building part is the Bygningsdel level's code; a number that skips it has none.
    assert lines["36.362.1.1"].ns3451 == "362" and lines["36.9"].ns3451 is None


@pytest.mark.loadbearing
def test_two_posts_sharing_a_number_are_both_imported_and_named(tmp_path: Path) -> None:
    estimate = read_estimate(_tender(tmp_path))
    shared = [p for p in estimate.posts if p.code.startswith("36.364.5.6")]
    assert [(p.code, p.quantity, p.origin.guid) for p in shared] == [
        ("36.364.5.6", Decimal(8), guid(9)),
        ("36.364.5.6#2", Decimal(56), guid(10)),
    ]
    said = " ".join(estimate.how)
    assert f"Post number 36.364.5.6 is shared by two posts (IDs {guid(9)} and {guid(10)})" in said


def test_the_same_guid_twice_is_still_refused(tmp_path: Path) -> None:
    posts = linker_posts()
    posts[-1] = replace(posts[-1], guid=posts[-2].guid)
    with pytest.raises(ImportRefused, match=rf"GUID {posts[-2].guid} again"):
        read_estimate(write_ns3459(tmp_path / "t.xml", posts))


def test_options_and_text_posts_are_kept_apart_from_the_base_sum(tmp_path: Path) -> None:
    estimate = read_estimate(_tender(tmp_path))
    bundle = write_bundle(estimate, tmp_path)
    project = load_ir_projections(bundle)
    option = 10 * 420
    assert [o.code for o in estimate.options] == ["36.362.1.3"]
    assert project.cost_total_nok == float(sum(p.amount for p in estimate.posts))
    assert option not in {line.amount_nok for line in project.cost_lines}
    options = (bundle / "options" / "36.md").read_text("utf-8")
    assert 'type: "option-lines"' in options and "Opsjon: dimensjon Ø200" in options
    described = (bundle / "description" / "36.md").read_text("utf-8")
    assert (
        "## 36.360.0 Orientering" in described and "Kapitlet gjelder luftbehandling." in described
    )
    assert "Materiale: Stål" in described and "Inkl. deler og opphengsmateriell." in described


def test_the_import_report_counts_what_became_of_every_post(tmp_path: Path) -> None:
    bundle = write_bundle(read_estimate(_tender(tmp_path)), tmp_path)
    report = (bundle / "import.md").read_text("utf-8")
    assert "a priced tender, written by ISY Linker Pluss 11.4" in report
    assert (
        "13 post(s) read: 8 cost line(s), 1 option(s) kept apart from the base sum, 4 text "
        "post(s) and heading(s) kept as description (2 of them main posts whose value lies in "
        "their sub-posts)" in report
    )
    assert "2 cost line(s) and option(s) without an NS 3420 code" in report


def test_a_tender_without_its_unpriced_posts_imports_and_says_what_its_sub_posts_lack(
    tmp_path: Path,
) -> None:
    # As ISY Linker writes a tender: every post without Prisinfo left out, main posts too.
    estimate = read_estimate(_tender(tmp_path, drop_unpriced=True))
    assert len(estimate.posts) == 8 and not estimate.texts
    assert "7 sub-post(s) whose main post the file leaves out" in " ".join(estimate.how)


def test_a_tender_post_left_unpriced_is_imported_at_nothing_and_counted(tmp_path: Path) -> None:
    posts = [replace(p, price=None) if p.postnr == "36.9" else p for p in linker_posts()]
    estimate = read_estimate(write_ns3459(tmp_path / "t.xml", posts))
    (rigg,) = [p for p in estimate.posts if p.code == "36.9"]
    assert rigg.amount == 0 and rigg.quantity == 6
    assert (
        "1 post(s) have a quantity and no price (left unpriced in the tender, or its Enhetspris"
        in " ".join(estimate.how)
    )


def test_a_tender_exported_before_it_was_priced_says_so_and_counts_every_post(
    tmp_path: Path,
) -> None:
    """A public ISY Linker Pristilbud writes Enhetspris 0 and Sum 0 on every post (its main posts
    left out): no tender to check, and the report says so instead of calling it priced."""
    posts = [replace(p, price=Decimal(0)) if p.priced else p for p in linker_posts()]
    estimate = read_estimate(write_ns3459(tmp_path / "t.xml", posts, drop_unpriced=True))
    how = " ".join(estimate.how)
    assert {p.amount for p in estimate.posts} == {0}
    assert "a tender with no price on any post, written by ISY Linker" in how
    assert "a priced tender" not in how
    counted = len(estimate.posts) + len(estimate.options)
    assert f"{counted} post(s) have a quantity and no price (left unpriced in the tender" in how
    # One post priced: a priced tender again, with the others counted.
    posts[-1] = replace(posts[-1], price=Decimal(100))
    estimate = read_estimate(write_ns3459(tmp_path / "t2.xml", posts, drop_unpriced=True))
    assert "a priced tender" in " ".join(estimate.how)


def test_a_price_request_keeps_its_structure_with_no_prices(tmp_path: Path) -> None:
    estimate = read_estimate(_tender(tmp_path, kind="Prisforesporsel"))
    assert {p.amount for p in estimate.posts} == {0}
    assert all(p.unit_price is None for p in estimate.posts)
    assert estimate.posts[0].ns3420 == "VB1.2A" and len(estimate.texts) == 4


def test_beskrivelse_sub_posts_repeat_their_code_and_a_main_post_may_be_priced(
    tmp_path: Path,
) -> None:
    source = write_ns3459(
        tmp_path / "b.xml", beskrivelse_posts(), program=("ISY Beskrivelse", "11.4.3")
    )
    lines = {p.code: p for p in read_estimate(source).posts}
    assert list(lines) == ["36.362.1", "36.362.1.1", "36.362.1.2"]
    assert {p.ns3420 for p in lines.values()} == {"VB1.2A"}
    assert lines["36.362.1.1"].title == "KANAL, SIRKULÆR — Ø125"


@pytest.mark.loadbearing
@pytest.mark.parametrize("encoding", ["utf-16", "utf-8-sig", "utf-8"])
def test_a_doctype_is_refused_in_any_encoding(tmp_path: Path, encoding: str) -> None:
    # A check of the bytes "<!DOCTYPE" let a UTF-16 file through, and an entity's text vanished.
    bomb = '<!DOCTYPE NS3459 [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;&a;">]>\r\n'
    source = write_ns3459(tmp_path / "t.xml", linker_posts(), encoding=encoding, doctype=bomb)
    with pytest.raises(ImportRefused, match="has a DOCTYPE, which NS 3459 files never have"):
        read_estimate(source)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8-sig"])
def test_a_file_in_another_encoding_reads_alike(tmp_path: Path, encoding: str) -> None:
    plain = read_estimate(_tender(tmp_path))
    other = read_estimate(write_ns3459(tmp_path / "o.xml", linker_posts(), encoding=encoding))
    assert [(p.code, p.title, p.amount) for p in other.posts] == [
        (p.code, p.title, p.amount) for p in plain.posts
    ]


def test_a_linker_tender_through_import_and_through_the_inbox(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    source = _tender(tmp_path)
    into = tmp_path / "looked-at"
    into.mkdir()
    assert main(["import", str(source), "--into", str(into)]) == 0
    assert (into / "tilbud" / "cost" / "36.md").is_file()
    source.rename(ws.inbox_projects / "nordvik-ventilasjon.xml")
    report = run_once(ws, load_config(), log=structlog.get_logger("t"), environ={"CI": "true"})
    assert [(r.kind, r.state) for r in report.results] == [("bundle", "done")]
    project = load_ir_projections(ws.bundles_projects / "nordvik-ventilasjon")
    assert len(project.cost_lines) == 8
    assert project.name == "Nordvik skole – ventilasjon", "the file's own project name"
