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
from dataclasses import dataclass
from typing import Literal, Optional

import torch

from ..sphere import normalize
from .attention import Attention
from .noise import NoiseSource, Randomness


@dataclass
class Transformer:
    """The layer map X_ℓ → X_{ℓ+1} with step Δt = T/L: :meth:`step` maps X (batch, N, d), unit
    rows, to X'. ``attention``: any :class:`~stochformer.model.attention.Attention` (None: no
    attention); ``mlp``: any :class:`~stochformer.model.noise.NoiseSource` (None: no MLP)."""

    attention: Optional[Attention] = None
    mlp: Optional[NoiseSource] = None
    order: Literal["post_ln", "parallel"] = "post_ln"

    def reset(self, batch: int, d: int, generator: torch.Generator, dtype: torch.dtype, device) -> None:
        """Start of a run: the noise source draws its per-run state."""
        if self.mlp is not None:
            self.mlp.reset(batch, d, generator, dtype, device)

    def schedule(self, X: torch.Tensor, steps: int) -> contextlib.AbstractContextManager:
        """How a run of ``steps`` layers from X uses the CPU cores: the MLP's
        (:meth:`~stochformer.model.noise.RandomMLP.schedule`), if it has one."""
        schedule = getattr(self.mlp, "schedule", None)
        return contextlib.nullcontext() if schedule is None else schedule(X, steps)

    def step(self, X: torch.Tensor, dt: float, rng: Randomness) -> torch.Tensor:
        """One layer; ``rng``: the step's :class:`~stochformer.brownian.Draws` (or a generator)."""
        if self.order == "parallel":
            update = torch.zeros_like(X)
            if self.attention is not None:
                update = update + dt * self.attention(X)
            if self.mlp is not None:
                update = update + self.mlp.increment(X, dt, rng)
            return normalize(X + update)
        Y = X if self.attention is None else normalize(X + dt * self.attention(X))
        return Y if self.mlp is None else normalize(Y + self.mlp.increment(Y, dt, rng))
