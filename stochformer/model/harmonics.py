r"""The multi-harmonic noise on the circle (Shalova, arXiv:2608.16664): a noise source for
[`LimitSDE`][stochformer.model.sde.LimitSDE] on tokens of $S^1$, written as unit vectors of
$\mathbb{R}^2$.

In the author's notation, for the angle φ of a point of the circle,

$$
d\varphi = \sum_{i=1}^{m} \gamma^i \big(\cos(k_i\varphi)\,dB^{i,1} + \sin(k_i\varphi)\,dB^{i,2}\big),
$$

$B^{i,1}, B^{i,2}$ independent standard Brownian motions common to every point, $k_1, \dots, k_m$
positive integers and $0 < \gamma < 1$, so the harmonics act on separated time scales. In
stochformer's notation this is the limit SDE of SPEC §3 with the tangent Brownian field
$\mathcal{W}(t, x) = x^\perp \sum_i \gamma^i(\cos(k_i\varphi)B^{i,1}_t + \sin(k_i\varphi)B^{i,2}_t)$,
$x = (\cos\varphi, \sin\varphi)$, $x^\perp = (-\sin\varphi, \cos\varphi)$, on the same time scale.

Two points at angles φ, ψ move with the covariance $\sum_i \gamma^{2i}\cos(k_i(\varphi-\psi))\,dt$;
one point is a Brownian motion on the circle at speed $c = \sum_i \gamma^{2i}$. The Stratonovich
and Itô forms of the angle agree (their difference, $\tfrac12\sum_i\gamma^{2i}(\cos\cdot\cos' +
\sin\cdot\sin')(k_i\varphi) = 0$), and in $\mathbb{R}^2$ the whole Stratonovich correction of the field,
$\tfrac12\sum_j DV_j[V_j] = -\tfrac{c}{2}x$, is radial: the one-point correction
$-\kappa(1)\frac{d-1}{2}x$ of [`LimitSDE.ito_correction`][stochformer.model.sde.LimitSDE.ito_correction]
with κ(1) = c, so [`StratonovichHeun`][stochformer.model.sde.StratonovichHeun] (increment at X held
fixed, projection averaged) is consistent.

**The cascade.** Under the first harmonic alone, two points at angle difference θ have relative
variance $2\gamma^2(1-\cos k_1\theta)$, which vanishes exactly at θ ∈ (2π/k₁)ℤ: the tokens gather
into $k_1$ equidistant clusters (the first meta-attractor) at the exponent $-\gamma^2k_1^2/2$; the
slower harmonics then move the clusters against each other on longer time scales, down to the last
one (k = 1: a single point). docs/neighbours.md states the check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import torch

from ..core.brownian import as_draws
from ..core.validation import Real, validated
from .kernel import NoiseKernel
from .noise import Randomness


@validated
@dataclass
class HarmonicField:
    r"""The multi-harmonic noise on the circle: at tokens $x_n = (\cos\varphi_n, \sin\varphi_n)$ the increment is

    $$
    \Delta\mathcal{W}_n = x_n^\perp\,\sqrt{dt}\sum_{i=1}^m \gamma^i\big(\cos(k_i\varphi_n)\,\xi_{i,1} + \sin(k_i\varphi_n)\,\xi_{i,2}\big),
    $$

    ξ of shape (batch, m, 2) the step's Brownian normals, common to all N tokens of a sample.

    Parameters
    ----------
    harmonics : tuple of int, optional
        The frequencies $k_1, \dots, k_m$ (each >= 1), the first the fastest (default (7, 3, 1), the
        authors' Fig. 2).
    gamma : float, optional
        γ in (0, 1]: the i-th harmonic has amplitude γ^i.

    Examples
    --------
    >>> import stochformer as sf
    >>> from stochformer.model.harmonics import HarmonicField
    >>> sde = sf.LimitSDE(noise=HarmonicField((7, 3, 1), gamma=0.3))
    >>> X0 = sf.sphere.uniform(batch=2, N=5, d=2, seed=0)
    >>> sf.solve(sde, X0, T=1.0, steps=10, seed=0).X_final.shape
    (2, 5, 2)
    """

    harmonics: tuple[int, ...] = (7, 3, 1)
    gamma: Annotated[float, Real(0.0, 1.0, low_open=True)] = 0.3

    def __post_init__(self) -> None:
        ks = tuple(self.harmonics)
        if not ks or any(isinstance(k, bool) or int(k) != k or k < 1 for k in ks):
            raise ValueError(f"harmonics: a non-empty tuple of integers >= 1 (got {self.harmonics!r})")
        self.harmonics = tuple(int(k) for k in ks)

    @property
    def speed(self) -> float:
        """c = Σ_i γ^{2i}, the one-point speed (dφ² = c dt)."""
        return sum(self.gamma ** (2 * i) for i in range(1, len(self.harmonics) + 1))

    def reset(self, batch, d, generator, dtype, device) -> None:
        """The start of a run: the field is stateless, so only the dimension is checked.

        Parameters
        ----------
        batch : int
            Independent samples of the run.
        d : int
            Token dimension (2: the circle).
        generator : torch.Generator
            The run's generator (unused).
        dtype : torch.dtype
            The tokens' dtype.
        device : str or torch.device
            The tokens' device.

        Raises
        ------
        ValueError
            ``d`` is not 2.
        """
        self.noise_kernel(d)

    def noise_kernel(self, d: int) -> NoiseKernel:
        """A kernel with κ(1) = c (`speed`), the one-point motion's, which gives the Itô correction:
        κ(ρ) = cρ (linear φ, s² = 2c). The two-point motion is not this kernel's (module docstring).

        Parameters
        ----------
        d : int
            Token dimension; only 2 (the circle).

        Returns
        -------
        NoiseKernel
            The linear kernel with κ(1) = c.
        """
        if d != 2:
            raise ValueError(f"HarmonicField: tokens on the circle (d = 2), got d = {d}")
        return NoiseKernel("linear", 2, scale=math.sqrt(2 * self.speed))

    def increment(self, X: torch.Tensor, dt: float, draws: Randomness) -> torch.Tensor:
        r"""The field's increment over one step, in the tangent direction $x^\perp$:

        $$
        \Delta W(x) = x^\perp \sqrt{\Delta t}\sum_i \gamma^i\big(\cos(k_i\varphi)\,\xi_{i,1} + \sin(k_i\varphi)\,\xi_{i,2}\big),
        $$

        φ the angle of x, ξ standard normals shared by all tokens of a sample.

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, 2)
            Tokens on the circle.
        dt : float
            The step.
        draws : Draws or torch.Generator
            The step's randomness (the Brownian normals).

        Returns
        -------
        torch.Tensor, shape (batch, N, 2)
            The increment.
        """
        if X.shape[-1] != 2:
            self.noise_kernel(X.shape[-1])
        m = len(self.harmonics)
        xi = as_draws(draws).brownian((X.shape[0], m, 2), X.dtype, X.device)
        phi = torch.atan2(X[..., 1], X[..., 0])  # (batch, N)
        k = torch.tensor(self.harmonics, dtype=X.dtype, device=X.device)
        amp = self.gamma ** torch.arange(1, m + 1, dtype=X.dtype, device=X.device)  # γ^i
        kphi = phi[..., None] * k  # (batch, N, m)
        a = (amp * (torch.cos(kphi) * xi[:, None, :, 0] + torch.sin(kphi) * xi[:, None, :, 1])).sum(-1)
        perp = torch.stack([-X[..., 1], X[..., 0]], dim=-1)
        return math.sqrt(dt) * a[..., None] * perp
