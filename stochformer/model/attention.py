"""Softmax self-attention on token clouds (SPEC §1, §4).

``Attn_X(x_i) = Σ_j softmax_j(⟨Q x_i, K x_j⟩) V x_j`` with no 1/√d factor. Only ``A = Qᵀ K`` and
``V`` enter. The special case Qᵀ K = βI, V = γI is stored as scalars.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Protocol

import torch
import torch.nn.functional as F

from ..core.validation import (
    Bool,
    DeviceLike,
    FiniteFloat,
    FloatDtype,
    Matrix,
    PositiveInt,
    check_int,
    check_parts,
    check_tensor,
    validated,
)


#: Entries of one attention (or Gram) block formed at once: 2²² ≈ 4·10⁶ (32 MiB in float64).
DEFAULT_BLOCK = 1 << 22
#: On a CPU a query chunk is processed at most this many rows at a time: larger score blocks fall
#: out of cache (measured fastest for N = 10⁴–4·10⁴, d = 16; docs/benchmarks.md).
CPU_ROWS = 64


def query_chunk(N: int, block: int = DEFAULT_BLOCK) -> int:
    """Query rows per attention chunk so that a (chunk, N) score block has at most ``block``
    entries (at least one row): working memory O(block + N d) per sample."""
    return max(1, min(N, block // N))


class Attention(Protocol):
    """What the models call: the drift field of the cloud at the queries (any callable with this
    signature plugs in, SPEC §1). An attention with state across calls (random draws) also defines
    ``reset(batch, d, generator, dtype, device)``, which the models call at the start of every run
    (:func:`start_run`), so that a model object reused for a run gives that run's numbers."""

    def __call__(self, X: torch.Tensor, keys: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Attn_μ(x_i) for queries X: (batch, n, d) against the cloud ``keys`` (default X): (batch, N, d)."""


def start_run(attention: Optional[Attention], batch: int, d: int, generator: torch.Generator, dtype: torch.dtype,
              device) -> None:
    """The start of a run for ``attention``: its ``reset`` if it has one (a stateless attention has none)."""
    reset = getattr(attention, "reset", None)
    if reset is not None:
        reset(batch, d, generator, dtype, device)


@validated
@dataclass(frozen=True)
class SoftmaxAttention:
    """Attention with score matrix ``A = Qᵀ K`` (or ``beta·I``) and value matrix ``V`` (or ``gamma·I``).

    ``chunk``: number of query tokens processed at once (at most :data:`CPU_ROWS` on a CPU);
    ``None`` computes the dense (N, N) score matrix. Chunking keeps memory linear in N for the
    many-token solver (SPEC §4).
    ``sdpa``: use ``torch.nn.functional.scaled_dot_product_attention`` with scale 1 (fused,
    memory-efficient kernels: CPU flash attention, CUDA memory-efficient/flash attention) instead;
    float64 on CUDA has no such kernel and falls back to the chunked path.
    """

    beta: FiniteFloat = 1.0
    gamma: FiniteFloat = 1.0
    A: Optional[Matrix] = None  # (d, d), overrides beta
    V: Optional[Matrix] = None  # (d, d), overrides gamma
    chunk: Optional[PositiveInt] = None
    sdpa: Bool = False

    def __post_init__(self) -> None:
        check_parts("SoftmaxAttention", {"A": self.A, "V": self.V})
        if self.A is not None and self.V is not None and self.A.shape != self.V.shape:
            raise ValueError(f"V: must be d x d like A (got A {tuple(self.A.shape)}, V {tuple(self.V.shape)})")

    @property
    def d(self) -> Optional[int]:
        """The token dimension of its matrices (None for βI, γI: any d)."""
        M = self.A if self.A is not None else self.V
        return None if M is None else int(M.shape[-1])

    def _queries(self, X: torch.Tensor) -> torch.Tensor:
        # ⟨Q x_i, K x_j⟩ = x_iᵀ (Qᵀ K) x_j: the query of token i is (Qᵀ K)ᵀ x_i = Aᵀ x_i.
        if self.A is None:
            return X if self.beta == 1 else self.beta * X  # 1·x = x exactly: one pass fewer
        return X @ self.A

    def _values(self, X: torch.Tensor) -> torch.Tensor:
        if self.V is None:
            return X if self.gamma == 1 else self.gamma * X
        return X @ self.V.T

    @classmethod
    @validated
    def from_matrices(
        cls, d: PositiveInt, beta: FiniteFloat = 1.0, gamma: FiniteFloat = 1.0, Q=None, K=None, V=None,
        dtype: FloatDtype = torch.float64, device: DeviceLike = "cpu", chunk: Optional[PositiveInt] = None, sdpa: Bool = False,
    ) -> "SoftmaxAttention":
        """From query, key and value matrices (nested lists, arrays or tensors, d × d, finite; a
        missing Q or K is the identity): A = Qᵀ K and V; without Q, K the score matrix is βI,
        without V the value γI."""
        check_int("d", d, 2)

        def as_t(M: object, name: str) -> torch.Tensor:
            M = check_tensor(name, M, ("d", "d"))
            if M.shape != (d, d):
                raise ValueError(f"{name}: must be a d x d matrix with d = {d} (got shape {tuple(M.shape)})")
            return M.to(dtype=dtype, device=device)

        A = None  # Qᵀ K, with a missing factor the identity (no d × d identity is formed)
        if Q is not None and K is not None:
            A = as_t(Q, "Q").T @ as_t(K, "K")
        elif Q is not None or K is not None:
            A = as_t(Q, "Q").T.contiguous() if Q is not None else as_t(K, "K")
        return cls(beta=beta, gamma=gamma, A=A, V=None if V is None else as_t(V, "V"), chunk=chunk, sdpa=sdpa)

    def flops(self, N: int, d: int) -> float:
        """Matrix-product flops of self-attention on N tokens in dimension d, per sample: the scores
        (β X Xᵀ, a symmetric product, N(N+1)d; with A the queries X A, 2Nd², and 2N²d) and their
        product with the values (2N²d, and 2Nd² for X Vᵀ with V)."""
        scores = N * (N + 1.0) * d if self.A is None else 2.0 * N * d * (d + N)
        return scores + 2.0 * N * N * d + (0.0 if self.V is None else 2.0 * N * d * d)

    def __call__(self, X: torch.Tensor, keys: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Attn_μ(x_i) for queries X: (batch, n, d) against the cloud ``keys`` (default X): (batch, N, d)."""
        keys = X if keys is None else keys
        q, vals = self._queries(X), self._values(keys)
        if self.sdpa and not (X.is_cuda and X.dtype == torch.float64):
            out = F.scaled_dot_product_attention(q.unsqueeze(-3), keys.unsqueeze(-3), vals.unsqueeze(-3), scale=1.0)
            return out.squeeze(-3)
        if self.chunk is None or X.shape[-2] <= self.chunk:
            return torch.softmax(q @ keys.transpose(-1, -2), dim=-1) @ vals
        return _chunked(q, keys, vals, self.chunk)


def _chunked(q: torch.Tensor, keys: torch.Tensor, vals: torch.Tensor, chunk: int) -> torch.Tensor:
    """softmax(q kᵀ) vals in query chunks of ``chunk`` rows: q (..., n, d), keys (..., N, d),
    vals (..., N, e) → (..., n, e); memory O(chunk · N).

    By Cauchy–Schwarz |⟨q_i, k_j⟩| ≤ c_i = |q_i| max_j |k_j|, so exp(⟨q_i, k_j⟩ − c_i) lies in
    [e^{−2c_i}, 1]: with that shift no row maximum is needed, and one product with [vals, 1] gives
    numerator and denominator together, so each score block is read twice after it is formed
    (exp, product) instead of the five passes of softmax-then-product. For unit tokens c_i is at
    most β‖QᵀK‖ (SPEC §4). When 2c_i could leave the exponent range the row maximum is used.
    On a CPU each chunk is processed ``CPU_ROWS`` rows at a time."""
    if chunk < 1:  # every row of ``out`` is written by the loops below only for chunk >= 1
        raise ValueError(f"chunk: must be an integer >= 1 (got {chunk})")
    if not q.is_cuda:
        chunk = min(chunk, CPU_ROWS)
    c = torch.linalg.vector_norm(q, dim=-1) * torch.linalg.vector_norm(keys, dim=-1).amax(-1, keepdim=True)  # (..., n)
    kT = keys.transpose(-1, -2)
    out = torch.empty(*q.shape[:-1], vals.shape[-1], dtype=q.dtype, device=q.device)
    if not bool(2 * c.max() < 0.9 * -math.log(torch.finfo(q.dtype).tiny)):
        for s in range(0, q.shape[-2], chunk):
            out[..., s : s + chunk, :] = torch.softmax(q[..., s : s + chunk, :] @ kT, dim=-1) @ vals
        return out
    # [vals, 1]ᵀ: (..., e + 1, N); (vᵀ Sᵀ)ᵀ is faster than S v for the skinny v in MKL
    v1T = torch.cat([vals, torch.ones_like(vals[..., :1])], dim=-1).transpose(-1, -2).contiguous()
    # one score buffer for all full chunks: a fresh multi-MB block per chunk would be fresh pages
    # from the OS each time (page faults cost about as much as the exponentials)
    buf = torch.empty(*q.shape[:-2], chunk, keys.shape[-2], dtype=q.dtype, device=q.device)
    for s in range(0, q.shape[-2], chunk):
        rows = min(chunk, q.shape[-2] - s)
        S = torch.matmul(q[..., s : s + rows, :], kT, out=buf) if rows == chunk else q[..., s : s + rows, :] @ kT
        S.sub_(c[..., s : s + rows, None]).exp_()
        nd = v1T @ S.transpose(-1, -2)  # (..., e + 1, rows)
        out[..., s : s + rows, :] = (nd[..., :-1, :] / nd[..., -1:, :]).transpose(-1, -2)
    return out
