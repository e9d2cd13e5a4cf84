"""Synthetic portfolios with a hidden truth, for the find-and-learn tests and benchmark.

Pinned so nothing can be tuned to itself (issue 10): every priced line's unit price lies within
±8 % of its code's base price (a category may shift the base); 10 % of the priced lines are planted
at +40 to +60 %, spread so that some classes hold two or more planted lines. Each project has a
kuttliste of two items. The truth (which lines were planted) is returned beside the bundles and is
never written into them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

# NS 3453 codes priced per unit: (title, unit spellings used at random, base NOK per unit, quantity
# as a share of the building's gross area). 01 and 08 are lump sums with no unit price.
PRICED: dict[str, tuple[str, tuple[str, ...], float, float]] = {
    "02.1": ("Grunn og fundamenter", ("m2", "m²", "kvm"), 2_400.0, 0.50),
    "02.2": ("Bæresystemer", ("m2", "m²"), 3_800.0, 1.00),
    "02.3": ("Yttervegger", ("m2", "kvm"), 6_500.0, 0.45),
    "02.6": ("Yttertak", ("m2", "m²"), 3_200.0, 0.50),
    "03": ("VVS-installasjoner", ("m2", "m²", "kvm"), 4_200.0, 1.00),
    "04": ("Elkraft", ("m2",), 2_300.0, 1.00),
    "05": ("Tele og automatisering", ("m2", "m²"), 1_100.0, 1.00),
    "07": ("Utendørs", ("m2",), 900.0, 1.60),
}
LUMP: dict[str, tuple[str, float]] = {
    "01": ("Felleskostnader", 0.11),
    "08": ("Generelle kostnader", 0.14),
}
CATEGORIES: dict[str, float] = {"school": 1.00, "care home": 1.18}
"""A care home costs more per m2 than a school: comparables must come from the same kind first."""
KUTTLISTE = (
    ("02.3", "standardisation", "Standard window sizes", 0.04),
    ("03", "simplification", "Simplified ventilation zoning", 0.05),
    ("07", "deferral", "Defer the outdoor sports area", 0.20),
    ("02.6", "material_substitution", "Membrane roof instead of standing seam", 0.06),
    ("09", "procurement", "Furniture through the framework agreement", 0.10),
)


@dataclass
class SyntheticProject:
    project_id: str
    category: str
    files: dict[str, str]
    planted: set[str] = field(default_factory=set)
    """Codes of this project's planted (overpriced) lines."""

    def write(self, root: Path) -> Path:
        for rel, text in self.files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return root


@dataclass
class SyntheticPortfolio:
    seed: int
    projects: list[SyntheticProject]

    @property
    def planted(self) -> set[tuple[str, str]]:
        return {(p.project_id, code) for p in self.projects for code in p.planted}


def _cost_line(code: str, title: str, amount: int, priced: tuple[float, str, int] | None) -> str:
    extra = ""
    if priced is not None:
        quantity, unit, price = priced
        extra = f"quantity: {quantity:g}\nunit: {unit}\nunit_price_nok: {price}\n"
    return (
        f'---\ntype: cost-line\ncode: "{code}"\ntitle: {title}\namount_nok: {amount}\n{extra}---\n\n'
        f"# {code} {title}\n\nThe estimate for {title.lower()}.\n"
    )


def generate(seed: int, n_projects: int = 30, planted_share: float = 0.10) -> SyntheticPortfolio:
    rng = random.Random(seed)
    priced_lines = [(i, code) for i in range(n_projects) for code in PRICED]
    n_planted = round(planted_share * len(priced_lines))
    planted = set(rng.sample(priced_lines, n_planted))
    by_class: dict[str, int] = {}
    for _i, code in planted:
        by_class[code] = by_class.get(code, 0) + 1
    assert any(n >= 2 for n in by_class.values()), "some class must hold two planted lines"
    projects: list[SyntheticProject] = []
    for i in range(n_projects):
        category = "school" if i % 3 else "care home"
        shift = CATEGORIES[category]
        area = rng.randrange(3_000, 9_000, 100)
        pid = f"{category.replace(' ', '-')}-{seed}-{i:02d}"
        files: dict[str, str] = {}
        amounts: dict[str, int] = {}
        mine: set[str] = set()
        for code, (title, units, base, share) in PRICED.items():
            quantity = round(area * share * rng.uniform(0.9, 1.1))
            if (i, code) in planted:
                price = round(base * shift * rng.uniform(1.40, 1.60))
                mine.add(code)
            else:
                price = round(base * shift * rng.uniform(0.92, 1.08))
            amounts[code] = quantity * price
            files[f"cost/{code}.md"] = _cost_line(
                code, title, amounts[code], (quantity, rng.choice(units), price)
            )
        built = sum(amounts.values())
        for code, (title, share) in LUMP.items():
            amounts[code] = round(built * share)
            files[f"cost/{code}.md"] = _cost_line(code, title, amounts[code], None)
        amounts["09"] = round(area * 350)
        files["cost/09.md"] = _cost_line("09", "Spesielle kostnader", amounts["09"], None)
        total = sum(amounts.values())
        cuts = rng.sample(KUTTLISTE, 2)
        for n, (code, measure_type, title, share) in enumerate(cuts, 1):
            saving = round(amounts[code] * share)
            files[f"kuttliste/k-{n:02d}.md"] = (
                f"---\ntype: measure-option\nid: k-{n:02d}\ntitle: {title}\n"
                f'measure_type: {measure_type}\naffected_codes: ["{code}"]\n'
                f"estimated_saving_nok: {saving}\n---\n\n# {title}\n\n"
                f"A reduction on [{code}](../cost/{code}.md).\n"
            )
        files["project.md"] = (
            f"---\ntype: project\nid: {pid}\nname: Synthetic {category} {i}\ncategory: {category}\n"
            f"currency: NOK\nbase_estimate_nok: {total}\n---\n\n# Synthetic {category} {i}\n\n"
            f"A {category} of {area} m2 BTA.\n"
        )
        links = "\n".join(f"* [{c}](cost/{c}.md)" for c in sorted(amounts))
        cut_links = "\n".join(f"* [k-{n:02d}](kuttliste/k-{n:02d}.md)" for n in (1, 2))
        files["index.md"] = (
            f"# Synthetic {category} {i}\n\n* [Project](project.md)\n\n## Cost\n\n{links}\n\n"
            f"## Kuttliste\n\n{cut_links}\n"
        )
        projects.append(SyntheticProject(pid, category, files, mine))
    return SyntheticPortfolio(seed, projects)


def tiny_project(root: Path, i: int) -> Path:
    """A small project that shares no priced line with another (no reference class forms, so
    the portfolio never moves under it): for the tests that run hundreds of projects."""
    pid = f"tiny-{i:03d}"
    amount = 1_000_000 + 1_000 * i
    files = {
        "project.md": (
            f"---\ntype: project\nid: {pid}\nname: Tiny {i}\ncategory: school\ncurrency: NOK\n"
            f"base_estimate_nok: {amount * 2}\n---\n\n# Tiny {i}\n\nA small school.\n"
        ),
        "cost/01.md": _cost_line("01", "Felleskostnader", amount, None),
        "cost/09.md": _cost_line("09", "Spesielle kostnader", amount, None),
        "kuttliste/k-01.md": (
            "---\ntype: measure-option\nid: k-01\ntitle: Furniture through the framework "
            'agreement\nmeasure_type: procurement\naffected_codes: ["09"]\n'
            f"estimated_saving_nok: {amount // 10}\n---\n\n# Furniture\n\n"
            "A reduction on [09](../cost/09.md).\n"
        ),
        "index.md": (
            f"# Tiny {i}\n\n* [Project](project.md)\n\n## Cost\n\n* [01](cost/01.md)\n"
            "* [09](cost/09.md)\n\n## Kuttliste\n\n* [k-01](kuttliste/k-01.md)\n"
        ),
    }
    return SyntheticProject(pid, "school", files).write(root)
