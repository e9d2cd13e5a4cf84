"""Functions of the C library this process already runs on, looked up once.

``ctypes.util.find_library`` would run ``ldconfig`` in a subprocess at every lookup; ``CDLL(None)``
is the running program, libc included. None where the library has no such function (not glibc,
not Linux): each caller says what it does then.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

__all__ = ["libc_function"]


@functools.cache
def libc_function(name: str) -> Any:
    """The C function ``name`` (errno kept for ``ctypes.get_errno``), or None."""
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), name, None)
    except OSError:
        return None
