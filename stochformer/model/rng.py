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
- ``ahead``: draw up to this many normals at once and serve the following calls from them, so
  the sampler's threads start once per ``ahead`` normals instead of once per layer (on a CPU the
  hand-over between them and torch's OpenMP threads costs more than the draws of a small layer).
  A refill draws twice the request, and twice the previous refill while the generator is
  untouched (at most ``ahead``), so a short run draws at most about twice what it uses.
  The buffer is served only while the generator is exactly in the state its draw left it in, so
  the numbers stay a function of the seed and the sequence of calls; :meth:`NormalDraws.reset`
  drops it (every run starts with one). A refill writes into the memory of the previous ones
  when nothing served from it is alive (no fresh pages), and in float64 on the parallel backend
  draws at once only the whole requests of the current size that fit; the rest of its pieces is
  drawn, in order, only when served (the same numbers; the tail no request reaches is never drawn).
- :meth:`NormalDraws.pipeline` (float64, parallel backend, CPU): while the current buffer is
  served, the next refill is drawn in the background on ``threads`` threads, for the generator
  state the current refill left (its stream seeds drawn from a copy of the generator). A refill
  takes it when the generator is in that state and the sizes match, and draws afresh otherwise:
  the numbers are those of the foreground refills, whatever the timing; a refill that finds it
  unfinished draws its last pieces itself rather than wait. The run's computations (torch's
  threads, or the lanes' width) then use the other cores (:func:`overlapped`), so drawing and computing overlap
  without oversubscribing the cores (docs/performance.md, "Drawing while computing").
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterator, Literal, Optional

import numpy as np
import torch

RngBackend = Literal["torch", "parallel"]
DrawPrecision = Literal["full", "float32"]

#: below this many normals per stream the pieces are filled serially (thread hand-off costs more)
_PARALLEL_MIN = 1 << 14
#: most normals drawn at once by the CPU noise sources (32 MiB in float64)
DEFAULT_AHEAD = 1 << 22


#: within :func:`~stochformer.model.lanes.laned` (which sets it, and clears it on leaving): the
#: lanes' width, which stands for torch's thread count (held at 1 there) as the number of cores
#: the run may use (:func:`cores`); None outside
CORES: Optional[Callable[[], int]] = None


def cores() -> int:
    """The cores a run computes and draws on: torch's thread count, or the lanes' width."""
    return torch.get_num_threads() if CORES is None else CORES()


@functools.cache
def thread_pool(name: str, workers: int) -> ThreadPoolExecutor:
    """The process-wide pool of ``workers`` threads named ``stochformer-<name>``, made on first use."""
    return ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix=f"stochformer-{name}")


def _pool() -> ThreadPoolExecutor:
    return thread_pool("rng", os.cpu_count() or 1)


def _background() -> ThreadPoolExecutor:
    return thread_pool("rng-ahead", 1)


@contextlib.contextmanager
def overlapped(
    draws: "NormalDraws", threads: int, budget: Optional[int] = None, total: Optional[int] = None,
    set_compute: Optional[Callable[[int], None]] = None,
) -> Iterator[None]:
    """Within: ``draws`` draws each next refill in the background on ``threads`` threads while
    the run computes on the others of ``total`` (default torch's thread count): ``set_compute``
    (default: torch's thread count) is lowered by ``threads``, at least 1, while a background
    refill runs, and given all ``total`` between refills; afterwards both as before. ``threads``
    0: no change."""
    old = total or torch.get_num_threads()
    setter = set_compute or _set_torch_threads
    if threads > 0:
        draws.pipeline(threads, budget, compute_threads=(max(1, old - threads), old), set_compute=setter)
    try:
        yield
    finally:
        if threads > 0:
            draws.pipeline(0)
            setter(old)


def _set_torch_threads(n: int) -> None:
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


def resolve_backend(backend: str, device: torch.device | str) -> RngBackend:
    """``auto`` → ``parallel`` on a CPU, ``torch`` on an accelerator (its own generator is fast)."""
    if backend == "auto":
        return "parallel" if torch.device(device).type == "cpu" else "torch"
    if backend not in ("torch", "parallel"):
        raise ValueError(f"rng: unknown backend {backend!r}; valid: auto, torch, parallel")
    return backend  # type: ignore[return-value]


class _Streams:
    """``len(seeds)`` contiguous pieces of ``out`` (float64, numpy view), piece k the first normals of
    numpy's ziggurat on SFC64(seeds[k]); :meth:`fill` continues each piece in order, so a piece
    filled in several goes holds the same numbers as one filled at once. A piece is filled by one
    thread at a time (its lock), so several threads may fill the same streams."""

    def __init__(self, out: np.ndarray, seeds: list[int]) -> None:
        n, s = len(out), len(seeds)
        self.out, self.edges = out, [(n * k) // s for k in range(s + 1)]
        self.gens = [np.random.Generator(np.random.SFC64(seed)) for seed in seeds]
        self.done = self.edges[:-1]  # piece k is filled on [edges[k], done[k])
        self.locks = [threading.Lock() for _ in seeds]
        self.filled = 0  # every position below is filled

    def _piece(self, k: int, upto: int, wait: bool = True) -> None:
        """Fill piece k below ``upto``; while another thread fills it, wait (then it is done) or skip."""
        if self.done[k] >= min(self.edges[k + 1], upto) or not self.locks[k].acquire(blocking=wait):
            return
        try:
            stop = min(self.edges[k + 1], upto)
            if self.done[k] < stop:
                self.gens[k].standard_normal(out=self.out[self.done[k] : stop])
                self.done[k] = stop
        finally:
            self.locks[k].release()

    def fill(self, upto: int, threads: Optional[int] = None) -> None:
        """Fill every position below ``upto``, the pieces on up to ``threads`` threads (default
        torch's) when that pays."""
        if upto <= self.filled:
            return
        todo = [k for k in range(len(self.gens)) if self.done[k] < min(self.edges[k + 1], upto)]

        def run(group: list[int]) -> None:
            for k in group:
                self._piece(k, upto)

        threads = min(len(todo), cores() if threads is None else threads)
        if threads > 1 and sum(min(self.edges[k + 1], upto) - self.done[k] for k in todo) >= _PARALLEL_MIN * len(self.gens):
            for f in [_pool().submit(run, todo[t::threads]) for t in range(threads)]:
                f.result()
        else:
            run(todo)
        self.filled = upto

    def help(self, upto: int) -> None:
        """Fill, from the last piece back, the pieces below ``upto`` that no other thread is filling
        (a thread that would otherwise wait for them)."""
        for k in reversed(range(len(self.gens))):
            self._piece(k, upto, wait=False)


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
    spare: Optional[torch.Tensor] = None  # the second memory, which the background refill writes into
    spare_users: int = -1
    threads: int = 0  # background threads of :meth:`NormalDraws.pipeline` (0: none)
    budget: Optional[int] = None  # normals the rest of the run will ask for (None: unknown)
    next: Optional["_Next"] = None  # the refill being drawn in the background
    compute_threads: Optional[tuple[int, int]] = None  # the run's threads while it runs, and after
    set_compute: Callable[[int], None] = _set_torch_threads  # how they are set


@dataclass
class _Next:
    """A refill drawn in the background for the generator ``state`` and requests of ``n``."""

    state: torch.Tensor
    size: int
    n: int
    upto: int
    z: torch.Tensor
    streams: _Streams
    done: Future


def _storage_users(t: torch.Tensor) -> int:
    """How many tensors share ``t``'s storage (−1 where torch does not say: never reused then)."""
    count = getattr(torch._C, "_storage_Use_Count", None)
    return -1 if count is None else int(count(t.untyped_storage()._cdata))


@dataclass(frozen=True)
class NormalDraws:
    """A sampler of flat i.i.d. N(0, 1) buffers (see the module docstring)."""

    backend: RngBackend = "torch"
    precision: DrawPrecision = "full"
    streams: int = 4
    ahead: int = 0
    _buffer: _Buffer = field(default_factory=_Buffer, repr=False, compare=False)

    def reset(self) -> None:
        """Drop the normals drawn ahead (waiting for a background refill to finish)."""
        self._drop_next()
        self._buffer.z = self._buffer.generator = self._buffer.state = self._buffer.streams = None
        self._buffer.size = 0

    def pipeline(
        self, threads: int, budget: Optional[int] = None, compute_threads: Optional[tuple[int, int]] = None,
        set_compute: Callable[[int], None] = _set_torch_threads,
    ) -> None:
        """Draw each next refill in the background on ``threads`` threads (0: stop), for runs
        that will ask for ``budget`` more normals in all (None: unknown; a background refill
        draws no more of them than that). Only float64 on the parallel backend on a CPU.
        ``compute_threads`` (busy, idle): after serving a request, ``set_compute`` (default torch's
        thread count) ``busy`` while a background refill runs and ``idle`` once it is done (None:
        leave it)."""
        self._drop_next()
        self._buffer.threads, self._buffer.budget = max(0, threads), budget
        self._buffer.compute_threads = compute_threads if threads > 0 else None
        self._buffer.set_compute = set_compute

    def _drop_next(self) -> None:
        nxt, self._buffer.next = self._buffer.next, None
        if nxt is not None:
            nxt.done.result()  # its memory must not be written to once it is handed back

    def __call__(self, n: int, generator: torch.Generator, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
        """``n`` normals, shape (n,), in ``dtype`` on ``device`` (a read-only view when served
        from the buffer drawn ahead)."""
        if n >= self.ahead:
            return self._draw(n, generator, dtype, device)
        b = self._buffer
        untouched = (
            b.z is not None and b.z.dtype == dtype and b.z.device == torch.device(device)
            and b.generator is generator and torch.equal(generator.get_state(), b.state)
        )
        if not (untouched and b.pos + n <= b.z.numel()):
            b.size = min(self.ahead, max(2 * b.size if untouched else 0, 2 * n))
            b.z = b.streams = None  # drop the served buffer's own views before asking whether its memory is free
            self._refill(b.size, n, generator, dtype, device)
        b.pos += n
        if b.budget is not None:
            b.budget -= n
        if b.streams is not None:
            b.streams.fill(b.pos)
        if b.compute_threads is not None:  # the cores the background refill leaves to the run
            b.set_compute(b.compute_threads[0 if b.next is not None and not b.next.done.done() else 1])
        return b.z[b.pos - n : b.pos]

    def _refill(self, size: int, n: int, generator: torch.Generator, dtype: torch.dtype, device: torch.device | str) -> None:
        """Draw the buffer of ``size`` normals for requests of about ``n``. In float64 on the
        parallel backend only the whole requests of ``n`` that fit are drawn now (in parallel); the
        rest is drawn, in order, only if it is served: the numbers are those of drawing it all at
        once, and the tail a run never reaches (up to a request's size at every refill, and the
        end of the last buffer) is never drawn."""
        b = self._buffer
        streamed = self.backend == "parallel" and self.precision == "full" and dtype == torch.float64 and torch.device(device).type == "cpu"
        nxt, b.next = b.next, None
        take = streamed and nxt is not None and (nxt.size, nxt.n) == (size, n) and torch.equal(nxt.state, generator.get_state())
        if nxt is not None:
            if take:  # rather than wait for the background thread, draw its last pieces here
                nxt.streams.help(nxt.upto)
            nxt.done.result()
        if take:
            assert nxt is not None
            self._seeds(generator)  # the seeds the background refill drew from a copy of the generator
            b.z, b.streams = nxt.z, nxt.streams
            b.memory, b.users, b.spare, b.spare_users = b.spare, b.spare_users, b.memory, b.users
        elif streamed:
            out = self._free_memory(size, dtype, device)
            b.z = out if out is not None else torch.empty(size, dtype=dtype)
            b.streams = _Streams(b.z.numpy(), self._seeds(generator))
            b.streams.fill(size // n * n if n else 0)
        else:
            b.z = self._draw(size, generator, dtype, device, self._free_memory(size, dtype, device))
        b.pos, b.generator, b.state = 0, generator, generator.get_state()
        if streamed and b.threads and n and (b.budget is None or b.budget > size):
            self._draw_next(min(self.ahead, max(2 * size, 2 * n)), n, generator)

    def _draw_next(self, size: int, n: int, generator: torch.Generator) -> None:
        """Start drawing, in the background, the refill that follows the current one while the
        generator stays untouched: its seeds from a copy of the generator; into the spare memory
        when nothing served from it is alive; only its whole requests of ``n`` that the run's
        budget still covers (the rest is drawn on demand, in order, like any refill's tail)."""
        b = self._buffer
        twin = torch.Generator(device=generator.device)
        twin.set_state(b.state)
        b.spare, b.spare_users = self._reuse(b.spare, b.spare_users, size, torch.float64, "cpu")
        z = b.spare[:size] if b.spare_users >= 0 else torch.empty(size, dtype=torch.float64)
        streams = _Streams(z.numpy(), self._seeds(twin))
        upto = size // n * n
        if b.budget is not None:  # less what the current buffer still serves
            upto = min(upto, max(0, b.budget - (b.z.numel() - b.pos) // n * n))
        done = _background().submit(streams.fill, upto, b.threads)
        b.next = _Next(b.state, size, n, upto, z, streams, done)

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

        if min(self.streams, cores()) > 1 and n >= _PARALLEL_MIN * self.streams:
            for f in [_pool().submit(fill, k) for k in range(self.streams)]:
                f.result()
        else:
            for k in range(self.streams):
                fill(k)
        return out
