"""A run's candidates reviewed beside each other's model calls, the calls themselves one at a time.

Decides: that a run consults its checkers for one candidate at a time, in the candidates' order
(a local model server serves one request at a time; a call's budget check and its charge must
not interleave with another's; a consultation's deadline counts from its own turn, never from a
wait behind another's), and that the rest of a candidate's review — its assessment and plan
before its turn, its conclusion and validation after — is done while another candidate's call is
in flight. A run's own work so falls in the model's time instead of adding to it.

A candidate's review starts once the one before it has taken its turn (or finished without one):
while that call is in flight, the next candidate is assessed and planned, and waits. The turn
passes on as soon as a call returns, so the next call goes out before the work after the first.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TypeVar

__all__ = ["ModelTurn", "in_turns"]

T = TypeVar("T")


class ModelTurn:
    """One consultation of a run at a time, taken in the order asked for."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._taken = asyncio.Event()

    @asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        async with self._lock:
            self._taken.set()
            yield
        # The next candidate, woken by the release, sends its call before this one goes on.
        await asyncio.sleep(0)

    def watch(self) -> asyncio.Event:
        """Set when the next turn is taken."""
        self._taken = asyncio.Event()
        return self._taken


async def in_turns(turn: ModelTurn, reviews: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
    """Each review's result, in order: each started once the one before it has taken its turn or
    ended. The first exception a review raises is raised, after the reviews still running are
    cancelled (a budget spent or a timeout ends them all, as it ended the rest of a run)."""
    tasks: list[asyncio.Task[T]] = []
    try:
        for review in reviews:
            taken = asyncio.ensure_future(turn.watch().wait())
            task = asyncio.ensure_future(review())
            tasks.append(task)
            await asyncio.wait((task, taken), return_when=asyncio.FIRST_COMPLETED)
            taken.cancel()
            if task.done() and not task.cancelled() and task.exception() is not None:
                break
        return await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
