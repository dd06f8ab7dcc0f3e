"""What is measured on a token cloud (SPEC §5). Inputs ``X: (batch, N, d)`` (or any leading
axes), unit rows, checked at the call (finite real floating, unit rows; N >= 2 for the statistics
over pairs); outputs are per-sample tensors ``(batch,)``."""

from __future__ import annotations

import functools
import math
from typing import Optional

import torch

from ..model.attention import DEFAULT_BLOCK, query_chunk
from ..core.validation import Clouds, EnergyBeta, PositiveInt, validated

#: the per-sample statistics of a cloud that [`pair_statistics`][stochformer.measure.diagnostics.pair_statistics] computes in one pass
STATISTICS = ("mean_cosine", "energy", "min_cosine")


def _pairs(X: torch.Tensor) -> None:
    if X.shape[-2] < 2:
        raise ValueError(f"X: statistics over pairs of tokens need N >= 2 (got shape {tuple(X.shape)})")


@validated
def mean_cosine(X: Clouds) -> torch.Tensor:
    """Mean of ⟨x_i, x_j⟩ over pairs i < j. Uses |Σ x_i|² = N + 2 Σ_{i<j} ⟨x_i, x_j⟩ (O(N d)).

    Parameters
    ----------
    X : torch.Tensor, shape (..., N, d)
        Token clouds, unit rows.

    Returns
    -------
    torch.Tensor, shape (...)
        The mean pairwise cosine (1 at synchronisation), in X's dtype.
    """
    _pairs(X)
    return _mean_cosine(X)


def _mean_cosine(X: torch.Tensor) -> torch.Tensor:
    N = X.shape[-2]
    s = torch.linalg.vector_norm(X.sum(-2), dim=-1) ** 2
    return (s - N) / (N * (N - 1))


@validated
def energy(X: Clouds, beta: EnergyBeta = 1.0, chunk: Optional[PositiveInt] = None) -> torch.Tensor:
    """E_β(μ) = ½ ∫∫ (e^β − e^{β⟨x,y⟩}) μ(dx) μ(dy) for the empirical measure (diagonal included).

    Computed as ½ e^β ∫∫ (1 − e^{β(⟨x,y⟩−1)}) with expm1, so values near synchronisation are
    accurate to relative rounding. ``chunk``: rows of the Gram matrix formed at once (memory
    O(chunk · N) instead of O(N²), for many tokens).

    Parameters
    ----------
    X : torch.Tensor, shape (..., N, d)
        Token clouds, unit rows.
    beta : float, optional
        The inverse temperature β, in (0, 700].
    chunk : int, optional
        Gram rows formed at once (None: all).

    Returns
    -------
    torch.Tensor, shape (...)
        E_β(μ) per cloud (0 at synchronisation).
    """
    return _energy(X, beta, chunk)


def _energy(X: torch.Tensor, beta: float = 1.0, chunk: Optional[int] = None) -> torch.Tensor:
    N = X.shape[-2]
    total = functools.reduce(torch.add, (_energy_sum(G, beta) for _, G in _gram_rows(X, chunk or N)))
    return -0.5 * math.exp(beta) * total / N**2


def _gram_rows(X: torch.Tensor, rows: int):
    """(s, rows s… s+rows of the Gram matrix X Xᵀ) for s = 0, rows, 2·rows, …"""
    for s in range(0, X.shape[-2], rows):
        yield s, X[..., s : s + rows, :] @ X.transpose(-1, -2)


def _energy_sum(G: torch.Tensor, beta: float) -> torch.Tensor:
    """Σ_ij expm1(β(G_ij − 1)) over the last two axes of a block of cosines G."""
    return torch.expm1(G.clamp(max=1.0).sub_(1.0).mul_(beta)).sum(dim=(-1, -2))


@validated
def mean_token(X: Clouds) -> torch.Tensor:
    """The mean token ∫ x μ(dx) (not normalised): (batch, N, d) → (batch, d). Its squared norm is
    ∫∫ ⟨x, y⟩ μ(dx) μ(dy), 1 exactly at synchronisation.

    Parameters
    ----------
    X : torch.Tensor, shape (..., N, d)
        Token clouds, unit rows.

    Returns
    -------
    torch.Tensor, shape (..., d)
        The mean token.
    """
    return X.mean(dim=-2)


@validated
def min_cosine(X: Clouds) -> torch.Tensor:
    """Minimum of ⟨x_i, x_j⟩ over pairs i < j.

    Parameters
    ----------
    X : torch.Tensor, shape (..., N, d)
        Token clouds, unit rows.

    Returns
    -------
    torch.Tensor, shape (...)
        The smallest pairwise cosine.
    """
    return unchecked_pair_statistics(X)["min_cosine"]


@validated
def pair_statistics(X: Clouds, energy_beta: EnergyBeta = 1.0, block: Optional[PositiveInt] = None) -> dict[str, torch.Tensor]:
    """The three per-sample statistics of ``summary.json``: mean_cosine, energy, min_cosine.

    One pass over the Gram matrix, formed ``block // N`` rows at a time when ``block`` (entries)
    is given, so memory stays O(block + N d) for many tokens; at once otherwise.

    Parameters
    ----------
    X : torch.Tensor, shape (..., N, d)
        Token clouds, unit rows.
    energy_beta : float, optional
        β of the energy, in (0, 700].
    block : int, optional
        Gram entries formed at once (None: all).

    Returns
    -------
    dict of str to torch.Tensor
        ``mean_cosine``, ``energy``, ``min_cosine``, each of shape (...).
    """
    return unchecked_pair_statistics(X, energy_beta, block)


def unchecked_pair_statistics(X: torch.Tensor, energy_beta: float = 1.0, block: Optional[int] = None) -> dict[str, torch.Tensor]:
    """The per-sample statistics of [`pair_statistics`][stochformer.measure.diagnostics.pair_statistics] (mean_cosine, energy, min_cosine) of
    tokens already checked, without checking them again (the solver's records).

    Parameters
    ----------
    X : torch.Tensor, shape (..., N, d)
        Token clouds, already checked.
    energy_beta : float, optional
        β of the energy.
    block : int, optional
        Gram entries formed at once (None: all).

    Returns
    -------
    dict of str to torch.Tensor
        ``mean_cosine``, ``energy``, ``min_cosine``, each of shape (...).
    """
    _pairs(X)
    N = X.shape[-2]
    rows = N if block is None else max(1, min(N, block // N))
    energy_sum = torch.zeros(X.shape[:-2], dtype=X.dtype, device=X.device)
    low = torch.full_like(energy_sum, math.inf)
    for s, G in _gram_rows(X, rows):
        energy_sum += _energy_sum(G, energy_beta)
        if G.requires_grad:  # the energy's graph keeps G (its clamp): the diagonal is moved on a copy
            G = G.clone()
        G.diagonal(offset=s, dim1=-2, dim2=-1).add_(3.0)  # ⟨x_i, x_i⟩ = 1 → 4: out of the minimum
        low = torch.minimum(low, G.amin(dim=(-1, -2)))
    return {
        "mean_cosine": _mean_cosine(X),
        "min_cosine": low,
        "energy": -0.5 * math.exp(energy_beta) * energy_sum / N**2,
    }


@validated
def cloud_summary(X: Clouds, beta: EnergyBeta = 1.0, block: PositiveInt = DEFAULT_BLOCK) -> dict[str, torch.Tensor]:
    """Large-N statistics of token clouds X: (batch, N, d): E_β (blocked, no (N, N) matrix), the
    mean token (batch, d) and its norm |∫x dμ| (batch,).

    Parameters
    ----------
    X : torch.Tensor, shape (..., N, d)
        Token clouds, unit rows.
    beta : float, optional
        β of the energy, in (0, 700].
    block : int, optional
        Gram entries formed at once.

    Returns
    -------
    dict of str to torch.Tensor
        ``energy`` (batch,), ``mean_token`` (batch, d) and ``mean_token_norm`` (batch,).
    """
    m = X.mean(dim=-2)
    return {
        "energy": _energy(X, beta, chunk=query_chunk(X.shape[-2], block)),
        "mean_token": m,
        "mean_token_norm": torch.linalg.vector_norm(m, dim=-1),
    }
