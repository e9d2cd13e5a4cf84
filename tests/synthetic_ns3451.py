"""Synthetic portfolios unlike the product's own: NS 3451 codes, noisy unit prices, regions.

Issue 22's portfolio, pinned beside ``synthetic.py`` (which stays as it is for the learning
benchmark). Parameters, as ``tests/bench/README.md`` states them:

* 21 priced NS 3451 building parts (m2, m and stk) and two lump sums (1 and 8);
* each code's log unit price spreads by σ drawn from U(0.10, 0.30) per code and seed, across
  projects of one region and category; a share ``shared`` (default 0.6) of that variance is the
  project's own conditions (site, contractor, market: one factor per project, loading on each
  code in proportion to its σ), the rest the line's own;
* four categories (school, care home, office, sports hall) with their own factor per code group;
* four regions, whole projects 0, 10, 12 or 15 % dearer;
* gross areas log-uniform over 1 500–15 000 m2 (projects 10x apart in size);
* ``planted_share`` (default 0.10) of the priced lines overpriced by +25, +40 or +60 %, in equal
  thirds.

The truth (which lines were planted, and by how much) is returned beside the bundles and is never
written into them.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from .synthetic import SyntheticProject, _cost_line

# code: (title, unit, base NOK per unit, quantity per m2 of gross area)
PRICED: dict[str, tuple[str, str, float, float]] = {
    "21": ("Grunn og fundamenter", "m2", 2_400.0, 0.40),
    "22": ("Bæresystemer", "m2", 3_800.0, 1.00),
    "23": ("Yttervegger", "m2", 6_500.0, 0.45),
    "24": ("Innervegger", "m2", 2_100.0, 0.90),
    "25": ("Dekker", "m2", 2_600.0, 1.00),
    "26": ("Yttertak", "m2", 3_200.0, 0.45),
    "27": ("Fast inventar", "m2", 900.0, 1.00),
    "28": ("Trapper og balkonger", "stk", 180_000.0, 0.0015),
    "31": ("Sanitær", "m2", 1_500.0, 1.00),
    "32": ("Varme", "m2", 1_100.0, 1.00),
    "33": ("Brannslokking", "m2", 450.0, 1.00),
    "36": ("Luftbehandling", "m2", 2_300.0, 1.00),
    "37": ("Komfortkjøling", "m2", 800.0, 0.50),
    "43": ("Lavspent forsyning", "m2", 900.0, 1.00),
    "44": ("Lys", "m2", 1_000.0, 1.00),
    "54": ("Alarm og signal", "m2", 350.0, 1.00),
    "56": ("Automatisering", "m2", 600.0, 1.00),
    "62": ("Person- og varetransport", "stk", 1_200_000.0, 0.0005),
    "71": ("Bearbeidet terreng", "m2", 450.0, 1.50),
    "73": ("Utendørs VVS", "m", 6_500.0, 0.05),
    "76": ("Veger og plasser", "m2", 1_300.0, 0.60),
}
LUMP: dict[str, tuple[str, float]] = {
    "1": ("Felleskostnader", 0.12),
    "8": ("Generelle kostnader", 0.14),
}
CATEGORIES: dict[str, dict[str, float]] = {
    # factor per code group (the code's first digit): installations dearer in care homes, etc.
    "school": {"2": 1.00, "3": 1.00, "4": 1.00, "5": 1.00, "6": 1.00, "7": 1.00},
    "care home": {"2": 1.05, "3": 1.20, "4": 1.15, "5": 1.25, "6": 1.00, "7": 0.95},
    "office": {"2": 0.95, "3": 1.05, "4": 1.10, "5": 1.15, "6": 1.05, "7": 1.10},
    "sports hall": {"2": 1.10, "3": 0.90, "4": 0.95, "5": 0.85, "6": 1.00, "7": 1.05},
}
REGIONS: dict[str, float] = {"innlandet": 1.00, "vestland": 1.10, "nord": 1.12, "oslo": 1.15}
PLANTED_FACTORS = (1.25, 1.40, 1.60)


@dataclass
class Portfolio3451:
    seed: int
    projects: list[SyntheticProject]
    planted: dict[tuple[str, str], float] = field(default_factory=dict)
    """(project id, code) → the factor it was overpriced by."""
    sigma: dict[str, float] = field(default_factory=dict)
    lines: int = 0
    """Priced lines in the portfolio."""


def generate_ns3451(
    seed: int,
    n_projects: int = 60,
    *,
    planted_share: float = 0.10,
    shared: float = 0.6,
    regions: bool = True,
    first: int = 0,
    parts: int = 1,
) -> Portfolio3451:
    """``n_projects`` projects numbered from ``first``: the same seed grows the same portfolio
    (projects 0..7 are the first 8 of 0..59). ``parts`` > 1 splits each priced building part
    into that many three-digit NS 3451 lines (``231``, ``232``, …), each its own reference class
    with its own noise: 21 × 3 + 2 = 65 lines a project at ``parts=3``."""
    rng = random.Random(seed)
    sigma = {code: rng.uniform(0.10, 0.30) for code in PRICED}
    out = Portfolio3451(seed, [], sigma=sigma)
    for i in range(first + n_projects):
        # One generator per project: project i is the same whatever else is drawn.
        prng = random.Random(f"{seed}-{i}")
        project = _project(prng, seed, i, sigma, planted_share, shared, regions, out, parts)
        if i >= first:
            out.projects.append(project)
    out.planted = {k: v for k, v in out.planted.items() if int(k[0].rsplit("-", 1)[1]) >= first}
    out.lines = len(out.projects) * len(PRICED) * parts
    return out


def _project(
    rng: random.Random,
    seed: int,
    i: int,
    sigma: dict[str, float],
    planted_share: float,
    shared: float,
    regions: bool,
    out: Portfolio3451,
    parts: int = 1,
) -> SyntheticProject:
    category = list(CATEGORIES)[i % len(CATEGORIES)]
    region = rng.choice(list(REGIONS)) if regions else "innlandet"
    area = round(math.exp(rng.uniform(math.log(1_500), math.log(15_000))), -1)
    level = rng.gauss(0.0, 1.0)
    pid = f"{category.replace(' ', '-')}-{seed}-{i:03d}"
    files: dict[str, str] = {}
    amounts: dict[str, int] = {}
    mine: set[str] = set()
    for code, (title, unit, base, per_m2) in PRICED.items():
        s = sigma[code]
        noise = s * (math.sqrt(shared) * level + math.sqrt(1 - shared) * rng.gauss(0.0, 1.0))
        price = base * CATEGORIES[category][code[0]] * REGIONS[region] * math.exp(noise)
        if rng.random() < planted_share:
            factor = rng.choice(PLANTED_FACTORS)
            price *= factor
            out.planted[(pid, code)] = factor
            mine.add(code)
        quantity = max(1, round(area * per_m2 * rng.uniform(0.85, 1.15)))
        if parts == 1:
            price = round(price)
            amounts[code] = quantity * price
            files[f"cost/{code}.md"] = _cost_line(
                code, title, amounts[code], (quantity, unit, price)
            )
            continue
        for k in range(1, parts + 1):
            part = f"{code}{k}"
            part_price = round(price * math.exp(s * 0.5 * rng.gauss(0.0, 1.0)))
            part_quantity = max(1, round(quantity / parts * rng.uniform(0.7, 1.3)))
            amounts[part] = part_quantity * part_price
            files[f"cost/{part}.md"] = _cost_line(
                part, f"{title} ({k})", amounts[part], (part_quantity, unit, part_price)
            )
    built = sum(amounts.values())
    for code, (title, share) in LUMP.items():
        amounts[code] = round(built * share)
        files[f"cost/{code}.md"] = _cost_line(code, title, amounts[code], None)
    total = sum(amounts.values())
    files["project.md"] = (
        f"---\ntype: project\nid: {pid}\nname: Synthetic {category} {i}\ncategory: {category}\n"
        f"currency: NOK\nbase_estimate_nok: {total}\n---\n\n# Synthetic {category} {i}\n\n"
        f"A {category} of {area:.0f} m2 BTA in {region}.\n"
    )
    links = "\n".join(f"* [{c}](cost/{c}.md)" for c in sorted(amounts))
    files["index.md"] = (
        f"# Synthetic {category} {i}\n\n* [Project](project.md)\n\n## Cost\n\n{links}\n"
    )
    return SyntheticProject(pid, category, files, mine)
