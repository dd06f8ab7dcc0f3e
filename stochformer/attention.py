"""Softmax self-attention on token clouds (SPEC §1, §4).

``Attn_X(x_i) = Σ_j softmax_j(⟨Q x_i, K x_j⟩) V x_j`` with no 1/√d factor. Only ``A = Qᵀ K`` and
``V`` enter. The special case Qᵀ K = βI, V = γI is stored as scalars.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from .config import RunConfig


#: Entries of one attention (or Gram) block formed at once: 2²² ≈ 4·10⁶ (32 MiB in float64).
DEFAULT_BLOCK = 1 << 22


def query_chunk(N: int, block: int = DEFAULT_BLOCK) -> int:
    """Query rows per attention chunk so that a (chunk, N) score block has at most ``block``
    entries (at least one row): working memory O(block + N d) per sample."""
    return max(1, min(N, block // N))


@dataclass(frozen=True)
class Attention:
    """Attention with score matrix ``A = Qᵀ K`` (or ``beta·I``) and value matrix ``V`` (or ``gamma·I``).

    ``chunk``: number of query tokens processed at once; ``None`` computes the dense (N, N) score
    matrix. Chunking keeps memory linear in N for the many-token solver (SPEC §4).
    ``sdpa``: use ``torch.nn.functional.scaled_dot_product_attention`` with scale 1 (fused,
    memory-efficient kernels: CPU flash attention, CUDA memory-efficient/flash attention) instead;
    float64 on CUDA has no such kernel and falls back to the chunked path.
    """

    beta: float = 1.0
    gamma: float = 1.0
    A: Optional[torch.Tensor] = None  # (d, d), overrides beta
    V: Optional[torch.Tensor] = None  # (d, d), overrides gamma
    chunk: Optional[int] = None
    sdpa: bool = False

    @classmethod
    def from_config(
        cls, cfg: RunConfig, dtype=torch.float64, device="cpu", chunk: Optional[int] = None, sdpa: bool = False
    ) -> "Attention":
        eye = torch.eye(cfg.d, dtype=dtype, device=device)
        A = None
        if cfg.Q is not None or cfg.K is not None:
            Qm = torch.tensor(cfg.Q, dtype=dtype, device=device) if cfg.Q is not None else eye
            Km = torch.tensor(cfg.K, dtype=dtype, device=device) if cfg.K is not None else eye
            A = Qm.T @ Km
        V = torch.tensor(cfg.V, dtype=dtype, device=device) if cfg.V is not None else None
        return cls(beta=cfg.beta, gamma=cfg.gamma_value, A=A, V=V, chunk=chunk, sdpa=sdpa)

    def _queries(self, X: torch.Tensor) -> torch.Tensor:
        # ⟨Q x_i, K x_j⟩ = x_iᵀ (Qᵀ K) x_j: the query of token i is (Qᵀ K)ᵀ x_i = Aᵀ x_i.
        return self.beta * X if self.A is None else X @ self.A

    def _values(self, X: torch.Tensor) -> torch.Tensor:
        return self.gamma * X if self.V is None else X @ self.V.T

    def __call__(self, X: torch.Tensor, keys: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Attn_μ(x_i) for queries X: (batch, n, d) against the cloud ``keys`` (default X): (batch, N, d)."""
        keys = X if keys is None else keys
        q, vals = self._queries(X), self._values(keys)
        if self.sdpa and not (X.is_cuda and X.dtype == torch.float64):
            out = F.scaled_dot_product_attention(q.unsqueeze(-3), keys.unsqueeze(-3), vals.unsqueeze(-3), scale=1.0)
            return out.squeeze(-3)
        if self.chunk is None or X.shape[-2] <= self.chunk:
            return torch.softmax(q @ keys.transpose(-1, -2), dim=-1) @ vals
        out = torch.empty(*X.shape[:-1], vals.shape[-1], dtype=X.dtype, device=X.device)
        kT = keys.transpose(-1, -2)
        for s in range(0, X.shape[-2], self.chunk):  # query chunks: memory O(chunk · N)
            out[..., s : s + self.chunk, :] = torch.softmax(q[..., s : s + self.chunk, :] @ kT, dim=-1) @ vals
        return out
