"""Standard normal draws for the noise sources: torch's generator or parallel streams.

Drawing Gaussians dominates the cost of the discrete transformer on a CPU (see
``docs/benchmarks.md``). :class:`NormalDraws` fills a flat buffer of ``n`` i.i.d. N(0, 1) numbers:

- ``backend="torch"``: ``torch.randn`` with the run's generator (any device).
- ``backend="parallel"`` (CPU): the buffer is cut into ``streams`` contiguous pieces, each filled
  from its own generator by a thread pool (the samplers release the GIL), so all cores draw at
  once: numpy's ziggurat on an SFC64 bit generator for float64, the fastest exact float64 sampler
  measured; torch's vectorised Box–Muller on a per-stream torch generator for the float32 opt-in.
  The ``streams`` seeds are drawn from the run's torch generator at every call, so the numbers
  depend only on that generator's state, ``n`` and ``streams`` — never on the number of threads
  or on timing: same seed ⇒ same numbers.
- ``precision="float32"`` (opt-in, never the default): the normals are drawn in float32 and cast
  to the run's dtype; faster, but each draw carries float32 rounding (relative 6e-8) and the
  float32 sampler's tails.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal, Optional

import numpy as np
import torch

RngBackend = Literal["torch", "parallel"]
DrawPrecision = Literal["full", "float32"]

#: below this many normals per stream the pieces are filled serially (thread hand-off costs more)
_PARALLEL_MIN = 1 << 14
_POOL: Optional[ThreadPoolExecutor] = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1), thread_name_prefix="stochformer-rng")
    return _POOL


def resolve_backend(backend: str, device: torch.device | str) -> RngBackend:
    """``auto`` → ``parallel`` on a CPU, ``torch`` on an accelerator (its own generator is fast)."""
    if backend == "auto":
        return "parallel" if torch.device(device).type == "cpu" else "torch"
    if backend not in ("torch", "parallel"):
        raise ValueError(f"rng: unknown backend {backend!r}; valid: auto, torch, parallel")
    return backend  # type: ignore[return-value]


@dataclass(frozen=True)
class NormalDraws:
    """A sampler of flat i.i.d. N(0, 1) buffers (see the module docstring)."""

    backend: RngBackend = "torch"
    precision: DrawPrecision = "full"
    streams: int = 4

    def __call__(self, n: int, generator: torch.Generator, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
        """``n`` normals, shape (n,), in ``dtype`` on ``device``."""
        draw_dtype = torch.float32 if self.precision == "float32" else dtype
        if self.backend == "torch":
            z = torch.randn(n, generator=generator, dtype=draw_dtype, device=device)
        else:
            z = self._parallel(n, generator, draw_dtype).to(device)
        return z if z.dtype == dtype else z.to(dtype)

    def _parallel(self, n: int, generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
        if dtype not in (torch.float64, torch.float32):
            raise ValueError(f"rng: the parallel backend draws float64 or float32, not {dtype}")
        seeds = torch.randint(0, 2**63 - 1, (self.streams,), generator=generator, device=generator.device).tolist()
        out = torch.empty(n, dtype=dtype)
        edges = [(n * k) // self.streams for k in range(self.streams + 1)]
        if dtype == torch.float64:
            buf = out.numpy()

            def fill(k: int) -> None:
                np.random.Generator(np.random.SFC64(seeds[k])).standard_normal(out=buf[edges[k] : edges[k + 1]])

        else:

            def fill(k: int) -> None:
                out[edges[k] : edges[k + 1]].normal_(generator=torch.Generator().manual_seed(seeds[k]))

        if min(self.streams, torch.get_num_threads()) > 1 and n >= _PARALLEL_MIN * self.streams:
            for f in [_pool().submit(fill, k) for k in range(self.streams)]:
                f.result()
        else:
            for k in range(self.streams):
                fill(k)
        return out
