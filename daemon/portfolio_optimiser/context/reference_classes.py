"""The reference classes kept up to date one project at a time (``ReferenceIndex`` is what they
hold at one moment; ``reference`` says what a class is for).

Decides: each class's members in order, and its digest, as projects join, change and leave, in
proportion to what moved — a start moves ten thousand projects into each class, one more project
one member into each class it prices.
"""

from __future__ import annotations

import hashlib
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from typing import Final

from .fit_lines import ClassColumns, Columns, Numbering
from .reference import Comparable, ProjectPrices, ReferenceIndex, ReferenceRule
from .reference_version import version_id

__all__ = ["ClassKey", "Places", "ReferenceClasses", "Rendered"]

ClassKey = tuple[str, str]
Rendered = tuple[str, str]
"""A member as its class's page writes it (``render``): what each of two places there says."""
Places = tuple[list[str], list[str]]
"""A class's members as its page writes them: what each place says of each member, in order (a
list a place, so each is joined as it is, not picked out of ten thousand tuples)."""


STRETCH: Final = 200
"""Members rendered or hashed between two calls of a caller's ``pause``: about a millisecond's
work, so a verdict taken in on another thread waits no longer than that for a page being
written (a class of ten thousand members took 90 ms to render, the verdict sharing the
interpreter with it throughout)."""


def _stretches(members: list[Comparable], pause: Callable[[], None]) -> Iterator[list[Comparable]]:
    """``members`` in stretches of ``STRETCH``, ``pause`` called before each."""
    for start in range(0, len(members), STRETCH):
        pause()
        yield members[start : start + STRETCH]


class ReferenceClasses:
    """The reference classes kept up to date one project at a time: a new, changed or removed
    project moves only the classes it prices or priced, and costs in proportion to them. Each
    class holds its comparables in project order (two folders of one project id: in folder
    order)."""

    def __init__(
        self, rule: ReferenceRule, render: Callable[[Comparable], Rendered] | None = None
    ) -> None:
        self.rule = rule
        self._render = render
        self._rendered: dict[ClassKey, Places] = {}
        """Each class's members rendered (``rendered``), in order, once it was asked for."""
        self._projects: dict[str, ProjectPrices] = {}
        """By folder: two folders of one project id are two comparables, as in the index."""
        self._order: dict[ClassKey, list[str]] = {}
        """Each class's members (``_member``), sorted; ``_rows`` in the same order."""
        self._rows: dict[ClassKey, list[Comparable]] = {}
        self._classes: dict[ClassKey, tuple[Comparable, ...]] = {}
        self._columns: dict[ClassKey, Columns] = {}
        """Each class's comparables as the fit's arrays (``Columns``), in the same order, patched
        as members join and leave."""
        self._numbered = (Numbering(), Numbering())
        """The project ids and the categories the columns number."""
        self._sums: dict[ClassKey, int] = {}
        """Each class's members' hashes summed: its digest, summed when first asked for (a page
        of it is written) and kept from then on as a member joins or leaves."""
        self._folders = 0
        """Each folder's project (its id, category and prices) hashed, summed: what every class
        is made of, ten thousand hashes at a start where its members are hundreds of
        thousands."""

    def update(self, projects: Mapping[str, ProjectPrices]) -> set[ClassKey]:
        """The portfolio is now ``projects`` (by folder): the classes that moved."""
        changed = [
            folder
            for folder in set(self._projects) | set(projects)
            if self._projects.get(folder) is not projects.get(folder)
            and self._projects.get(folder) != projects.get(folder)
        ]
        # In their members' order: a start's ten thousand join each class already sorted.
        changed.sort(key=lambda f: _member((projects.get(f) or self._projects[f]).project_id, f))
        joins: dict[ClassKey, list[tuple[str, Comparable]]] = {}
        leaves: dict[ClassKey, set[str]] = {}
        for folder in changed:
            before, after = self._projects.get(folder), projects.get(folder)
            old, new = _entries(before), _entries(after)
            for key in new.keys() | old.keys() if old else new:
                if old.get(key) == new.get(key):
                    continue  # this class's comparable of the project is as it was
                summed = key in self._sums  # else summed when its digest is first asked for
                if key in old:
                    leaves.setdefault(key, set()).add(_member(old[key].project_id, folder))
                    if summed:
                        self._sums[key] -= _member_hash(*old[key])
                if key in new:
                    joins.setdefault(key, []).append(
                        (_member(new[key].project_id, folder), new[key])
                    )
                    if summed:
                        self._sums[key] += _member_hash(*new[key])
            for kept, sign in ((before, -1), (after, 1)):
                if kept is not None:
                    self._folders += sign * _folder_hash(folder, kept)
        moved = set(joins) | set(leaves)
        for key in moved:
            self._move(key, joins.get(key, []), leaves.get(key, set()))
            if self._rows[key]:
                self._classes[key] = tuple(self._rows[key])
            else:
                for store in (
                    self._order,
                    self._rows,
                    self._classes,
                    self._columns,
                    self._sums,
                    self._rendered,
                ):
                    store.pop(key, None)
        self._projects = dict(projects)
        return moved

    def _move(
        self,
        key: ClassKey,
        joins: list[tuple[str, Comparable]],
        leaves: set[str],
    ) -> None:
        """The class's members with ``leaves`` gone and ``joins`` in, in order: a few by
        bisection (one project moved), many by one sort (a start)."""
        order, rows = self._order.setdefault(key, []), self._rows.setdefault(key, [])
        rendered = self._rendered.get(key)
        columns = self._columns.get(key)
        if columns is not None and len(joins) + len(leaves) <= FEW_MOVES:
            for member in leaves:
                at = bisect_left(order, member)
                del order[at], rows[at]
                columns = columns.deleted(at)
                for place in rendered or ():
                    del place[at]
            for member, comparable in joins:
                at = bisect_left(order, member)
                order.insert(at, member)
                rows.insert(at, comparable)
                columns = columns.inserted(at, comparable, *self._numbered)
                if rendered is not None and self._render is not None:
                    for place, said in zip(rendered, self._render(comparable), strict=True):
                        place.insert(at, said)
            self._columns[key] = columns
            return
        self._rendered.pop(key, None)  # rendered again when next asked for
        kept = [(m, c) for m, c in zip(order, rows, strict=True) if m not in leaves] + joins
        kept.sort()  # by member: one project's comparable in a class per folder, never a tie
        self._order[key] = [m for m, _c in kept]
        self._rows[key] = [c for _m, c in kept]
        self._columns[key] = Columns.of(self._rows[key], *self._numbered)

    def rendered(self, key: ClassKey, pause: Callable[[], None] = lambda: None) -> Places:
        """The class's members as ``render`` renders them, in order, a list for each place:
        rendered whole when first asked for, then kept as members join and leave (one more
        project renders one member of each class it prices, not the ten thousand beside it).
        ``pause`` is called between two stretches of members (``STRETCH``)."""
        found = self._rendered.get(key)
        if found is None:
            if self._render is None:
                raise ValueError("these classes were made without a renderer")
            found = ([], [])
            for stretch in _stretches(self._rows.get(key, []), pause):
                rows = list(map(self._render, stretch))
                found[0].extend(said for said, _ in rows)
                found[1].extend(said for _, said in rows)
            self._rendered[key] = found
        return found

    def index(self) -> ReferenceIndex:
        keys = sorted(self._classes)
        projects, categories = self._numbered
        columns = ClassColumns(
            tuple(self._columns[key] for key in keys),
            tuple(projects.names),
            tuple(categories.names),
        )
        return ReferenceIndex(
            {key: self._classes[key] for key in keys}, self.rule, columns, self.version()
        )

    def version(self) -> str:
        """The version these classes are: their set of projects and the rule, named."""
        return version_id(self.digest(), self.rule)

    def digest(self) -> str:
        """Every class's comparables, as one digest: what the pages hold (the classes are made
        of the folders' projects alone, so their hashes say it)."""
        said = f"classes\x00{self._folders % _MODULUS:x}"
        return hashlib.sha256(said.encode()).hexdigest()[:16]

    def class_digest(self, key: ClassKey, pause: Callable[[], None] = lambda: None) -> str:
        """The class's comparables as one digest: the same whatever order they joined in.
        ``pause`` is called between two stretches of members (``STRETCH``)."""
        total = self._sums.get(key)
        if total is None:
            total = self._sums[key] = sum(
                sum(_member_hash(*c) for c in stretch)
                for stretch in _stretches(self._rows.get(key, []), pause)
            )
        said = f"{key[0]}\x00{key[1]}\x00{total % _MODULUS:x}"
        return hashlib.sha256(said.encode()).hexdigest()[:16]


_MODULUS: Final = 1 << 128
FEW_MOVES: Final = 64
"""Members joining or leaving a class that are put in their places one by one; more are sorted
in at once (a start moves ten thousand into each class: quadratic by bisection)."""


def _member(project_id: str, folder: str) -> str:
    """A class's member as one string, ordered as (project id, folder) is: a NUL sorts before
    any character a name holds, and strings compare faster than pairs."""
    return f"{project_id}\x00{folder}"


def _member_hash(*fields: object) -> int:
    """A member's share of a digest kept as a sum (a multiset hash): a member joins or leaves in
    constant time, where hashing the class again took a pass over its ten thousand members."""
    said = "\x00".join(map(repr, fields)).encode()
    return int.from_bytes(hashlib.blake2b(said, digest_size=16).digest(), "big")


def _folder_hash(folder: str, project: ProjectPrices) -> int:
    """A folder's share of the classes' digest: its project's id, category and prices (the
    words joined, the figures as their bytes: the repr of ten thousand projects' figures took
    half a second at a start)."""
    words = "\x00".join(
        [folder, project.project_id, repr(project.category)]
        + [f"{a}\x00{u}\x00{s}" for a, u, _p, s in project.classes]
    )
    h = hashlib.blake2b(words.encode(), digest_size=16)
    h.update(array("d", [p for _a, _u, p, _s in project.classes]).tobytes())
    return int.from_bytes(h.digest(), "big")


def _entries(project: ProjectPrices | None) -> dict[ClassKey, Comparable]:
    if project is None:
        return {}
    return {
        (compared_as, unit): Comparable(project.project_id, source, price, project.category)
        for compared_as, unit, price, source in project.classes
    }
