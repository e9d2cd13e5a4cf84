"""The fit's input as arrays: every comparable of the index, one entry each (``Lines``), joined
from each class's columns (``Columns``).

A class's columns are made once and then patched as members join and leave
(``ReferenceClasses`` keeps them): one more project among ten thousand moves one entry in each
class it prices, where taking every class's comparables apart again cost a third of a second.
Projects and categories are numbered once for the life of the columns (``Numbering``); the
lines number them again, densely, among those present.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numpy.typing import NDArray

from .fit_kernels import logs

if TYPE_CHECKING:  # reference.py builds on the fit, which builds on this; typing only
    from .reference import Comparable

__all__ = ["ClassColumns", "Columns", "Lines", "Numbering"]

Floats = NDArray[np.float64]
Ints = NDArray[np.int64]


@dataclass
class Numbering:
    """Names numbered as they first come; a number is never reused nor moved, so columns made
    at different times agree. The empty name and None are -1 (no category)."""

    numbers: dict[str | None, int] = field(default_factory=lambda: {None: -1, "": -1})
    names: list[str] = field(default_factory=list)

    def of(self, names: Sequence[str | None]) -> Ints:
        """The names' numbers, new ones numbered (in their order: a number's order is nobody's
        business, ``Lines`` numbers again by name), by maps over the whole column: a start
        numbers hundreds of thousands, almost all of them known after the first class."""
        numbers = self.numbers
        new = set(names) - numbers.keys()
        for name in sorted(n for n in new if n is not None):  # None is numbered already
            numbers[name] = len(self.names)
            self.names.append(name)
        return np.fromiter(map(numbers.__getitem__, names), dtype=np.int64, count=len(names))


class Columns(NamedTuple):
    """One class's comparables as arrays, in the class's order."""

    project: Ints
    """By a ``Numbering`` of project ids."""
    category: Ints
    """By a ``Numbering`` of categories; -1 for none."""
    price: Floats
    log_price: Floats

    @classmethod
    def of(
        cls, comparables: Sequence[Comparable], projects: Numbering, categories: Numbering
    ) -> Columns:
        if not comparables:
            empty = np.empty(0)
            return cls(empty.astype(np.int64), empty.astype(np.int64), empty, empty)
        ids, _sources, prices, cats = zip(*comparables, strict=True)
        price = np.array(prices, dtype=np.float64)
        return cls(projects.of(ids), categories.of(cats), price, logs(price))

    def inserted(
        self, at: int, comparable: Comparable, projects: Numbering, categories: Numbering
    ) -> Columns:
        one = Columns.of([comparable], projects, categories)
        return Columns(
            np.insert(self.project, at, one.project),
            np.insert(self.category, at, one.category),
            np.insert(self.price, at, one.price),
            np.insert(self.log_price, at, one.log_price),
        )

    def deleted(self, at: int) -> Columns:
        return Columns(
            np.delete(self.project, at),
            np.delete(self.category, at),
            np.delete(self.price, at),
            np.delete(self.log_price, at),
        )


class ClassColumns(NamedTuple):
    """Every class's columns, in the index's order, and the names their numbers stand for."""

    columns: tuple[Columns, ...]
    projects: tuple[str, ...]
    categories: tuple[str, ...]

    def lines(self) -> Lines:
        return Lines.joined(self)


@dataclass(frozen=True)
class Lines:
    """Every comparable of the index, one entry each, in the index's order (class by class)."""

    project: Ints
    """Index into ``project_ids``: two folders of one project id are one project, as a line's
    project is its id."""
    klass: Ints
    category: Ints
    """Index into ``categories``; -1 for none."""
    log_price: Floats
    price: Floats
    project_ids: list[str]
    categories: list[str]
    last: Ints
    """For each entry, the project's last entry in the same class (itself but for a project id
    in two folders): the one a project's lines are measured without."""

    @classmethod
    def of(cls, classes: Iterable[Sequence[Comparable]]) -> Lines:
        """From each class's comparables (project id, source, unit price, category)."""
        projects, categories = Numbering(), Numbering()
        columns = tuple(Columns.of(c, projects, categories) for c in classes)
        return cls.joined(ClassColumns(columns, tuple(projects.names), tuple(categories.names)))

    @classmethod
    def joined(cls, kept: ClassColumns) -> Lines:
        """From each class's columns: the projects and categories numbered densely again, among
        those present, in their names' order (no figure depends on the numbers)."""
        columns = kept.columns
        sizes = [len(c.project) for c in columns]
        p, project_ids = _dense(_ints([c.project for c in columns]), kept.projects)
        category, named = _dense(_ints([c.category for c in columns]), kept.categories)
        k = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
        pair = k * max(len(project_ids), 1) + p
        # A class's entries of one project are adjacent: the last of a run is the one kept.
        ends = np.flatnonzero(np.r_[pair[1:] != pair[:-1], True]) if len(pair) else pair
        last = np.repeat(ends, np.diff(np.r_[-1, ends])) if len(pair) else pair
        return cls(
            project=p,
            klass=k,
            category=category,
            log_price=_floats([c.log_price for c in columns]),
            price=_floats([c.price for c in columns]),
            project_ids=project_ids,
            categories=named,
            last=last.astype(np.int64),
        )

    def __len__(self) -> int:
        return len(self.project)

    def by_category(self) -> Ints:
        """Each entry's (class, category) group; -1 for an entry with no category."""
        return np.where(
            self.category >= 0, self.klass * max(len(self.categories), 1) + self.category, -1
        )

    def group_count(self, n_classes: int) -> int:
        return n_classes * max(len(self.categories), 1)


def _ints(arrays: list[Ints]) -> Ints:
    return np.concatenate(arrays) if arrays else np.empty(0, dtype=np.int64)


def _floats(arrays: list[Floats]) -> Floats:
    return np.concatenate(arrays) if arrays else np.empty(0)


def _dense(numbers: Ints, names: Sequence[str]) -> tuple[Ints, list[str]]:
    """The numbers (-1: none) renumbered 0, 1, … among those present, in their names' order (a
    class's members are in their project ids' order, so its (class, project) pairs come sorted),
    and the names of those present."""
    present = np.zeros(len(names), dtype=np.bool_)
    present[numbers[numbers >= 0]] = True
    named = sorted((names[i], i) for i in np.flatnonzero(present).tolist())
    dense = np.full(max(len(names), 1), -1, dtype=np.int64)
    dense[[i for _name, i in named]] = np.arange(len(named), dtype=np.int64)
    renumbered = np.where(numbers >= 0, dense[np.maximum(numbers, 0)], -1).astype(np.int64)
    return renumbered, [name for name, _i in named]
