"""Batched small products and Cholesky factorisations on a CPU through numpy's BLAS and LAPACK.

The discrete model multiplies many small matrices, one per sample (32 × 256 by 256 × 32 and
the like). On the development machine (AMD EPYC) torch's batched product (MKL) ran these at
17–24 GFLOP/s on one thread, while numpy's loop of one BLAS call per matrix (OpenBLAS) ran
them at 21–41 GFLOP/s, and ``numpy.linalg.cholesky`` took half the time of
``torch.linalg.cholesky_ex`` with its ``tril`` (docs/performance.md, "Small products through
numpy's BLAS"). The functions here take and return torch tensors, sharing memory with the numpy
views, and fall back to torch off the CPU, for other dtypes and for tensors that require grad.

Every matrix is one single-threaded BLAS or LAPACK call (numpy's BLAS is held to one thread for
the call: otherwise its threads compete with torch's and with the sampler's for the cores, 2×
slower at batch 16, N 64, m 1024), so a sample's result never depends on the batch it is in or
on the number of threads.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Optional

import numpy as np
import torch

#: multiply-adds of one matrix product (n·k·p, or n³ for a factorisation) up to which numpy's
#: one-thread call per matrix is used; larger ones are left to torch's multi-threaded BLAS
SMALL = 1 << 24


def small(*products: tuple[int, int, int]) -> bool:
    """Whether every (n, k, p) product is small enough for the per-matrix route."""
    return all(n * k * p <= SMALL for n, k, p in products)


def _numpy_route(*ts: torch.Tensor) -> bool:
    """Whether numpy's kernels take these tensors: CPU, strided, float32/float64 alike, no grad."""
    t0 = ts[0]
    return all(
        t.device.type == "cpu" and t.layout == torch.strided and not t.requires_grad and t.dtype == t0.dtype for t in ts
    ) and t0.dtype in (torch.float32, torch.float64)


_LOCK = threading.Lock()
_HELD: list[Any] = []  # the limiter of the outermost :func:`one_thread`, while one is entered
_DEPTH = 0
_BLAS: list[Any] = []  # numpy's BLAS libraries (threadpoolctl), found once: finding them takes milliseconds


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Within: numpy's BLAS libraries on one thread (threadpoolctl). Entered by several threads at
    once (lanes), the first entry sets it and the last exit restores the setting before."""
    global _DEPTH
    with _LOCK:
        if _DEPTH == 0:
            if not _BLAS:
                from threadpoolctl import ThreadpoolController

                _BLAS.append(ThreadpoolController().select(user_api="blas"))
            libs = _BLAS[0].lib_controllers
            _HELD.append([(lib, lib.num_threads) for lib in libs])
            for lib in libs:
                lib.set_num_threads(1)
        _DEPTH += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0:
                for lib, threads in _HELD.pop():
                    lib.set_num_threads(threads)


def matmul(a: torch.Tensor, b: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``torch.matmul(a, b, out=out)``: a (..., n, k), b (..., k, p) → (..., n, p), batch dims
    broadcast. On a CPU one BLAS call per matrix through ``numpy.matmul``."""
    if not (_numpy_route(a, b, *(() if out is None else (out,))) and a.dim() >= 2 and b.dim() >= 2
            and small((a.shape[-2], a.shape[-1], b.shape[-1]))):
        return torch.matmul(a, b, out=out)
    with one_thread():
        res = np.matmul(a.numpy(), b.numpy(), out=None if out is None else out.numpy())
    return out if out is not None else torch.from_numpy(res)


def cholesky(K: torch.Tensor) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Lower Cholesky factors of K (..., n, n), symmetric, and the mask (...) of the matrices that
    are not positive definite (None if none; their factors are zero here). On a CPU LAPACK's
    ``potrf`` per matrix through ``numpy.linalg.cholesky``."""
    if not (_numpy_route(K) and small((K.shape[-1],) * 3)):
        C, info = torch.linalg.cholesky_ex(K)
        return C, (info > 0 if bool(info.any()) else None)
    with one_thread():
        try:
            return torch.from_numpy(np.linalg.cholesky(K.numpy())), None
        except np.linalg.LinAlgError:  # numpy fails the whole stack: find the failures, factor the rest
            bad = torch.linalg.cholesky_ex(K)[1] > 0
            C = torch.zeros_like(K)
            if not bool(bad.all()):
                C[~bad] = torch.from_numpy(np.linalg.cholesky(K[~bad].numpy()))
            return C, bad
