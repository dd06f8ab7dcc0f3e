"""Steps replayed as one captured graph: CUDA graphs on a GPU, the same capture traced on a CPU.

On a GPU a layer of the discrete model at small sizes is a few dozen kernels of a few µs each, so
the time of a run is set by their launches, not by the work (docs/benchmarks.md).
[`Captured`][stochformer.core.capture.Captured] records a function of some steps once and replays
it: on CUDA as a `torch.cuda.CUDAGraph` (one launch for all its kernels; the run's generator is
registered with the graph, so every replay draws fresh numbers, as the steps would), on a CPU as
the graph of torch operations that ``torch.fx``'s ``make_fx`` records from one call. Both captures
have the same semantics, which is what the CPU one is for: a region that cannot be captured on
the GPU fails to trace on the CPU in the same way, and the CPU replay's numbers can be compared with
the uncaptured steps' (tests/test_capture.py).

- No host synchronisation inside the region: a branch that asks a tensor for its value (``bool(t)``,
  ``t.item()``) cannot be captured. A part whose rare branch depends on the data (a Cholesky factor
  that failed, a non-finite state) calls [`deferred`][stochformer.core.capture.deferred]: inside a
  capture the condition is recorded as a device flag and the common branch is taken; the caller
  reads the flag now and then (``solve``: at each record) and, when it is set, runs the steps since
  its last read again, uncaptured (so the numbers are those of the uncaptured steps whenever the
  rare branch is taken).
- Python runs once, at the capture: what a part decides in Python (a buffer served, a seed drawn
  on the host, a thread pool) is frozen into the graph. Parts state that they hold no such state
  with ``capture_safe`` ([`unsafe_parts`][stochformer.core.capture.unsafe_parts]); anything else
  is refused before any work.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Any, Callable, Iterator, Optional

import torch

_FLAGS: ContextVar[Optional[list[torch.Tensor]]] = ContextVar("stochformer_deferred", default=None)


def deferred(condition: torch.Tensor) -> bool:
    """Whether a data-dependent branch is deferred here: inside a capture, ``condition.any()`` is
    recorded (the caller reruns the region uncaptured if it is true) and True is returned, so the
    caller takes its common branch without asking the device; outside a capture, False (the caller
    decides on the host as usual).

    Parameters
    ----------
    condition : torch.Tensor
        A boolean tensor: the branch is taken where any entry is True.

    Returns
    -------
    bool
        True inside a capture.
    """
    flags = _FLAGS.get()
    if flags is None:
        return False
    flags.append(condition.any())
    return True


@contextlib.contextmanager
def deferring() -> Iterator[list[torch.Tensor]]:
    """The region in which [`deferred`][stochformer.core.capture.deferred] records its conditions.

    Returns
    -------
    contextlib.AbstractContextManager of list of torch.Tensor
        Yields the list the conditions (0-d bool tensors) are appended to.
    """
    flags: list[torch.Tensor] = []
    token = _FLAGS.set(flags)
    try:
        yield flags
    finally:
        _FLAGS.reset(token)


def unsafe_parts(model: Any, prefix: str = "model") -> list[str]:
    """The parts of ``model`` that do not state ``capture_safe`` (their steps hold no Python state
    that changes from step to step, and no host synchronisation outside
    [`deferred`][stochformer.core.capture.deferred]). A model states it for itself through its own
    ``capture_safe``; the parts of stochformer's Transformer are its ``attention`` and ``noise``.

    Parameters
    ----------
    model : Any
        The model.
    prefix : str, optional
        Its name in the messages.

    Returns
    -------
    list of str
        Dotted names of the unsafe parts, with their class (empty: capturable).
    """
    if getattr(model, "capture_safe", False):
        return []
    parts = getattr(model, "capture_parts", None)
    if parts is None:
        return [f"{prefix} ({type(model).__name__})"]
    return [name for key, part in parts().items() if part is not None for name in unsafe_parts(part, f"{prefix}.{key}")]


class CaptureError(ValueError):
    """The steps of a run could not be captured (a part asked the device for a value mid-step)."""


class Captured:
    """``fn(state, flag)`` captured once and replayed in place: ``fn`` reads the state tensor, writes
    the state some steps later into it and ors the region's deferred conditions into ``flag`` (a
    0-d bool tensor); [`replay`][stochformer.core.capture.Captured.replay] runs it again on
    whatever the state and flag hold then.

    On CUDA, a `torch.cuda.CUDAGraph` captured on a side stream with ``generator`` registered (each
    replay moves the generator on as the captured draws would), in its own memory pool. On a
    CPU, the graph of aten operations of one call, recorded by ``make_fx`` (that call runs: the
    state and the generator are put back as they were before it, so the capture itself moves
    nothing, as on CUDA).

    Parameters
    ----------
    fn : callable
        ``fn(state, flag) -> None``, in place.
    state : torch.Tensor
        The state the region reads and writes (its memory is the graph's input and output).
    flag : torch.Tensor
        0-d bool, the region's deferred conditions.
    generator : torch.Generator
        The generator the region draws from.
    """

    def __init__(self, fn: Callable[[torch.Tensor, torch.Tensor], None], state: torch.Tensor, flag: torch.Tensor,
                 generator: torch.Generator) -> None:
        saved, before = (state.clone(), flag.clone()), generator.get_state()
        try:
            if state.is_cuda:
                graph = torch.cuda.CUDAGraph()
                graph.register_generator_state(generator)
                with torch.cuda.graph(graph):  # on its own side stream: records the kernels, runs none
                    fn(state, flag)
                self._run: Callable[[], Any] = graph.replay
            else:
                from torch.fx.experimental.proxy_tensor import make_fx

                traced = make_fx(fn)(state, flag)  # on real tensors (its default): runs the call it records
                self._run = lambda: traced(state, flag)
        except RuntimeError as exc:  # a host synchronisation (or another uncapturable call) in a part
            raise CaptureError(f"capture: the steps could not be captured ({str(exc).splitlines()[0][:200]}); a part "
                               "that states capture_safe asks the device for a value or leaves torch; give "
                               "capture=False") from exc
        finally:
            state.copy_(saved[0])  # the capture moves neither the state, the flag nor the generator
            flag.copy_(saved[1])
            generator.set_state(before)

    def replay(self) -> None:
        """Run the captured region on the current state and flag, in place (on CUDA without waiting
        for the device: the caller reads the flag when it needs it)."""
        self._run()
