"""What is measured on a token cloud (SPEC §5). Inputs ``X: (batch, N, d)``, unit rows; outputs
are per-sample tensors ``(batch,)``."""

from __future__ import annotations

import math
from typing import Optional

import torch

from .model.attention import DEFAULT_BLOCK, query_chunk

#: the per-sample statistics of a cloud that :func:`pair_statistics` computes in one pass
STATISTICS = ("mean_cosine", "energy", "min_cosine")


def mean_cosine(X: torch.Tensor) -> torch.Tensor:
    """Mean of ⟨x_i, x_j⟩ over pairs i < j. Uses |Σ x_i|² = N + 2 Σ_{i<j} ⟨x_i, x_j⟩ (O(N d))."""
    N = X.shape[-2]
    s = torch.linalg.vector_norm(X.sum(-2), dim=-1) ** 2
    return (s - N) / (N * (N - 1))


def energy(X: torch.Tensor, beta: float = 1.0, chunk: Optional[int] = None) -> torch.Tensor:
    """E_β(μ) = ½ ∫∫ (e^β − e^{β⟨x,y⟩}) μ(dx) μ(dy) for the empirical measure (diagonal included).

    Computed as ½ e^β ∫∫ (1 − e^{β(⟨x,y⟩−1)}) with expm1, so values near synchronisation are
    accurate to relative rounding. ``chunk``: rows of the Gram matrix formed at once (memory
    O(chunk · N) instead of O(N²), for many tokens)."""
    N = X.shape[-2]
    total = sum(_energy_sum(G, beta) for _, G in _gram_rows(X, chunk or N))
    return -0.5 * math.exp(beta) * total / N**2


def _gram_rows(X: torch.Tensor, rows: int):
    """(s, rows s… s+rows of the Gram matrix X Xᵀ) for s = 0, rows, 2·rows, …"""
    for s in range(0, X.shape[-2], rows):
        yield s, X[..., s : s + rows, :] @ X.transpose(-1, -2)


def _energy_sum(G: torch.Tensor, beta: float) -> torch.Tensor:
    """Σ_ij expm1(β(G_ij − 1)) over the last two axes of a block of cosines G."""
    return torch.expm1(G.clamp(max=1.0).sub_(1.0).mul_(beta)).sum(dim=(-1, -2))


def mean_token(X: torch.Tensor) -> torch.Tensor:
    """The mean token ∫ x μ(dx) (not normalised): (batch, N, d) → (batch, d). Its squared norm is
    ∫∫ ⟨x, y⟩ μ(dx) μ(dy), 1 exactly at synchronisation."""
    return X.mean(dim=-2)


def min_cosine(X: torch.Tensor) -> torch.Tensor:
    """Minimum of ⟨x_i, x_j⟩ over pairs i < j."""
    return pair_statistics(X)["min_cosine"]


def pair_statistics(X: torch.Tensor, energy_beta: float = 1.0, block: Optional[int] = None) -> dict[str, torch.Tensor]:
    """The three per-sample statistics of ``summary.json``: mean_cosine, energy, min_cosine.

    One pass over the Gram matrix, formed ``block // N`` rows at a time when ``block`` (entries)
    is given, so memory stays O(block + N d) for many tokens; at once otherwise."""
    N = X.shape[-2]
    rows = N if block is None else max(1, min(N, block // N))
    energy_sum = torch.zeros(X.shape[:-2], dtype=X.dtype, device=X.device)
    low = torch.full_like(energy_sum, math.inf)
    for s, G in _gram_rows(X, rows):
        energy_sum += _energy_sum(G, energy_beta)
        G.diagonal(offset=s, dim1=-2, dim2=-1).add_(3.0)  # ⟨x_i, x_i⟩ = 1 → 4: out of the minimum
        low = torch.minimum(low, G.amin(dim=(-1, -2)))
    return {
        "mean_cosine": mean_cosine(X),
        "min_cosine": low,
        "energy": -0.5 * math.exp(energy_beta) * energy_sum / N**2,
    }


def cloud_summary(X: torch.Tensor, beta: float = 1.0, block: int = DEFAULT_BLOCK) -> dict[str, torch.Tensor]:
    """Large-N statistics of token clouds X: (batch, N, d): E_β (blocked, no (N, N) matrix), the
    mean token (batch, d) and its norm |∫x dμ| (batch,)."""
    m = mean_token(X)
    return {
        "energy": energy(X, beta, chunk=query_chunk(X.shape[-2], block)),
        "mean_token": m,
        "mean_token_norm": torch.linalg.vector_norm(m, dim=-1),
    }
