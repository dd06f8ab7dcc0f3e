"""The limit SDE with common noise (SPEC §3) and its integrators.

Itô form, for every token i::

    dX^i = [ P_{X^i} Attn(μ_t, X^i) − κ(1) (d−1)/2 · X^i ] dt + P_{X^i} W(dt, X^i)

The field W is any noise source of :mod:`stochformer.noise` (exact, random features, MLP).
An integrator maps X (batch, N, d), unit rows, to the state one step ``dt`` later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from .attention import Attention
from .noise import NoiseSource
from .sphere import normalize, tangent


@dataclass
class LimitSDE:
    """Drift and diffusion of SPEC §3. ``kappa1`` is κ(1) (noise scale included)."""

    noise: Optional[NoiseSource]
    attention: Optional[Attention]
    kappa1: float
    d: int

    def attention_drift(self, X: torch.Tensor) -> torch.Tensor:
        """P_x Attn(μ, x): (batch, N, d)."""
        if self.attention is None:
            return torch.zeros_like(X)
        return tangent(X, self.attention(X))

    def ito_correction(self, X: torch.Tensor) -> torch.Tensor:
        """−κ(1)(d−1)/2 · x, the Itô drift that keeps |x| = 1."""
        if self.noise is None:
            return torch.zeros_like(X)
        return -0.5 * self.kappa1 * (self.d - 1) * X


@dataclass
class EulerMaruyama:
    """Projected Euler–Maruyama (Itô): X' = LN( X + [P Attn − κ(1)(d−1)/2 X] dt + P ΔW ).

    The projection LN only removes the O(dt) fluctuation of the norm; the Itô correction keeps
    the mean norm at 1 to first order (strong order ½)."""

    sde: LimitSDE
    dt: float

    @property
    def noise(self) -> Optional[NoiseSource]:
        return self.sde.noise

    def step(self, X: torch.Tensor, generator: torch.Generator, dW: Optional[torch.Tensor] = None) -> torch.Tensor:
        drift = self.sde.attention_drift(X) + self.sde.ito_correction(X)
        if dW is None:
            dW = self.sde.noise.increment(X, self.dt, generator) if self.sde.noise is not None else torch.zeros_like(X)
        return normalize(X + self.dt * drift + tangent(X, dW))
