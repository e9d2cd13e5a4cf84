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


def give_back_memory() -> None:
    """The heap's free pages returned to the system: glibc keeps what a start or a run freed
    (13 MB of the idle daemon's 128 in ``bench_daemon``; all an event freed once
    ``keep_freed_memory`` is in force), and an idle daemon should hold little.

    The first time, the start-up's garbage is collected and what is left is set aside from the
    collector (``gc.freeze``): the portfolio's compact index and its classes, a million objects
    at ten thousand projects, which every full collection walked again (0.6 s of an event
    there). Later objects are collected as before; set aside once only, so nothing that becomes
    garbage in a cycle later is kept for good."""
    if gc.get_freeze_count() == 0:
        gc.collect()
        gc.freeze()
    trim = libc_function("malloc_trim")
    if trim is not None:
        trim(0)
