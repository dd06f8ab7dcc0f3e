r"""Independent noise on every token: the contrast to the paper's common noise (SPEC §7).

Each token $x_i$ is driven by its own Brownian field $W_i$, the $W_i$ independent and each with the
kernel κ of SPEC §2. A token sees its field only at its own position, so in law

$$
dX^i = P_{X^i} \circ W_i(dt, X^i) = \sqrt{\kappa(1)}\; P_{X^i} \circ dB^i, \qquad B^i \text{ independent in } \mathbb{R}^d:
$$

independent spherical Brownian motions run at speed κ(1) (token covariance per unit time
κ(1) δ_ij P_{x_i}, against κ(⟨x_i, x_j⟩) P_{x_i} P_{x_j} for the common field). The one-point motion is
that of the common field with the same κ, so [`LimitSDE`][stochformer.model.sde.LimitSDE]'s Itô
correction −κ(1)(d−1)/2 · x applies unchanged; the two-point motion is not: tokens do not
synchronise, whatever the sign of λ₁ (docs/neighbours.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import torch

from ..core.brownian import as_draws
from ..core.validation import Methods, validated
from .kernel import NoiseKernel
from .noise import Randomness


@validated
@dataclass
class IndependentField:
    r"""Independent fields of kernel κ, one per token: the increment at the tokens is

    $$
    \Delta W = \sqrt{\kappa(1)\,dt}\;\Xi,
    $$

    Ξ (batch, N, d) the step's Brownian normals (the same normals as
    [`ExactField`][stochformer.model.noise.ExactField]'s, so a shared
    [`BrownianPath`][stochformer.core.brownian.BrownianPath] couples the two).

    Parameters
    ----------
    kernel : NoiseKernel
        κ ([`NoiseKernel`][stochformer.model.kernel.NoiseKernel], or any object with ``kappa1``
        and ``d``).

    Examples
    --------
    >>> import stochformer as sf
    >>> from stochformer.model.independent import IndependentField
    >>> sde = sf.LimitSDE(noise=IndependentField(sf.NoiseKernel("relu", 3)))
    >>> X0 = sf.sphere.uniform(batch=2, N=4, d=3, seed=0)
    >>> sf.solve(sde, X0, T=1.0, steps=10, seed=0).X_final.shape
    (2, 4, 3)
    """

    kernel: Annotated[NoiseKernel, Methods(("kappa",))]

    @property
    def d(self) -> int:
        """The token dimension of its kernel."""
        return int(self.kernel.d)

    def reset(self, batch, d, generator, dtype, device) -> None:  # stateless: only the dimension is checked
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
        self.noise_kernel(d)

    def noise_kernel(self, d: int) -> NoiseKernel:
        """κ of each token's own field (its κ(1) gives the Itô correction).

        Parameters
        ----------
        d : int
            Token dimension.

        Returns
        -------
        NoiseKernel
            κ of the field in dimension d.
        """
        if d != self.kernel.d:
            raise ValueError(f"IndependentField: its kernel is for d = {self.kernel.d}, the tokens have d = {d}")
        return self.kernel

    def increment(self, X: torch.Tensor, dt: float, draws: Randomness) -> torch.Tensor:
        """√(κ(1) dt) Ξ: X (batch, N, d) → (batch, N, d), independent across tokens.

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
        if X.shape[-1] != self.kernel.d:
            self.noise_kernel(X.shape[-1])
        xi = as_draws(draws).brownian(X.shape, X.dtype, X.device)
        return math.sqrt(float(self.kernel.kappa1) * dt) * xi
