"""Task functions for tests/test_sweep.py, in a module of their own so that Dask workers import
them without importing the test module (and its heavy imports)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def counted_square(x: int, log: str, marker: str | None = None) -> dict:
    """x² after appending x to ``log``; kills its own worker process the first time if ``marker``
    does not exist yet (it creates it first)."""
    with open(log, "a") as fh:
        fh.write(f"{x}\n")
    time.sleep(0.1)
    if marker is not None and not os.path.exists(marker):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return {"x": x, "square": x * x}


def fails_for_five(x: int, store: str) -> int:
    """x, except for 5, which raises once the other tasks' results are in ``store``."""
    if x == 5:
        deadline = time.monotonic() + 30
        while len(list(Path(store).glob("f*.json"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        raise ArithmeticError("five")
    return x
