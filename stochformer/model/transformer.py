"""The discrete model: one layer of the deep transformer at random initialisation (SPEC §1).

Post-LN (the default), attention then MLP, the MLP acting on the post-attention token::

    Y  = LN( X + Δt · Attn_X(X) )
    X' = LN( Y + √Δt · s · G^m(Y) )

``parallel``: ``X' = LN( X + Δt · Attn_X(X) + √Δt · s · G^m(X) )``. Either block may be absent.
The √Δt · s factor is applied by the noise source (:mod:`stochformer.model.noise`); the MLP may be
any noise source (``ExactField`` is the width m = ∞).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Annotated, Callable, Iterator, Literal, Optional

import torch

from ..core.brownian import as_draws
from ..core.sphere import normalize
from ..core.validation import Methods, check_fits, first_output, validated
from . import blas
from .attention import Attention, SoftmaxAttention, start_run
from .lanes import Lanes, laned
from .noise import NeedsDraws, NoiseSource, RandomMLP, Randomness


#: matrix-product flops of a layer that make one lane's share (a layer of less than two shares is
#: not laned): the break-even measured on 2 cores lay between 13 and 57 MFLOP per layer, counted
#: then at 2nkp for every product (the 57, the benchmark's first size, is 39 as counted now;
#: docs/performance.md, "Lanes")
LANE_WORK = float(1 << 24)


@validated
@dataclass
class Transformer:
    """The layer map X_ℓ → X_{ℓ+1} with step Δt = T/L: :meth:`step` maps X (batch, N, d), unit
    rows, to X'. ``attention``: any :class:`~stochformer.model.attention.Attention` (None: no
    attention); ``noise``: any :class:`~stochformer.model.noise.NoiseSource` (None: no MLP)."""

    attention: Optional[Attention] = None
    noise: Optional[Annotated[NoiseSource, Methods(("reset", "increment"))]] = None
    order: Literal["post_ln", "parallel"] = "post_ln"
    _lanes: Optional[Lanes] = field(default=None, init=False, repr=False, compare=False)
    _lanes_at: Optional[tuple] = field(default=None, init=False, repr=False, compare=False)
    _checked: set = field(default_factory=set, init=False, repr=False, compare=False)

    def reset(self, batch: int, d: int, generator: torch.Generator, dtype: torch.dtype, device) -> None:
        """Start of a run: the parts are checked against the tokens (d, dtype, device), and the
        noise source draws its per-run state."""
        self._checked.clear()
        check_fits("attention", self.attention, d, dtype, device)
        start_run(self.attention, batch, d, generator, dtype, device)
        check_fits("noise", self.noise, d, dtype, device)
        if self.noise is not None:
            self.noise.reset(batch, d, generator, dtype, device)

    def schedule(self, X: torch.Tensor, steps: int) -> contextlib.AbstractContextManager:
        """How a run of ``steps`` layers from X uses the CPU cores: lanes on all of torch's threads
        where they apply (:meth:`laneable`), and the MLP's schedule (e.g. drawing while
        computing); the same numbers."""
        if self.laneable(X) and torch.get_num_threads() >= 2:
            return self._laned(X, steps)
        schedule = getattr(self.noise, "schedule", None)
        return contextlib.nullcontext() if schedule is None else schedule(X, steps)

    def laneable(self, X: torch.Tensor) -> bool:
        """Whether the layer at X computes its samples in lanes (:mod:`~stochformer.model.lanes`,
        with the per-matrix products of :mod:`~stochformer.model.blas`): on a CPU in float32 or
        float64, with the exact Gaussian MLP and dense softmax attention (or none), every product
        small, and at least two lanes' worth of product flops in the layer, :data:`LANE_WORK`
        each. Sizes only, never threads, decide it: the same numbers on any number of threads."""
        return self._most_lanes(X) >= 2

    def _most_lanes(self, X: torch.Tensor) -> int:
        """How many lanes the layer at X may use (its product flops over :data:`LANE_WORK`; 0
        where it is not laned); kept for the last shape asked."""
        key = (tuple(X.shape), X.dtype, X.device)
        if self._lanes_at is None or self._lanes_at[0] != key:
            B, N, d = X.shape
            mlp, att = self.noise, self.attention
            most = 0
            if (
                X.device.type == "cpu" and X.dtype in (torch.float32, torch.float64) and B >= 2
                and isinstance(mlp, RandomMLP) and mlp.mode == "gaussian"
                and (att is None or (type(att) is SoftmaxAttention and not att.sdpa and (att.chunk is None or att.chunk >= N)))
                and blas.small((N, max(N, d), mlp.width), (N, d, N))
            ):
                flops = mlp.cost(N, d, X.device, X.dtype)["flops"] + (0.0 if att is None else att.flops(N, d))
                most = min(B, int(B * flops // LANE_WORK))
            self._lanes_at = (key, most)
        return self._lanes_at[1]

    @contextlib.contextmanager
    def _laned(self, X: torch.Tensor, steps: int) -> Iterator[None]:
        cores = torch.get_num_threads()
        with laned(cores) as lanes, self.noise.schedule(X, steps, cores, lanes.set_width):  # type: ignore[union-attr]
            self._lanes = lanes
            try:
                yield
            finally:
                self._lanes = None

    def step(self, X: torch.Tensor, dt: float, rng: Randomness) -> torch.Tensor:
        """One layer; ``rng``: the step's :class:`~stochformer.core.brownian.Draws` (or a generator)."""
        draws = as_draws(rng)
        if not draws.coupled and self.laneable(X):
            return self._step_in_lanes(X, dt, draws.generator)
        return self.layer(X, dt, None if self.noise is None else self._increment(dt, rng))

    def _increment(self, dt: float, rng: Randomness) -> Callable[[torch.Tensor], torch.Tensor]:
        mlp = self.noise
        return lambda Y: first_output(self._checked, "mlp", mlp, mlp.increment(Y, dt, rng), Y)  # type: ignore[union-attr]

    def _attend(self, X: torch.Tensor) -> torch.Tensor:
        return first_output(self._checked, "attention", self.attention, self.attention(X), X)  # type: ignore[misc]

    def mlp_input(self, X: torch.Tensor, dt: float) -> torch.Tensor:
        """Where the layer's MLP acts, (batch, N, d): Y = LN(X + Δt · Attn_X(X)) post-LN, X itself
        in the parallel order."""
        if self.order == "parallel" or self.attention is None:
            return X
        return normalize(X + dt * self._attend(X))

    def layer(self, X: torch.Tensor, dt: float, increment: Optional[Callable[[torch.Tensor], torch.Tensor]]) -> torch.Tensor:
        """The layer map with a given MLP increment: ``increment(Y)`` (batch, N, d) is the term
        √Δt · s · G^m(Y) at the MLP's input Y (:meth:`mlp_input`); None: no MLP."""
        if self.order == "parallel":
            update = torch.zeros_like(X)
            if self.attention is not None:
                update = update + dt * self._attend(X)
            if increment is not None:
                update = update + increment(X)
            return normalize(X + update)
        Y = self.mlp_input(X, dt)
        return Y if increment is None else normalize(Y + increment(Y))

    def _step_in_lanes(self, X: torch.Tensor, dt: float, generator: torch.Generator) -> torch.Tensor:
        """The layer with the MLP's normals drawn first, then each lane's samples through it, each
        lane with :data:`LANE_WORK` at least.
        A sample that needs more normals (numerically singular Gram matrices) sends the whole
        layer through the calling thread, which draws them in order: the same numbers either way."""
        mlp: RandomMLP = self.noise  # type: ignore[assignment]
        z = mlp.normals(X, generator)
        work = mlp.workspace(X)
        out = torch.empty_like(X)

        def part(a: int, b: int) -> None:
            out[a:b] = self.layer(X[a:b], dt, lambda Y: mlp.apply(Y, dt, z.samples(a, b), None, work[a:b]))

        # outside a laned run (a step taken by hand), lanes on torch's threads for this layer;
        # either way the products go through numpy (laned() holds blas.per_matrix)
        with contextlib.nullcontext(self._lanes) if self._lanes is not None else laned() as lanes:
            try:
                lanes.run(part, X.shape[0], self._most_lanes(X))
            except NeedsDraws:
                return self.layer(X, dt, lambda Y: mlp.apply(Y, dt, z, generator, work))
        return out
