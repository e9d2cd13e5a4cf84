"""An NS 3459 file becomes a bundle (issue 17): a priced tender and a price request, both
editions, every post with its GUID and path, its NS 3420 code and NS 3451 building part; and a
file that must not be parsed, or has bad posts, is refused with every problem at once."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
import structlog

from portfolio_optimiser.config import load_config
from portfolio_optimiser.context.imports import ImportRefused, read_estimate, write_bundle
from portfolio_optimiser.context.ir import load_ir_projections
from portfolio_optimiser.daemon.once import run_once
from portfolio_optimiser.daemon.workspace import Workspace

from .estimates import NS3459_POSTS, imported_from, ns3459_xml


@pytest.mark.parametrize("version", ["2012", "2023"])
def test_a_priced_tender_keeps_every_post_with_its_guid_and_codes(
    tmp_path: Path, version: str
) -> None:
    source = ns3459_xml(tmp_path / "tilbud.xml", version=version)
    bundle = write_bundle(read_estimate(source), tmp_path)
    project = load_ir_projections(bundle)
    got = {
        line.code: (
            line.ns3420,
            line.ns3451,
            line.post,
            line.unit,
            line.quantity,
            line.unit_price_nok,
            line.amount_nok,
        )
        for line in project.cost_lines
    }
    want = {
        postnr: (
            code,
            postnr.split(".")[1],
            True,
            "m2",
            float(q),
            float(p),
            float((q * p).quantize(Decimal("0.01"))),
        )
        for _g, postnr, code, _t, q, p in NS3459_POSTS
    }
    assert {
        k: tuple(
            float(x) if isinstance(x, int | float) and not isinstance(x, bool) else x for x in v
        )
        for k, v in got.items()
    } == want
    assert imported_from(bundle, "01.36.1") == (
        "tilbud.xml, Post 3 (01.36.1), ID 5f0c7a1e-0001-4c1e-9a11-000000000003"
    )
    how = (bundle / "import.md").read_text("utf-8")
    assert f"NS 3459 version {version}: a priced tender" in how
    assert "NS 3451 from the Bygningsdel level" in how


def test_a_price_request_has_quantities_and_no_prices(tmp_path: Path) -> None:
    bundle = write_bundle(
        read_estimate(ns3459_xml(tmp_path / "forespørsel.xml", priced=False)), tmp_path
    )
    project = load_ir_projections(bundle)
    assert {line.amount_nok for line in project.cost_lines} == {0}
    assert all(line.quantity and line.unit_price_nok is None for line in project.cost_lines)
    assert "4 post(s) have a quantity and no price (a price request)" in (
        bundle / "import.md"
    ).read_text("utf-8")


@pytest.mark.loadbearing
def test_a_doctype_is_refused_before_anything_is_parsed(tmp_path: Path) -> None:
    bomb = (
        '<!DOCTYPE NS3459 [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>\n'
    )
    source = ns3459_xml(tmp_path / "doctype.xml", doctype=bomb)
    into = tmp_path / "into"
    into.mkdir()
    with pytest.raises(ImportRefused, match="has a DOCTYPE, which NS 3459 files never have"):
        write_bundle(read_estimate(source), into)
    assert list(into.iterdir()) == []


@pytest.mark.loadbearing
def test_every_bad_post_is_named_with_its_guid_and_path(tmp_path: Path) -> None:
    posts = [
        *NS3459_POSTS,
        (
            "5f0c7a1e-0001-4c1e-9a11-000000000001",
            "01.62.1",
            "NL1.1",
            "Heis",
            Decimal(2),
            Decimal(1215000),
        ),
    ]
    source = ns3459_xml(
        tmp_path / "feil.xml", posts=posts, sums={"01.23.1": "999.00", "01.44.1": "mange"}
    )
    with pytest.raises(ImportRefused) as refused:
        read_estimate(source)
    text = str(refused.value)
    assert "3 problem(s)" in text
    assert (
        "feil.xml, Post 2 (01.23.1), ID 5f0c7a1e-0001-4c1e-9a11-000000000002, column Prisinfo/Sum: the sum 999.00 is not"
        in text
    )
    assert (
        "Post 4 (01.44.1), ID 5f0c7a1e-0001-4c1e-9a11-000000000004, column Prisinfo/Sum: 'mange' is not a number"
        in text
    )
    assert (
        "column ID: GUID 5f0c7a1e-0001-4c1e-9a11-000000000001 again (first at feil.xml, Post 1 (01.21.1)"
        in text
    )


def test_a_tender_dropped_into_the_inbox_as_it_is_runs(tmp_path: Path) -> None:
    ws = Workspace.at(tmp_path / "ws", environ={})
    ws.ensure()
    ns3459_xml(tmp_path / "nordvik-school.xml").rename(ws.inbox_projects / "nordvik-school.xml")
    report = run_once(ws, load_config(), log=structlog.get_logger("t"), environ={"CI": "true"})
    assert [(r.kind, r.state) for r in report.results] == [("bundle", "done")]
    assert len(load_ir_projections(ws.bundles_projects / "nordvik-school").cost_lines) == len(
        NS3459_POSTS
    )
