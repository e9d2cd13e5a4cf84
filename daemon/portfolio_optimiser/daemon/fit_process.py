"""The reference fit of a large portfolio, made in a process of its own.

Decides where the processor's fit of a published index is made: here, below ``APART_FROM``
lines; from there on in one child process, spawned at the first such fit and kept (its compiled
loops stay loaded), begun as the index is published and taken when the fit is first used. In one
interpreter the fit's second of numpy and compiled loops shared the processor with every verdict
taken in meanwhile: at ten thousand projects a verdict during the fit took 25–65 ms, idle 14.
The child is sent the compact index (``ReferenceIndex.compact``: 20 MB of arrays at ten
thousand projects) and hands back the fit (90 MB of arrays, pickled in 40 ms); it runs at a
lower priority, so the daemon's own threads come first on a machine of two cores.

A child that dies or cannot be started is logged and the fit made here, with the same figures
(the same code on the same arrays); the next fit starts another child.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import multiprocessing
import os
import pickle
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Final

from portfolio_optimiser.context.fit_kernels import COMPILED_FROM
from portfolio_optimiser.context.price_fit import PriceFit
from portfolio_optimiser.context.reference import ReferenceIndex

__all__ = ["APART_FROM", "FitProcess"]

APART_FROM: Final = COMPILED_FROM
"""Lines from which the fit is made in the child: where its loops run compiled (about three
thousand projects). Below, the fit takes tenths of a second and a child would cost more (its
interpreter, numpy, 100 MB)."""
NICENESS: Final = 10
"""How much lower the child runs than the daemon."""
_FAILED: Final = (BrokenProcessPool, OSError, RuntimeError, pickle.PicklingError, EOFError)
"""What a child that died, could not start, or could not hand back its fit raises."""


def _lower_priority() -> None:
    with contextlib.suppress(OSError):
        os.nice(NICENESS)


def _lines(index: ReferenceIndex) -> int:
    return 0 if index.columns is None else sum(len(c.price) for c in index.columns.columns)


@dataclass
class FitProcess:
    """The processor's child that fits large indexes, and what to do when it fails."""

    log: Any
    _pool: ProcessPoolExecutor | None = None

    def fitted(self, index: ReferenceIndex) -> ReferenceIndex:
        """``index`` with its fit begun in the child, from ``APART_FROM`` lines (taken when the
        fit is first used); else ``index`` as it is, fitted here when first used."""
        if _lines(index) < APART_FROM:
            return index
        pool = self._started()
        try:
            future = pool.submit(PriceFit, index.compact())
        except _FAILED as exc:
            self._failed(pool, exc)
            return index
        return dataclasses.replace(index, fitted_by=functools.partial(self._take, pool, future))

    def close(self) -> None:
        """The child stopped; a fit waiting for it is dropped (its index fits here if used)."""
        if self._pool is not None:
            self._stop(self._pool)

    def _started(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_lower_priority,
            )
        return self._pool

    def _take(
        self, pool: ProcessPoolExecutor, future: Future[PriceFit], index: ReferenceIndex
    ) -> PriceFit:
        try:
            return future.result()
        except CancelledError:  # dropped by ``close``
            return PriceFit(index)
        except _FAILED as exc:
            self._failed(pool, exc)
            return PriceFit(index)

    def _failed(self, pool: ProcessPoolExecutor, exc: BaseException) -> None:
        self.log.warning(
            "reference fit made in the daemon's own process: its child failed",
            problem=str(exc) or type(exc).__name__,
        )
        self._stop(pool)

    def _stop(self, pool: ProcessPoolExecutor) -> None:
        """``pool`` shut down, and forgotten if it is the current one (a fit begun in a child
        that has died since fails after another child was started)."""
        pool.shutdown(wait=False, cancel_futures=True)
        if self._pool is pool:
            self._pool = None
