"""The daemon's memory: kept while it works, given back once it is idle.

A large portfolio's event (one more project at ten thousand) frees hundreds of megabytes of
arrays and asks for as many again at the next event. glibc hands an allocation of more than its
mmap threshold (128 KB to 32 MB, moving) to the kernel when it is freed, and trims the heap's
top past its trim threshold: each event's arrays were then new pages, faulted in and zeroed one
at a time (40 000 to 80 000 faults, 0.15 s of a 1.1 s event). In a large portfolio, freed
memory is kept for the next event instead (``keep_freed_memory``, set at an idle turn and in
force for the rest of the process's life), and each time the daemon is idle it is given back
(``give_back_memory``). Both are glibc's; elsewhere the C library's own policy stands.
"""

from __future__ import annotations

import gc
from typing import Final

from portfolio_optimiser._libc import libc_function

__all__ = [
    "KEEP_FROM",
    "KEPT_BELOW",
    "KEPT_BELOW_AT_LEAST",
    "THOROUGH_EVERY_S",
    "give_back_memory",
    "keep_freed_memory",
]

M_TRIM_THRESHOLD: Final = -1
M_MMAP_THRESHOLD: Final = -3

KEEP_FROM: Final = 500
"""Projects from which an event frees tens of megabytes and more: faulting them in again cost a
quarter of one more project's time at a thousand projects (0.32 -> 0.24 s), a tenth at ten
thousand."""
KEPT_BELOW: Final = 256 << 20
"""Allocations smaller than this come from the heap and go back to it when freed: the largest
array of a portfolio of a hundred thousand projects is a tenth of it. (A thread's own heap holds
64 MB at most: a larger array made off the main thread is mapped afresh all the same.)"""
KEPT_BELOW_AT_LEAST: Final = 32 << 20
"""What a glibc that refuses ``KEPT_BELOW`` is asked for instead: older ones, and mallopt(3) to
this day, cap the threshold at half a thread's heap."""
THOROUGH_EVERY_S: Final = 3600.0
"""How often an idle turn collects everything, what was set aside too (``give_back_memory``):
a cycle that died after it was set aside is held at most this long."""
TRIMMED_PAST: Final = 1 << 30
"""The heap's free top is given back by itself only past this; the daemon gives it back at idle."""


def keep_freed_memory(projects: int) -> bool:
    """In a portfolio of ``projects`` (from ``KEEP_FROM`` on), freed memory kept in the process
    for the next allocation, until ``give_back_memory``. False where it is not: a smaller
    portfolio (its events free a few megabytes, and glibc's own policy keeps an idle daemon two
    megabytes smaller), or a C library with no ``mallopt`` (not glibc)."""
    mallopt = libc_function("mallopt") if projects >= KEEP_FROM else None
    if mallopt is None:
        return False
    # Set, the thresholds stay put: glibc no longer moves them with what is freed.
    mapped = mallopt(M_MMAP_THRESHOLD, KEPT_BELOW) or mallopt(M_MMAP_THRESHOLD, KEPT_BELOW_AT_LEAST)
    trimmed = mallopt(M_TRIM_THRESHOLD, TRIMMED_PAST)
    return bool(mapped) and bool(trimmed)


def give_back_memory(*, thorough: bool) -> None:
    """The heap's free pages returned to the system: glibc keeps what a start or a run freed
    (13 MB of the idle daemon's 128 in ``bench_daemon``; all an event freed once
    ``keep_freed_memory`` is in force), and an idle daemon should hold little.

    What the work left alive is set aside from the garbage collector (``gc.freeze``): the
    portfolio's compact index and classes (a million objects at ten thousand projects) and the
    reasoning records read and made (half a second of every full collection at 48 000), which
    each full collection during the next work would walk again. An object set aside that later
    dies in a cycle is not collected until a ``thorough`` turn: everything is then handed back
    to the collector, collected whole, and set aside again (the service asks for one at its
    first idle turn, then every ``THOROUGH_EVERY_S``). Between those, only the young generations
    are collected first: a turn costs milliseconds, and an expert's verdict is not held up
    behind a full collection."""
    if thorough:
        gc.unfreeze()
        gc.collect()
    else:
        gc.collect(1)
    gc.freeze()
    trim = libc_function("malloc_trim")
    if trim is not None:
        trim(0)
