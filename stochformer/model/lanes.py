"""Samples computed in lanes: a run's batch cut into contiguous parts, one thread each.

Within :func:`laned` torch computes on one thread and ``width`` threads each take a part of the
samples through a whole layer (attention, MLP, projections), so no torch operation waits for its
own worker threads between the many small operations of a layer (docs/performance.md, "Lanes").
Every sample is computed by the same single-threaded kernels whatever the part it falls in, so
the numbers do not depend on the width, which may change between layers (the overlapped draws of
:func:`~stochformer.model.rng.overlapped` lower it while they use some of the cores).
"""

from __future__ import annotations

import contextlib
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, Optional

import torch

from . import blas, rng


def _pool() -> ThreadPoolExecutor:
    return rng.thread_pool("lane", (os.cpu_count() or 1) - 1)


class Lanes:
    """``width`` threads (the calling thread one of them) computing parts of a batch."""

    def __init__(self, width: int) -> None:
        self.width = max(1, width)

    def set_width(self, width: int) -> None:
        self.width = max(1, width)

    def run(self, part: Callable[[int, int], None], batch: int, most: Optional[int] = None) -> None:
        """``part(a, b)`` for contiguous a..b−1 covering 0..batch−1, in ``width`` threads at most
        (and at most ``most``); returns when all are done, raising the first error any raised."""
        n = max(1, min(self.width, batch, most or batch))
        cuts = [batch * i // n for i in range(n + 1)]
        futures = [_pool().submit(part, cuts[i], cuts[i + 1]) for i in range(1, n)]
        try:
            part(0, cuts[1])
        finally:
            for f in futures:
                f.exception()  # wait for every part before raising
        for f in futures:
            f.result()


@contextlib.contextmanager
def laned(cores: Optional[int] = None) -> Iterator[Lanes]:
    """Within: torch on one thread, and :class:`Lanes` of width ``cores`` (default torch's thread
    count), which the sampler takes for the cores it may draw on (:func:`~.rng.cores`), and the
    small products through numpy (:func:`~.blas.per_matrix`); afterwards as before."""
    old, lanes = torch.get_num_threads(), Lanes(cores or torch.get_num_threads())
    torch.set_num_threads(1)
    rng.CORES = lambda: lanes.width
    try:
        with blas.per_matrix():
            yield lanes
    finally:
        rng.CORES = None
        torch.set_num_threads(old)
