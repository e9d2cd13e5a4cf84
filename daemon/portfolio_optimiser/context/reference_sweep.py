"""Every ingested project's reference candidates at once, from its compact prices: what the
portfolio's look at the reruns compares, so that a project whose candidates did not move is
decided without reading its bundle or measuring its lines one by one.

Decides, for each project, the reference candidates ``reference_candidates`` would give it
against ``ReferenceIndex.assess``'s snapshot — as (code, unit, grade, saving) each, in its line
order — or None when it cannot tell without the project's IR (its lines in the index are not its
own posts: a project id in two folders, or a project changed since the index was built).

Each post is first measured over arrays, every post at once. A post that lies clearly below
the thresholds (by a margin far above the arrays' rounding) is graded by no one; any other is
measured again as ``assess`` measures it (``PriceFit.indexed_reference``), so a grade and an
expected price are never decided by the arrays' arithmetic. A few posts in a hundred are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import numpy as np
from numpy.typing import NDArray

from .fit_arrays import Entries
from .price_fit import PriceFit
from .reference import ProjectPrices, material, reference_saving

__all__ = ["ReferenceKey", "ReferenceSweep"]

ReferenceKey = tuple[str, str, str, int]
"""A reference candidate as a project's version sees it: (code, unit, grade, saving)."""

MARGIN: Final = 1e-6
"""How far below a threshold (in robust deviations) a post's figure from the arrays must lie to
be left ungraded without measuring it again; their rounding is about 1e-14."""


@dataclass(frozen=True)
class _Posts:
    """One project's posts as arrays: class ids in the sweep's own numbering (-1: none)."""

    prices: ProjectPrices
    klass: NDArray[np.int64]
    price: NDArray[np.float64]
    classes: NDArray[np.int64]
    class_price: NDArray[np.float64]


@dataclass
class ReferenceSweep:
    """Kept by the one process that looks at the reruns: each project's posts as arrays,
    made again only when its prices change."""

    _keys: dict[tuple[str, str], int] = field(default_factory=dict)
    _posts: dict[str, _Posts] = field(default_factory=dict)

    def keys(
        self, fit: PriceFit, projects: Mapping[str, ProjectPrices]
    ) -> dict[str, tuple[ReferenceKey, ...] | None]:
        """Each project's (by folder) reference candidates, or None where only its IR tells."""
        self._posts = {name: self._arrays(name, prices) for name, prices in projects.items()}
        entries = fit.entries()
        known = np.full(len(self._keys) + 1, -1, dtype=np.int64)  # the last: no class
        for key, k in self._keys.items():
            known[k] = entries.key_index.get(key, -1)
        sweep = _Sweep(fit, entries, known, list(self._posts.values()))
        return dict(zip(self._posts, sweep.keys(), strict=True))

    def _arrays(self, name: str, prices: ProjectPrices) -> _Posts:
        kept = self._posts.get(name)
        if kept is not None and kept.prices is prices:
            return kept
        ids = self._keys

        def class_id(key: tuple[str, str]) -> int:
            return ids.setdefault(key, len(ids)) if key[0] else -1

        return _Posts(
            prices,
            np.array(
                [
                    class_id(key)
                    for key in zip(prices.posts.compared, prices.posts.units, strict=True)
                ],
                dtype=np.int64,
            ),
            np.frombuffer(prices.posts.prices, dtype=np.float64).copy(),
            np.array([class_id((a, u)) for a, u, _p, _s in prices.classes], dtype=np.int64),
            np.array([p for _a, _u, p, _s in prices.classes], dtype=np.float64),
        )


class _Sweep:
    def __init__(
        self, fit: PriceFit, entries: Entries, known: NDArray[np.int64], posts: list[_Posts]
    ) -> None:
        self.fit, self.entries, self.posts = fit, entries, posts
        n_projects = max(len(entries.project_index), 1)
        self.project = np.array(
            [entries.project_index.get(p.prices.project_id, -1) for p in posts], dtype=np.int64
        )
        # Each (class, project) pair's entry, found by bisection in the pairs sorted.
        pairs = entries.klass * n_projects + entries.project
        self._order = np.argsort(pairs, kind="stable")
        self._pairs = pairs[self._order]
        self._n_projects, self._known = n_projects, known

    def _entry(self, klass: NDArray[np.int64], project: NDArray[np.int64]) -> NDArray[np.int64]:
        """Each (class, project)'s last entry; -1 where there is none."""
        k = self._known[klass]
        wanted = k * self._n_projects + project
        at = np.searchsorted(self._pairs, wanted, side="right") - 1
        safe = np.maximum(at, 0)
        found = (k >= 0) & (project >= 0) & (at >= 0) & (self._pairs[safe] == wanted)
        return np.where(found, self._order[safe], -1)

    def _own(self) -> NDArray[np.bool_]:
        """Which projects' lines in the index are their own classes' prices, and no other's (a
        project id in two folders has twice the lines)."""
        sizes = np.array([len(p.classes) for p in self.posts], dtype=np.int64)
        owner = np.repeat(np.arange(len(self.posts)), sizes)
        project = self.project[owner]
        klass = np.concatenate([p.classes for p in self.posts])
        price = np.concatenate([p.class_price for p in self.posts])
        entry = self._entry(klass, project)
        safe = np.maximum(entry, 0)
        ok = (entry >= 0) & (self.entries.price[safe] == price)
        counted = np.bincount(owner, weights=ok, minlength=len(self.posts))
        indexed = np.bincount(self.entries.project, minlength=self._n_projects)
        own: NDArray[np.bool_] = (
            (self.project >= 0) & (counted == sizes) & (indexed[self.project] == sizes)
        )
        return own

    def keys(self) -> list[tuple[ReferenceKey, ...] | None]:
        if not self.posts:
            return []
        own = self._own()
        sizes = np.array([len(p.klass) for p in self.posts], dtype=np.int64)
        owner = np.repeat(np.arange(len(self.posts)), sizes)
        klass = np.concatenate([p.klass for p in self.posts])
        price = np.concatenate([p.price for p in self.posts])
        entry = self._entry(klass, self.project[owner])
        maybe = self._maybe(entry, price)
        flagged = np.zeros(len(self.posts), dtype=bool)
        flagged[owner[maybe]] = True
        starts = np.r_[0, np.cumsum(sizes)]
        found: list[tuple[ReferenceKey, ...] | None] = []
        for i, posts in enumerate(self.posts):
            if not own[i]:
                found.append(None)
            elif not flagged[i]:
                found.append(())
            else:
                at = slice(int(starts[i]), int(starts[i + 1]))
                found.append(self._candidates(posts.prices, entry[at], maybe[at]))
        return found

    def _maybe(self, entry: NDArray[np.int64], price: NDArray[np.float64]) -> NDArray[np.bool_]:
        """Posts the arrays cannot leave ungraded: measured again one at a time."""
        e, rule = self.entries, self.fit.rule
        safe = np.maximum(entry, 0)
        centre = e.centre[safe]
        valid = (entry >= 0) & ~np.isnan(centre) & (e.compared[safe] > 0)
        project, klass = e.project[safe], e.klass[safe]
        shift = e.level_a[project] + e.level_b[project] * e.loading[klass]
        centre = np.where(valid, centre, 0.0)
        expected = np.exp(centre + shift)
        sigmas = (np.log(np.where(valid, price, 1.0)) - centre - shift) / e.spread[safe]
        graded = (
            (e.compared[safe] >= rule.min_comparables)
            & (sigmas >= rule.possible_threshold - MARGIN)
            & (price >= expected * (1 + rule.min_excess) * (1 - 1e-9))
        )
        return valid & (graded | e.exact_spread[safe])

    def _candidates(
        self, prices: ProjectPrices, entry: NDArray[np.int64], maybe: NDArray[np.bool_]
    ) -> tuple[ReferenceKey, ...]:
        """As ``reference_candidates`` finds them: each post by the first measured post of its
        code and unit."""
        references = self.fit.references(prices.project_id, ())
        first: dict[tuple[str, str], tuple[str | None, float]] = {}
        for (code, compared_as, unit, price, _q), e, again in zip(
            prices.posts, entry.tolist(), maybe.tolist(), strict=True
        ):
            if not compared_as or e < 0 or (code, unit) in first:
                continue
            if again:
                line = self.fit.indexed_reference(e, code, unit, price)
                if line is not None:
                    first[(code, unit)] = (line.grade, line.expected_nok)
            elif self.entries.compared[e] > 0 and not np.isnan(self.entries.centre[e]):
                first[(code, unit)] = (None, 0.0)
        found: list[ReferenceKey] = []
        for code, _compared_as, unit, price, quantity in prices.posts:
            grade, expected = first.get((code, unit), (None, 0.0))
            if grade is None:
                continue
            saving = reference_saving(price, expected, quantity)
            if saving > 0 and material(saving, prices.size, references):
                found.append((code, unit, grade, saving))
        return tuple(found)
