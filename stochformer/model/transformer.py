"""The discrete model: one layer of the deep transformer at random initialisation (SPEC §1).

Post-LN (the default), attention then MLP, the MLP acting on the post-attention token::

    Y  = LN( X + Δt · Attn_X(X) )
    X' = LN( Y + √Δt · s · G^m(Y) )

``parallel``: ``X' = LN( X + Δt · Attn_X(X) + √Δt · s · G^m(X) )``. Either block may be absent.
The √Δt · s factor is applied by the noise source (:mod:`stochformer.noise`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import torch

from .attention import Attention
from .noise import NoiseSource
from ..sphere import normalize


@dataclass
class TransformerLayer:
    """One layer ℓ → ℓ+1 with step ``dt = T/L``; :meth:`step` maps X (batch, N, d) → X'."""

    dt: float
    attention: Optional[Attention] = None
    noise: Optional[NoiseSource] = None
    order: Literal["post_ln", "parallel"] = "post_ln"

    def step(self, X: torch.Tensor, generator: torch.Generator, xi: Optional[torch.Tensor] = None) -> torch.Tensor:
        """One layer; ``xi`` (batch, N, d): normals driving the noise source (couplings, SPEC §3)."""
        kw = {} if xi is None else {"xi": xi}
        if self.order == "parallel":
            update = torch.zeros_like(X)
            if self.attention is not None:
                update = update + self.dt * self.attention(X)
            if self.noise is not None:
                update = update + self.noise.increment(X, self.dt, generator, **kw)
            return normalize(X + update)
        Y = X if self.attention is None else normalize(X + self.dt * self.attention(X))
        return Y if self.noise is None else normalize(Y + self.noise.increment(Y, self.dt, generator, **kw))
