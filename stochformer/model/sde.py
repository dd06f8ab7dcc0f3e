"""The limit SDE with common noise (SPEC §3) and its integrators.

Itô form, for every token i::

    dX^i = [ P_{X^i} Attn(μ_t, X^i) − κ(1) (d−1)/2 · X^i ] dt + P_{X^i} W(dt, X^i)

The field W is any noise source of :mod:`stochformer.noise` (exact, random features, MLP).
An integrator maps X (batch, N, d), unit rows, to the state one step ``dt`` later; ``step`` takes
optional normals ``xi`` (batch, N, d) that drive the field (couplings, strong-order studies).

Integrators (``RunConfig.integrator``):

- ``euler``: projected Euler–Maruyama, Itô, with the correction term (strong order ½).
- ``heun`` (default): projected Stratonovich Heun. Strong order ½ as well — the noise is not
  commutative (tangent fields on the sphere do not commute) and no scheme that uses only
  increments does better without Lévy areas — but with a smaller error constant (about 0.75× the
  Euler error at equal step, measured in ``docs/convergence.md``) and second order in the drift.

:func:`aggregate_normals` and :func:`integrate` give one Brownian path at several step sizes
(dyadic refinement) for strong-order measurements.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Optional

import torch

from .attention import Attention
from .noise import NoiseSource
from ..sphere import normalize, tangent


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

    def increment(self, X: torch.Tensor, dt: float, generator: torch.Generator, xi: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The field increment at X (before projection); ``xi`` drives it when given (noise sources
        that take normals: the exact field, the conditionally Gaussian MLP)."""
        if self.noise is None:
            return torch.zeros_like(X)
        if xi is None:
            return self.noise.increment(X, dt, generator)
        return self.noise.increment(X, dt, generator, xi=xi)


@dataclass
class _Scheme:
    """An integrator of ``sde`` with step ``dt``; ``step(X, generator, dW=None, xi=None)``."""

    sde: LimitSDE
    dt: float

    @property
    def noise(self) -> Optional[NoiseSource]:
        return self.sde.noise


@dataclass
class EulerMaruyama(_Scheme):
    """Projected Euler–Maruyama (Itô): X' = LN( X + [P Attn − κ(1)(d−1)/2 X] dt + P ΔW ).

    The projection LN only removes the O(dt) fluctuation of the norm; the Itô correction keeps
    the mean norm at 1 to first order (strong order ½)."""

    def step(
        self, X: torch.Tensor, generator: torch.Generator, dW: Optional[torch.Tensor] = None, xi: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """One step; ``dW`` (batch, N, d): a given field increment, or ``xi``: the normals driving it."""
        drift = self.sde.attention_drift(X) + self.sde.ito_correction(X)
        if dW is None:
            dW = self.sde.increment(X, self.dt, generator, xi)
        return normalize(X + self.dt * drift + tangent(X, dW))


@dataclass
class StratonovichHeun(_Scheme):
    """Projected Heun for the Stratonovich form dX = P Attn dt + P ∘ W(dt, X) (SPEC §3)::

        ΔW = W(t+dt, X) − W(t, X)                      (one field evaluation, at X)
        X̃  = LN( X + dt · P_X Attn(X) + P_X ΔW )
        X' = LN( X + dt/2 · (P_X Attn(X) + P_X̃ Attn(X̃)) + ½ (P_X + P_X̃) ΔW )

    The field increment is held fixed over the step and only the projection is averaged. This is
    consistent with the Itô SDE: ½ (P_X + P_X̃) ΔW has mean −κ(1)(d−1)/2 · X dt (the Itô correction),
    while the field's own Stratonovich correction is radial and removed by P (SPEC §3). Re-rooting
    K at X̃ with the same normals would not be: the symmetric root rotates its frame with X, which
    adds a spurious drift (measured: its fine-step limit differs from Euler's by ~6× the
    discretisation error). The final LN only removes an O(dt^{3/2}) radial residue."""

    def step(
        self, X: torch.Tensor, generator: torch.Generator, dW: Optional[torch.Tensor] = None, xi: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """One step; ``dW`` (batch, N, d): a given field increment, or ``xi``: the normals driving it."""
        if dW is None:
            dW = self.sde.increment(X, self.dt, generator, xi)
        a = self.sde.attention_drift(X)
        Xp = normalize(X + self.dt * a + tangent(X, dW))
        drift = a if self.sde.attention is None else 0.5 * (a + self.sde.attention_drift(Xp))
        return normalize(X + self.dt * drift + 0.5 * (tangent(X, dW) + tangent(Xp, dW)))


#: the integrators by their ``RunConfig.integrator`` name
INTEGRATORS = {"euler": EulerMaruyama, "heun": StratonovichHeun}


def aggregate_normals(xi: torch.Tensor, q: int) -> torch.Tensor:
    """The same Brownian path on a coarser grid: xi (n, ...) i.i.d. N(0,1) per fine step →
    (n/q, ...), each coarse step q^{−1/2} Σ of its q fine normals (again i.i.d. N(0, 1))."""
    n = xi.shape[0]
    if n % q:
        raise ValueError(f"aggregate_normals: {n} fine steps are not a multiple of {q}")
    return xi.reshape(n // q, q, *xi.shape[1:]).sum(1) / math.sqrt(q)


def integrate(integrator, X0: torch.Tensor, xi: torch.Tensor, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Apply ``integrator.step`` once per row of ``xi`` (n, batch, N, d), driven by those normals;
    returns X at the end: (batch, N, d)."""
    X = X0
    for k in range(xi.shape[0]):
        X = integrator.step(X, generator, xi=xi[k])
    return X
