r"""Noise through the value matrices (in the spirit of Fedorov, Sander, Elie, Marion, Laurière,
"Clustering in Deep Stochastic Transformers", arXiv:2601.21942): a noise source for
[`LimitSDE`][stochformer.model.sde.LimitSDE].

The value matrix of softmax attention (Qᵀ K = βI) carries a matrix Brownian motion B (d × d,
i.i.d. standard entries), common to all tokens: token i receives

$$
dW_i = dB\,a_i, \qquad a_i = \sum_j w_{ij}\,x_j, \qquad w_{ij} = \operatorname{softmax}_j(\beta\langle x_i, x_j\rangle),
$$

projected to the sphere: $dX^i = P_{X^i}\,dB\,a_i - \tfrac12 (d-1)|a_i|^2 X^i\,dt$ (Itô; the
increment is evaluated at the current tokens, as a layer with a noisy value matrix does). It is an
*interacting* common noise: $E[dW_i\,dW_j^\top] = \langle a_i, a_j\rangle I\,dt$ depends on all the
tokens through the attention. For two antipodal tokens $a_2 = -a_1$, so the antipode is invariant
for every β. The two-point diffusion (docs/neighbours.md) is

$$
dz = (1-z^2)\big[2pq\,(d-2) - (p^2+q^2)\,z\big]\,dt + \sqrt{2(p^2+q^2)}\,(1-z^2)\,dB,
\qquad q = \frac{e^{\beta z}}{e^\beta + e^{\beta z}} = 1 - p,
$$

whose scale function gives P(antipodal) ([`ValuePair`][stochformer.theory.value_noise.ValuePair]).
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
class ValueNoise:
    r"""Value-matrix noise: the increment at the tokens X is

    $$
    \Delta W_i = \Delta B\,a_i, \qquad a = \operatorname{softmax}(\beta X X^\top)\,X,
    $$

    $\Delta B = \sqrt{dt}\,\Xi$, Ξ (batch, d, d) the step's Brownian normals (one matrix per sample,
    common to its N tokens; a [`BrownianPath`][stochformer.core.brownian.BrownianPath] of that shape
    couples runs).

    Parameters
    ----------
    beta : float, optional
        The inverse temperature β >= 0 of the attention that forms a_i.

    Examples
    --------
    >>> import stochformer as sf
    >>> from stochformer.model.value_noise import ValueNoise
    >>> sde = sf.LimitSDE(noise=ValueNoise(beta=2.0))
    >>> X0 = sf.sphere.uniform(batch=2, N=3, d=4, seed=0)
    >>> sf.solve(sde, X0, T=1.0, steps=10, seed=0).X_final.shape
    (2, 3, 4)
    """

    beta: NonNegativeFloat = 1.0

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
        """The linear kernel κ(u) = u (s = √d): the field where a_i = x_i; its κ(1) = 1 bounds the
        one-point speed |a_i|² (it enters only the Euler integrator's radial term).

        Parameters
        ----------
        d : int
            Token dimension.

        Returns
        -------
        NoiseKernel
            κ of the field in dimension d.
        """
        return NoiseKernel("linear", d, scale=math.sqrt(d))

    def outputs(self, X: torch.Tensor) -> torch.Tensor:
        """a_i = Σ_j softmax_j(β⟨x_i, x_j⟩) x_j: X (batch, N, d) → (batch, N, d).

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            The tokens.

        Returns
        -------
        torch.Tensor, shape (batch, N, d)
            The attention outputs a_i.
        """
        return torch.softmax(self.beta * (X @ X.transpose(-1, -2)), dim=-1) @ X

    def increment(self, X: torch.Tensor, dt: float, draws: Randomness) -> torch.Tensor:
        """ΔB a_i for every token: X (batch, N, d) → (batch, N, d) (row i is (ΔB a_i)ᵀ).

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
        xi = as_draws(draws).brownian((B, d, d), X.dtype, X.device)
        return math.sqrt(dt) * (self.outputs(X) @ xi.transpose(-1, -2))
