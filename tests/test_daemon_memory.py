"""The daemon's memory: what an event frees is kept for the next one while the daemon works,
and given back once it is idle (``daemon/memory.py``). Each case in a process of its own: the C
library's settings are for the whole process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from portfolio_optimiser._libc import libc_function
from portfolio_optimiser.daemon.memory import KEEP_FROM

pytestmark = pytest.mark.skipif(
    libc_function("mallopt") is None, reason="the C library is not glibc (no mallopt)"
)

EVENT = """
import resource, sys
import numpy as np
from portfolio_optimiser.daemon.memory import give_back_memory, keep_freed_memory

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

def resident_mb():
    with open("/proc/self/status") as status:
        line = next(l for l in status if l.startswith("VmRSS"))
    return int(line.split()[1]) / 1024

def event():  # 64 MB of arrays made, filled and freed, as a large portfolio's event does
    values = np.empty(8 << 20)
    values.fill(1.0)
    del values

kept = keep_freed_memory(int(sys.argv[1]))
event()
before = faults()
event()
again = faults() - before
held = resident_mb()
give_back_memory(thorough=True)
print(kept, again, held - resident_mb())
"""


def _event(projects: int) -> tuple[str, int, float]:
    # Without huge pages, as the daemon asks numpy (a huge page is one fault for 2 MB).
    done = subprocess.run(
        [sys.executable, "-c", EVENT, str(projects)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "NUMPY_MADVISE_HUGEPAGE": "0"},
    )
    kept, again, given = done.stdout.split()
    return kept, int(again), float(given)


@pytest.mark.loadbearing
def test_an_events_arrays_are_kept_for_the_next_and_given_back_at_idle() -> None:
    """In a large portfolio, 64 MB freed by one event are the next event's without a page
    faulted in (glibc would otherwise hand them to the kernel and fault 16 000 fresh pages), and
    ``give_back_memory`` returns them to the system."""
    kept, again, given = _event(KEEP_FROM)
    assert kept == "True"
    assert again < 1_000, f"{again} pages faulted in again"
    assert given >= 48, f"only {given:.0f} MB given back at idle"


def test_a_smaller_portfolio_keeps_glibcs_own_policy() -> None:
    """Below ``KEEP_FROM`` projects nothing is kept: glibc maps an array this large afresh each
    time (what the kept memory saves, so the test above can tell the two apart)."""
    kept, again, _given = _event(KEEP_FROM - 1)
    assert kept == "False"
    assert again > 10_000
