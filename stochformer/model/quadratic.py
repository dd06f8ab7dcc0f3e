r"""Random quadratic forms on the sphere (Engel & Shalova, arXiv:2603.06187; Shalova,
arXiv:2608.16664): a noise source for [`LimitSDE`][stochformer.model.sde.LimitSDE].

In the authors' notation, on the unit sphere of $\mathbb{R}^d$,

$$
dX = P_X \circ dQ\,X \;+\; \gamma\,P_X \circ dW, \qquad Q = \frac{B + B^\top}{\sqrt 2},
$$

$B$ a $d\times d$ matrix of independent standard Brownian motions (so $E[dQ_{ij}\,dQ_{kl}] =
(\delta_{ik}\delta_{jl} + \delta_{il}\delta_{jk})\,dt$), $W$ an independent Brownian motion in
$\mathbb{R}^d$ (the forcing, $\gamma \ge 0$), $P_x = I - xx^\top$. It is the limit SDE of SPEC §3
with the field $\mathcal{W}(t, x) = Q_t x + \gamma W_t$, whose covariance is

$$
E\big[\mathcal{W}(t,x)\,\mathcal{W}(t,y)^\top\big] = t\,\big[(\langle x, y\rangle + \gamma^2)\,I + y x^\top\big]
$$

(not of the isotropic form κ(⟨x, y⟩) I: the term $y x^\top$). The one-point motion is that of a
field with κ(1) = 1 + γ²: the Itô form is $dX = P_X\,dQ\,X + \gamma P_X\,dW - (1+\gamma^2)\frac{d-1}{2}X\,dt$,
the correction of [`LimitSDE.ito_correction`][stochformer.model.sde.LimitSDE.ito_correction], and the
Stratonovich correction of the field itself, $\tfrac12 P_X E[dQ\,dQ]X = \tfrac{d+1}{2}P_X X = 0$, is
radial, so [`StratonovichHeun`][stochformer.model.sde.StratonovichHeun] (increment held fixed, projection
averaged) is consistent. The two-point motion of z = ⟨x, y⟩ is exactly the
[`PairDiffusion`][stochformer.theory.pair.PairDiffusion] of the linear kernel
κ(ρ) = 2ρ + γ² ([`QuadraticField.pair_kernel`][stochformer.model.quadratic.QuadraticField.pair_kernel]):
at γ = 0 its generator is $L_0 f = -2z(1-z^2)f' + 2(1-z^2)^2 f''$ (docs/neighbours.md derives both).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core.brownian import as_draws
from ..core.validation import NonNegativeFloat, validated
from .kernel import NoiseKernel
from .noise import Randomness


@validated
@dataclass
class QuadraticField:
    r"""The noise of random quadratic forms with forcing γ: the increment at the tokens X is

    $$
    \Delta\mathcal{W} = X\,\Delta Q + \gamma\,\Delta W, \qquad
    \Delta Q = \frac{\Delta B + \Delta B^\top}{\sqrt 2},
    $$

    $\Delta B = \sqrt{dt}\,\Xi_{1..d}$ (d × d) and $\Delta W = \sqrt{dt}\,\Xi_{d+1}$ (1 × d), one draw of the
    step's Brownian normals Ξ of shape (batch, d + 1, d), common to all N tokens of a sample
    (a [`BrownianPath`][stochformer.core.brownian.BrownianPath] of that shape couples runs).

    Parameters
    ----------
    gamma : float, optional
        The forcing γ >= 0 (0: the unforced flow).

    Examples
    --------
    >>> import stochformer as sf
    >>> from stochformer.model.quadratic import QuadraticField
    >>> sde = sf.LimitSDE(noise=QuadraticField(gamma=1.0))
    >>> X0 = sf.sphere.uniform(batch=2, N=3, d=4, seed=0)
    >>> sf.solve(sde, X0, T=1.0, steps=10, seed=0).X_final.shape
    (2, 3, 4)
    >>> QuadraticField(gamma=1.0).noise_kernel(4).kappa1      # one point: κ(1) = 1 + γ²
    2.0
    """

    gamma: NonNegativeFloat = 0.0

    def reset(self, batch, d, generator, dtype, device) -> None:  # stateless
        """Start a run: the field is stateless.

        Parameters
        ----------
        batch : int
            Independent samples of the run.
        d : int
            Token dimension.
        generator : torch.Generator
            The run's generator.
        dtype : torch.dtype
            The tokens' dtype.
        device : str or torch.device
            The tokens' device.
        """
        pass

    def noise_kernel(self, d: int) -> NoiseKernel:
        """The kernel κ(ρ) = ρ + γ² of the field's isotropic part (linear φ, s² = d, σ_W² = γ²/d):
        its κ(1) = 1 + γ² is the one-point motion's, which gives the Itô correction. The two-point
        motion is not that of this kernel but of `pair_kernel`.

        Parameters
        ----------
        d : int
            Token dimension.

        Returns
        -------
        NoiseKernel
            κ of the field in dimension d.
        """
        return NoiseKernel("linear", d, sigma_W=self.gamma / math.sqrt(d), scale=math.sqrt(d))

    def pair_kernel(self, d: int) -> NoiseKernel:
        """The kernel κ(ρ) = 2ρ + γ² (linear φ, s² = 2d, σ_W² = γ²/(2d)) whose
        [`PairDiffusion`][stochformer.theory.pair.PairDiffusion] is exactly the law of the overlap of
        two tokens driven by this field (docs/neighbours.md).

        Parameters
        ----------
        d : int
            Token dimension.

        Returns
        -------
        NoiseKernel
            The pair's kernel in dimension d.
        """
        return NoiseKernel("linear", d, sigma_W=self.gamma / math.sqrt(2 * d), scale=math.sqrt(2 * d))

    def increment(self, X: torch.Tensor, dt: float, draws: Randomness) -> torch.Tensor:
        """X ΔQ + γ ΔW: X (batch, N, d) → (batch, N, d) (ΔQ symmetric, so row i is ΔQ x_i).

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            The tokens.
        dt : float
            The step.
        draws : torch.Generator or Draws
            The step's randomness.

        Returns
        -------
        torch.Tensor, shape (batch, N, d)
            ΔW at the tokens.
        """
        B, _, d = X.shape
        xi = as_draws(draws).brownian((B, d + 1, d), X.dtype, X.device)
        dB = math.sqrt(dt) * xi[:, :d, :]
        dQ = (dB + dB.transpose(-1, -2)) / math.sqrt(2.0)
        out = X @ dQ
        if self.gamma > 0:
            out = out + (self.gamma * math.sqrt(dt)) * xi[:, d:, :]
        return out
