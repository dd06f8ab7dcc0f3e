"""A controlled load for benchmarks: ``k`` processes, each keeping one core busy.

    with busy(1):          # one core taken, as on a machine shared with one other job
        ...                # the timings

Each busy process is a fresh ``python`` spinning in a pure-Python loop (no memory traffic, no
threads, no imports). :func:`busy` starts them, returns once every one is spinning, and on leaving
the block (normally, by an exception or by KeyboardInterrupt) kills and reaps them all. Should the
benchmark itself be killed (SIGKILL leaves no chance to clean up), each busy process notices within
a few milliseconds that its parent is gone and exits.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

#: the busy loop: signal readiness, then spin until the parent (the benchmark) is gone
SPIN = r"""
import os, sys
parent = os.getppid()
sys.stdout.write("spinning\n")
sys.stdout.close()
while os.getppid() == parent:
    for _ in range(100_000):
        pass
"""


@contextmanager
def busy(k: int) -> Iterator[list[subprocess.Popen]]:
    """Keep ``k`` cores busy for the duration of a ``with`` block.

    Parameters
    ----------
    k : int
        Number of busy processes, ``k >= 0`` (0: none, the block runs on an unloaded machine).

    Returns
    -------
    Iterator[list[subprocess.Popen]]
        A context manager yielding the ``k`` running processes (spinning when the block starts);
        all of them are killed and reaped when the block ends, however it ends.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"busy: k must be an integer >= 0 (number of busy processes), got {k!r}")
    procs: list[subprocess.Popen] = []
    try:
        for _ in range(k):
            procs.append(subprocess.Popen([sys.executable, "-S", "-c", SPIN], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.PIPE, text=True))
        for p in procs:
            assert p.stdout is not None
            if p.stdout.readline() != "spinning\n":
                raise RuntimeError(f"busy: a busy process did not start (exit status {p.wait()})")
            p.stdout.close()
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
            if p.stdout is not None:
                p.stdout.close()
