"""Devices, dtypes, generators and the provenance recorded with every run."""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import sys
import zlib
from importlib import metadata
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import numpy as np
import torch

from .version import __version__

DTYPES = {"float64": torch.float64, "float32": torch.float32}


def resolve_device(name: str) -> torch.device:
    """``cpu``, ``cuda`` or ``cuda:i``; a clear error if CUDA is asked for and absent.

    Parameters
    ----------
    name : str
        ``cpu``, ``cuda`` or ``cuda:i``.

    Returns
    -------
    torch.device
        The device.
    """
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device: {name!r} requested but no CUDA device is available (use device = 'cpu')")
    return torch.device(name)


def make_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch generator on ``device`` seeded with ``seed`` (same seed, same device ⇒ same numbers).

    Parameters
    ----------
    seed : int
        The seed.
    device : str or torch.device, optional
        The generator's device.

    Returns
    -------
    torch.Generator
        The seeded generator.
    """
    g = torch.Generator(device=device)
    g.manual_seed(int(seed))
    return g


def device_description(device: torch.device | str) -> str:
    """The device in words: a GPU's name, or a CPU's processor and torch's thread count.

    Parameters
    ----------
    device : str or torch.device
        The device.

    Returns
    -------
    str
        Its description.
    """
    device = torch.device(device)
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


#: distributions whose versions every run records (None: not installed; dask and POT are extras)
SCIENTIFIC_PACKAGES = ("scipy", "xarray", "pydantic", "matplotlib", "h5netcdf", "netCDF4", "dask", "distributed", "pot")


def provenance(device: torch.device | str) -> dict:
    """Package versions (torch, numpy and its BLAS, every distribution of `SCIENTIFIC_PACKAGES`), Python,
    platform and device, for the output's ``config.json``.

    Parameters
    ----------
    device : str or torch.device
        The run's device.

    Returns
    -------
    dict
        Versions, Python, platform and device.
    """
    return {**_versions(), "device": device_description(device)}


@functools.lru_cache(maxsize=1)
def _versions() -> dict:
    """The versions and platform of this process (read once: ~20 ms of metadata lookups)."""
    return {
        "stochformer": __version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        **{name.lower(): _version(name) for name in SCIENTIFIC_PACKAGES},
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }


def child_seeds(seed: int, n: int) -> list[int]:
    """``n`` independent, deterministic seeds derived from ``seed`` (numpy SeedSequence.spawn).

    Use these for sub-runs and parts of the samples so that results do not depend on how work is split.

    Parameters
    ----------
    seed : int
        The parent seed.
    n : int
        How many.

    Returns
    -------
    list of int
        The seeds.
    """
    return [int(s.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)) for s in np.random.SeedSequence(seed).spawn(n)]


def named_seed(seed: int, name: str) -> int:
    """A deterministic seed for the part ``name`` of a run with ``seed``, independent of every
    [`child_seeds`][stochformer.core.runtime.child_seeds] stream of that seed (SeedSequence entropy [seed, crc32(name)]).

    Parameters
    ----------
    seed : int
        The run's seed.
    name : str
        The part's name.

    Returns
    -------
    int
        The part's seed.
    """
    entropy = [int(seed), zlib.crc32(name.encode())]
    return int(np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


def stream(generator: torch.Generator, name: str, device: torch.device | str | None = None) -> torch.Generator:
    """The generator of a run's random part ``name``: seeded with
    ``named_seed(generator.initial_seed(), name)``, on ``device`` (default: the generator's).

    A part of a run that draws beside the run's generator (a resampled attention's Q, K, V, a
    random-batch attention's permutations) draws from this stream: its numbers change with the
    run's seed, and the run's generator is left untouched, so the other parts' draws (the MLP's
    weights, the Brownian normals) are those of the same run without that part. The stream depends
    on the seed the run's generator was started with (``initial_seed``, the ``seed`` of
    [`make_generator`][stochformer.core.runtime.make_generator] or the last ``manual_seed``), not on
    how far the generator has been drawn.

    Parameters
    ----------
    generator : torch.Generator
        The run's generator.
    name : str
        The part, e.g. ``"attention"``: different names give independent streams.
    device : str or torch.device, optional
        Where the stream draws (default: the generator's device).

    Returns
    -------
    torch.Generator
        A fresh generator, the same for the same seed and name.
    """
    return make_generator(named_seed(generator.initial_seed(), name), generator.device if device is None else device)


@contextlib.contextmanager
def cpu_threads_for(tokens: int, small: int = 1024) -> Iterator[None]:
    """One torch CPU thread while handling fewer than ``small`` tokens in all (the per-operation
    cost of a parallel region then exceeds the work; on a busy machine by orders of magnitude),
    the current setting otherwise.

    Parameters
    ----------
    tokens : int
        Tokens handled in all.
    small : int, optional
        Below this, one thread.

    Yields
    ------
    None
        The block runs with that thread count; the previous one is restored after.
    """
    with one_cpu_thread(tokens < small):
        yield


@contextlib.contextmanager
def one_cpu_thread(active: bool = True) -> Iterator[None]:
    """One torch CPU thread (OpenMP and MKL) inside the block where ``active``; the previous
    setting is restored after.

    Parameters
    ----------
    active : bool, optional
        Whether to drop to one thread (False: the block runs unchanged).

    Yields
    ------
    None
    """
    old = torch.get_num_threads()
    if active and old != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if active and old != 1:
            torch.set_num_threads(old)


_POOL: tuple[int, ThreadPoolExecutor] | None = None
#: the process that imported stochformer: a process forked from it inherits the parent's thread
#: and OpenMP state (`forked`)
_IMPORT_PID = os.getpid()
#: the names of its threads start with this
POOL_PREFIX = "stochformer-worker"


def thread_pool() -> ThreadPoolExecutor:
    """The process-wide pool of worker threads, one per core, made on first use (and again in a
    forked child, whose copy of the parent's pool has no threads). torch and NumPy release the
    GIL, so the workers run on all cores.

    Returns
    -------
    concurrent.futures.ThreadPoolExecutor
        The pool; its threads' names start with `POOL_PREFIX`.
    """
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix=POOL_PREFIX))
    return _POOL[1]


def forked() -> bool:
    """Whether this process was forked after stochformer was imported (a fork copies the parent's
    thread and OpenMP state, which threads started in the child may find locked: work that would
    go to `thread_pool` runs in the calling thread there).

    Returns
    -------
    bool
        True in a process forked after the import.
    """
    return os.getpid() != _IMPORT_PID
