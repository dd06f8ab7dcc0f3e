"""Standard normal draws for the noise sources: torch's generator or parallel streams.

Drawing Gaussians dominates the cost of the discrete transformer on a CPU (see
``docs/benchmarks.md``). [`NormalDraws`][stochformer.model.rng.NormalDraws] fills a flat buffer of ``n`` i.i.d. N(0, 1) numbers:

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
- ``ahead``: draw up to this many normals at once and serve the following calls from them, so
  the sampler's threads start once per ``ahead`` normals instead of once per layer (on a CPU the
  hand-over between them and torch's OpenMP threads costs more than the draws of a small layer).
  A refill draws twice the request, and twice the previous refill while the generator is
  untouched (at most ``ahead``), so a short run draws at most about twice what it uses.
  The buffer is served only while the generator is exactly in the state its draw left it in, so
  the numbers stay a function of the seed and the sequence of calls; [`NormalDraws.reset`][stochformer.model.rng.NormalDraws.reset]
  drops it (every run starts with one). A refill writes into the memory of the previous ones
  when nothing served from it is alive (no fresh pages), and in float64 on the parallel backend
  draws at once only the whole requests of the current size that fit; the rest of its pieces is
  drawn, in order, only when served (the same numbers; the tail no request reaches is never drawn).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

import numpy as np
import torch

from ..core.runtime import thread_pool

RngBackend = Literal["torch", "parallel"]
DrawPrecision = Literal["full", "float32"]

#: below this many normals per stream the pieces are filled serially (thread hand-off costs more)
_PARALLEL_MIN = 1 << 14
#: most normals drawn at once by the CPU noise sources (32 MiB in float64)
DEFAULT_AHEAD = 1 << 22


def resolve_backend(backend: str, device: torch.device | str) -> RngBackend:
    """``auto`` → ``parallel`` on a CPU, ``torch`` on an accelerator (its own generator is fast).

    Parameters
    ----------
    backend : {"auto", "torch", "parallel"}
        The requested backend.
    device : str or torch.device
        Where the draws are used.

    Returns
    -------
    str
        ``"torch"`` or ``"parallel"``.
    """
    if backend == "auto":
        return "parallel" if torch.device(device).type == "cpu" else "torch"
    if backend not in ("torch", "parallel"):
        raise ValueError(f"rng: unknown backend {backend!r}; valid: auto, torch, parallel")
    return backend  # type: ignore[return-value]


class _Streams:
    """``len(seeds)`` contiguous pieces of ``out`` (float64, numpy view), piece k the first normals of
    numpy's ziggurat on SFC64(seeds[k]); `fill` continues each piece in order, so a piece
    filled in several goes holds the same numbers as one filled at once; each piece is filled by
    one thread."""

    def __init__(self, out: np.ndarray, seeds: list[int]) -> None:
        n, s = len(out), len(seeds)
        self.out, self.edges = out, [(n * k) // s for k in range(s + 1)]
        self.gens = [np.random.Generator(np.random.SFC64(seed)) for seed in seeds]
        self.done = self.edges[:-1]  # piece k is filled on [edges[k], done[k])
        self.filled = 0  # every position below is filled

    def _piece(self, k: int, upto: int) -> None:
        """Fill piece k below ``upto``."""
        stop = min(self.edges[k + 1], upto)
        if self.done[k] < stop:
            self.gens[k].standard_normal(out=self.out[self.done[k] : stop])
            self.done[k] = stop

    def fill(self, upto: int) -> None:
        """Fill every position below ``upto``, the pieces on up to torch's thread count of threads
        when that pays."""
        if upto <= self.filled:
            return
        todo = [k for k in range(len(self.gens)) if self.done[k] < min(self.edges[k + 1], upto)]

        def run(group: list[int]) -> None:
            for k in group:
                self._piece(k, upto)

        threads = min(len(todo), torch.get_num_threads())
        if threads > 1 and sum(min(self.edges[k + 1], upto) - self.done[k] for k in todo) >= _PARALLEL_MIN * len(self.gens):
            for f in [thread_pool().submit(run, todo[t::threads]) for t in range(threads)]:
                f.result()
        else:
            run(todo)
        self.filled = upto


@dataclass
class _Buffer:
    z: Optional[torch.Tensor] = None  # normals drawn ahead; z[pos:] not served yet
    pos: int = 0
    generator: Optional[torch.Generator] = None
    state: Optional[torch.Tensor] = None  # the generator's state right after z was drawn
    size: int = 0  # normals drawn by the last refill since the last reset
    memory: Optional[torch.Tensor] = None  # the storage z lives in, kept across refills and resets
    users: int = -1  # its storage's use count when nothing served from it is alive
    streams: Optional[_Streams] = None  # z's pieces when they are filled on demand (float64 parallel)


def _storage_users(t: torch.Tensor) -> int:
    """How many tensors share ``t``'s storage (−1 where torch does not say: never reused then)."""
    count = getattr(torch._C, "_storage_Use_Count", None)
    return -1 if count is None else int(count(t.untyped_storage()._cdata))


@dataclass(frozen=True)
class NormalDraws:
    """A sampler of flat i.i.d. N(0, 1) buffers (see the module docstring).

    Parameters
    ----------
    backend : {"torch", "parallel"}, optional
        The sampler.
    precision : {"full", "float32"}, optional
        The draws' precision.
    streams : int, optional
        Parallel streams of the ``parallel`` backend.
    ahead : int, optional
        Draw up to this many normals at once and serve the following calls from them (0: per call).
    """

    backend: RngBackend = "torch"
    precision: DrawPrecision = "full"
    streams: int = 4
    ahead: int = 0
    _buffer: _Buffer = field(default_factory=_Buffer, repr=False, compare=False)

    def reset(self) -> None:
        """Drop the normals drawn ahead."""
        self._buffer.z = self._buffer.generator = self._buffer.state = self._buffer.streams = None
        self._buffer.size = 0

    def __call__(self, n: int, generator: torch.Generator, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
        """``n`` normals, shape (n,), in ``dtype`` on ``device`` (a read-only view when served
        from the buffer drawn ahead)."""
        if n >= self.ahead:
            return self._draw(n, generator, dtype, device)
        b = self._buffer
        untouched = (
            b.z is not None and b.z.dtype == dtype and b.z.device == torch.device(device)
            and b.generator is generator and b.state is not None and torch.equal(generator.get_state(), b.state)
        )
        if not (untouched and b.z is not None and b.pos + n <= b.z.numel()):
            b.size = min(self.ahead, max(2 * b.size if untouched else 0, 2 * n))
            b.z = b.streams = None  # drop the served buffer's own views before asking whether its memory is free
            self._refill(b.size, n, generator, dtype, device)
        b.pos += n
        if b.streams is not None:
            b.streams.fill(b.pos)
        assert b.z is not None, "NormalDraws: _refill sets the buffer"
        return b.z[b.pos - n : b.pos]

    def _refill(self, size: int, n: int, generator: torch.Generator, dtype: torch.dtype, device: torch.device | str) -> None:
        """Draw the buffer of ``size`` normals for requests of about ``n``. In float64 on the
        parallel backend only the whole requests of ``n`` that fit are drawn now (in parallel); the
        rest is drawn, in order, only if it is served: the numbers are those of drawing it all at
        once, and the tail a run never reaches (up to a request's size at every refill, and the
        end of the last buffer) is never drawn."""
        b = self._buffer
        streamed = self.backend == "parallel" and self.precision == "full" and dtype == torch.float64 and torch.device(device).type == "cpu"
        if streamed:
            out = self._free_memory(size, dtype, device)
            b.z = out if out is not None else torch.empty(size, dtype=dtype)
            b.streams = _Streams(b.z.numpy(), self._seeds(generator))
            b.streams.fill(size // n * n if n else 0)
        else:
            b.z = self._draw(size, generator, dtype, device, self._free_memory(size, dtype, device))
        b.pos, b.generator, b.state = 0, generator, generator.get_state()

    def _free_memory(self, n: int, dtype: torch.dtype, device: torch.device | str) -> Optional[torch.Tensor]:
        """``n`` entries of memory for a refill: those of the previous refills when nothing served
        from them is alive any more, so that a refill touches no fresh pages (their first touch,
        page faults, took about 40% of the sampler's time on a CPU); None where torch cannot say."""
        b = self._buffer
        b.memory, b.users = self._reuse(b.memory, b.users, n, dtype, device)
        return b.memory[:n] if b.users >= 0 else None

    def _reuse(self, memory: Optional[torch.Tensor], users: int, n: int, dtype: torch.dtype, device: torch.device | str) -> tuple[torch.Tensor, int]:
        """``memory`` and its use count when it holds ``n`` entries of ``dtype`` on ``device`` and
        nothing served from it is alive (its use count is still ``users``); else fresh memory."""
        if memory is None or memory.numel() < n or memory.dtype != dtype or memory.device != torch.device(device) \
                or _storage_users(memory) != users:
            memory = torch.empty(max(n, self.ahead), dtype=dtype, device=device)  # pages are touched only when used
            users = _storage_users(memory)
        return memory, users

    def _draw(
        self, n: int, generator: torch.Generator, dtype: torch.dtype, device: torch.device | str, out: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """``n`` fresh normals, shape (n,), in ``dtype`` on ``device``; written into ``out`` when given."""
        draw_dtype = torch.float32 if self.precision == "float32" else dtype
        into = out if draw_dtype == dtype else None
        if self.backend == "torch":
            z = torch.randn(n, generator=generator, dtype=draw_dtype, device=device, out=into)
        elif torch.device(device).type == "cpu":
            z = self._parallel(n, generator, draw_dtype, into)
        else:
            z = self._parallel(n, generator, draw_dtype).to(device)
        if out is not None and z is not out:
            return out.copy_(z)
        return z if z.dtype == dtype else z.to(dtype)

    def _seeds(self, generator: torch.Generator) -> list[int]:
        return torch.randint(0, 2**63 - 1, (self.streams,), generator=generator, device=generator.device).tolist()

    def _parallel(self, n: int, generator: torch.Generator, dtype: torch.dtype, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        if dtype not in (torch.float64, torch.float32):
            raise ValueError(f"rng: the parallel backend draws float64 or float32, not {dtype}")
        seeds = self._seeds(generator)
        out = torch.empty(n, dtype=dtype) if out is None else out
        if dtype == torch.float64:
            _Streams(out.numpy(), seeds).fill(n)
            return out
        edges = [(n * k) // self.streams for k in range(self.streams + 1)]

        def fill(k: int) -> None:
            out[edges[k] : edges[k + 1]].normal_(generator=torch.Generator().manual_seed(seeds[k]))

        if min(self.streams, torch.get_num_threads()) > 1 and n >= _PARALLEL_MIN * self.streams:
            for f in [thread_pool().submit(fill, k) for k in range(self.streams)]:
                f.result()
        else:
            for k in range(self.streams):
                fill(k)
        return out
