"""Small per-sample products and Cholesky factorisations on a CPU through numpy's BLAS and LAPACK.

The discrete model multiplies many small matrices, one per sample (32 × 256 by 256 × 32 and
the like). On the development machine (AMD EPYC) torch's batched products (MKL) ran these at
17–24 GFLOP/s on one thread, numpy's loop of one BLAS call per matrix (OpenBLAS) at 21–41 GFLOP/s,
and ``numpy.linalg.cholesky`` took half the time of ``torch.linalg.cholesky_ex`` with its
``tril`` (docs/performance.md, "Lanes"). But one call per matrix runs on one thread, so it pays
only where the samples are spread over threads by other means: in lanes
(:mod:`~stochformer.model.lanes`). Hence :func:`matmul` and :func:`cholesky` are torch's
operations, except within :func:`per_matrix`, where small CPU float matrices go through numpy
(sharing memory with the tensors) with numpy's BLAS held to one thread: every matrix is then one
single-threaded call, so a sample's result depends neither on the batch it is in nor on the
number of threads.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Optional

import numpy as np
import torch

#: multiply-adds of one matrix product (n·k·p, or n³ for a factorisation) up to which numpy's
#: one-thread call per matrix is used within :func:`per_matrix`
SMALL = 1 << 24

_LOCK = threading.Lock()
_DEPTH = 0  # entries of :func:`per_matrix` not yet left, over all threads
_SAVED: list[Any] = []  # numpy's BLAS thread counts before the outermost entry
_BLAS: list[Any] = []  # numpy's BLAS libraries (threadpoolctl), found once: finding them takes milliseconds


def small(*products: tuple[int, int, int]) -> bool:
    """Whether every (n, k, p) product is small enough for the per-matrix route."""
    return all(n * k * p <= SMALL for n, k, p in products)


@contextlib.contextmanager
def per_matrix() -> Iterator[None]:
    """Within: :func:`matmul` and :func:`cholesky` of small CPU matrices through numpy, whose
    BLAS is held to one thread (its own threads would compete with the lanes' and the sampler's:
    2.10 s against 1.12 s at batch 16, N 64, d 64, m 1024). The outermost entry sets that and
    its exit restores it, and must be made in the thread that starts the lanes (OpenBLAS takes
    its thread count from the calling thread there and ignores one set in another thread);
    the lanes' own entries, inside it, only count."""
    global _DEPTH
    with _LOCK:
        if _DEPTH == 0:
            if not _BLAS:
                from threadpoolctl import ThreadpoolController

                _BLAS.append(ThreadpoolController().select(user_api="blas"))
            _SAVED[:] = [(lib, lib.num_threads) for lib in _BLAS[0].lib_controllers]
            for lib, _ in _SAVED:
                lib.set_num_threads(1)
        _DEPTH += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0:
                for lib, threads in _SAVED:
                    lib.set_num_threads(threads)


def _numpy_route(*ts: torch.Tensor) -> bool:
    """Within :func:`per_matrix`, for CPU strided float32/float64 tensors alike, without grad."""
    t0 = ts[0]
    return _DEPTH > 0 and t0.dtype in (torch.float32, torch.float64) and all(
        t.device.type == "cpu" and t.layout == torch.strided and not t.requires_grad and t.dtype == t0.dtype for t in ts
    )


def matmul(a: torch.Tensor, b: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``torch.matmul(a, b, out=out)``: a (..., n, k), b (..., k, p) → (..., n, p), batch dims
    broadcast; within :func:`per_matrix` one BLAS call per small matrix through ``numpy.matmul``."""
    if not (_numpy_route(a, b, *(() if out is None else (out,))) and a.dim() >= 2 and b.dim() >= 2
            and small((a.shape[-2], a.shape[-1], b.shape[-1]))):
        return torch.matmul(a, b, out=out)
    res = np.matmul(a.numpy(), b.numpy(), out=None if out is None else out.numpy())
    return out if out is not None else torch.from_numpy(res)


def cholesky(K: torch.Tensor) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Lower Cholesky factors of K (..., n, n), symmetric, and the mask (...) of the matrices that
    are not positive definite (None if none); within :func:`per_matrix` LAPACK's ``potrf`` per
    small matrix through ``numpy.linalg.cholesky`` (the failed ones' factors are zero then)."""
    if not (_numpy_route(K) and small((K.shape[-1],) * 3)):
        C, info = torch.linalg.cholesky_ex(K)
        return C, (info > 0 if bool(info.any()) else None)
    try:
        return torch.from_numpy(np.linalg.cholesky(K.numpy())), None
    except np.linalg.LinAlgError:  # numpy fails the whole stack: find the failures, factor the rest
        bad = torch.linalg.cholesky_ex(K)[1] > 0
        C = torch.zeros_like(K)
        if not bool(bad.all()):
            C[~bad] = torch.from_numpy(np.linalg.cholesky(K[~bad].numpy()))
        return C, bad
