"""Can these savings all come out of these cost lines at once? A small max-flow answers it.

Savings double-count exactly when no assignment of each candidate's kroner to the lines it names
fits within the lines' amounts (Hall's condition on the bipartite graph candidate → line). Pairwise
checks miss chains ({A}, {A,B}, {B} can claim 300 from two lines of 100), so the check is a flow:
source → candidate (its saving) → each line it names (unbounded) → sink (the line's amount). The
savings fit iff the maximum flow equals their sum. Edmonds–Karp (shortest augmenting paths) ends
for any capacities, Decimal included.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from decimal import Decimal

__all__ = ["assignable"]

_SOURCE = ("source", "")
_SINK = ("sink", "")


def assignable(
    claims: Mapping[str, tuple[Decimal, frozenset[str]]], amounts: Mapping[str, Decimal]
) -> Decimal:
    """The largest total of ``claims`` (id → saving, codes) that fits in ``amounts`` (code → NOK)."""
    residual: dict[tuple[str, str], dict[tuple[str, str], Decimal]] = {}

    def edge(a: tuple[str, str], b: tuple[str, str], capacity: Decimal) -> None:
        residual.setdefault(a, {})[b] = residual.get(a, {}).get(b, Decimal(0)) + capacity
        residual.setdefault(b, {}).setdefault(a, Decimal(0))

    unbounded = sum((saving for saving, _ in claims.values()), Decimal(0)) + 1
    for name, (saving, codes) in claims.items():
        edge(_SOURCE, ("claim", name), saving)
        for code in codes:
            if code in amounts:
                edge(("claim", name), ("line", code), unbounded)
    for code, amount in amounts.items():
        edge(("line", code), _SINK, amount)

    total = Decimal(0)
    while True:
        parent: dict[tuple[str, str], tuple[str, str]] = {_SOURCE: _SOURCE}
        queue = deque([_SOURCE])
        while queue and _SINK not in parent:
            node = queue.popleft()
            for nxt, capacity in residual.get(node, {}).items():
                if capacity > 0 and nxt not in parent:
                    parent[nxt] = node
                    queue.append(nxt)
        if _SINK not in parent:
            return total
        path = []
        node = _SINK
        while node != _SOURCE:
            path.append((parent[node], node))
            node = parent[node]
        push = min(residual[a][b] for a, b in path)
        for a, b in path:
            residual[a][b] -= push
            residual[b][a] += push
        total += push
