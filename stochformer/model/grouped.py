"""Several particle systems stepped as one cloud under one field (SPEC §3–§4, Proposition 1.2).

Systems of different sizes can be coupled through the *exact* field K^{1/2}Ξ by concatenating
their tokens, X = [X_1, …, X_G]: (batch, Σ n_g, d), and stepping that cloud once per step:

- [`JointField`][stochformer.model.grouped.JointField] draws the field's increment jointly at every point of every system: one
  Gaussian vector with covariance K_ij = κ(⟨x_i, x_j⟩) over the whole cloud (the joint law of a
  Brownian field at those points; any square root of K gives it, a Cholesky factor is the
  cheapest). Coincident points (a system started from a subset of another's tokens, or an
  identical copy) get one value: the field is a function of position.
- [`GroupedAttention`][stochformer.model.grouped.GroupedAttention] keeps attention within each system: group g's queries see only group
  g's tokens (a block-diagonal attention, computed group by group).

Everything else in the step acts token by token, so ``LimitSDE(GroupedAttention(...),
JointField(...))`` stepped by [`stochformer.solve`][stochformer.solve] evolves each system by its own SDE, all of
them driven by one field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from ..core.brownian import as_draws
from .attention import Attention, start_run
from .kernel import NoiseKernel
from .noise import ExactField, Randomness, sqrt_psd


def _check_sizes(sizes: Sequence[int], N: Optional[int] = None) -> tuple[int, ...]:
    out = tuple(int(n) for n in sizes)
    if not out or any(n < 1 for n in out):
        raise ValueError(f"sizes: every group needs at least one token (got {list(sizes)})")
    if N is not None and sum(out) != N:
        raise ValueError(f"sizes: the groups have {sum(out)} tokens in all, the cloud has {N}")
    return out


@dataclass(frozen=True)
class GroupedAttention:
    """Attention within each of the consecutive groups of ``sizes`` tokens: X (batch, Σ sizes, d)
    → (batch, Σ sizes, d), rows of group g = ``attention(X_g)`` (one call per group; no token loop).

    Parameters
    ----------
    attention : Attention
        The attention applied within each group.
    sizes : tuple of int
        The groups' sizes, in token order.
    """

    attention: Attention
    sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", _check_sizes(self.sizes))

    def reset(self, batch, d, generator, dtype, device) -> None:
        """Start a run of the inner attention (its ``reset`` if it has one).

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
        start_run(self.attention, batch, d, generator, dtype, device)

    def __call__(self, X: torch.Tensor, keys: Optional[torch.Tensor] = None) -> torch.Tensor:
        if keys is not None:
            raise ValueError("GroupedAttention: the keys of each group are its own tokens (keys must be None)")
        _check_sizes(self.sizes, X.shape[-2])
        return torch.cat([self.attention(part) for part in X.split(self.sizes, dim=-2)], dim=-2)


@dataclass
class JointField:
    """The exact field ``field`` evaluated jointly at all points of the cloud X (batch, n, d):
    ΔW = √dt S Ξ_u gathered back to the points, S Sᵀ = K over the *distinct* points of each sample
    (exact duplicates share a value), Ξ the step's Brownian normals (batch, n, d), of which the rows
    of each distinct point's first occurrence are used.

    S is the Cholesky factor of K + δI with δ = n_u · ε · max K_ii, the rounding error of K's entries
    (the law changes only at float precision; close but distinct tokens make K singular to
    rounding); a matrix whose factorisation still fails gets the symmetric root (eigh).

    Parameters
    ----------
    field : ExactField
        The field.
    """

    field: ExactField  # gives κ and K(X); its own ``sqrt_method`` is not used

    def reset(self, batch, d, generator, dtype, device) -> None:
        """Start a run of the field.

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
        self.field.reset(batch, d, generator, dtype, device)

    def noise_kernel(self, d: int) -> NoiseKernel:
        """The field's kernel.

        Parameters
        ----------
        d : int
            Token dimension.

        Returns
        -------
        NoiseKernel
            κ of the field in dimension d.
        """
        return self.field.noise_kernel(d)

    def root(self, X: torch.Tensor) -> torch.Tensor:
        """S with S Sᵀ = K(X) + δI (lower triangular unless the Cholesky factorisation failed):
        X (n, d), distinct rows → (n, n), float64.

        Parameters
        ----------
        X : torch.Tensor, shape (n, d)
            Distinct points.

        Returns
        -------
        torch.Tensor, shape (n, n)
            S, float64.
        """
        K = self.field.covariance(X.unsqueeze(0), torch.float64)[0]
        diag = K.diagonal()
        diag.add_(diag.amax(), alpha=K.shape[-1] * torch.finfo(K.dtype).eps)
        return sqrt_psd(K, "cholesky")

    def distinct(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Indices of the first occurrence of each distinct row of X (n, d), in increasing order,
        and for every row the position of its distinct row in that list: (n_u,), (n,).

        Parameters
        ----------
        X : torch.Tensor, shape (n, d)
            Points.

        Returns
        -------
        tuple of torch.Tensor
            The first occurrences (n_u,) and each row's distinct index (n,).
        """
        _, inverse = torch.unique(X, dim=0, return_inverse=True)
        first = torch.full((int(inverse.max()) + 1,), X.shape[0], dtype=torch.long, device=X.device)
        first.scatter_reduce_(0, inverse, torch.arange(X.shape[0], device=X.device), reduce="amin")
        keep, order = first.sort()
        rank = torch.empty_like(order)
        rank[order] = torch.arange(len(order), device=X.device)
        return keep, rank[inverse]

    def increment(self, X: torch.Tensor, dt: float, draws: Randomness) -> torch.Tensor:
        """ΔW at every point of X (batch, n, d) → (batch, n, d); one matrix K per sample, over its
        distinct points, in float64 whatever X's dtype.

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
        xi = as_draws(draws).brownian(X.shape, X.dtype, X.device)
        out = torch.empty_like(X)
        for b in range(X.shape[0]):  # samples (each its own matrix)
            keep, where = self.distinct(X[b])
            out[b] = (self.root(X[b, keep]) @ xi[b, keep].to(torch.float64)).to(X.dtype)[where]
        return math.sqrt(dt) * out
