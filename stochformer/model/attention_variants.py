"""Attention variants of the paper's remarks (SPEC §7) and per-layer random attention.

Every variant is a callable with the interface of [`stochformer.model.attention.Attention`][stochformer.model.attention.Attention]:
``attn(X, keys=None)`` maps queries X (batch, n, d) and the cloud ``keys`` (default X),
(batch, N, d), to Attn_μ(x_i): (batch, n, d). The transformer layer adds Δt · attn(X), the limit
SDE and the mean-field solver use the drift P_x attn(X), so every variant plugs in unchanged.

- [`MultiHeadAttention`][stochformer.model.attention_variants.MultiHeadAttention]: Σ_h O_h Σ_j softmax_j(⟨Q_h x_i, K_h x_j⟩) V_h x_j, Q_h, K_h, V_h
  (H, d_h, d), O_h (H, d, d_h); H = 1, d_h = d, O = I is the single head.
- [`UnnormalisedAttention`][stochformer.model.attention_variants.UnnormalisedAttention] (USA): (1/N) Σ_j e^{⟨Q x_i, K x_j⟩} V x_j.
- [`L2Attention`][stochformer.model.attention_variants.L2Attention]: Σ_j softmax_j(−|Q x_i − K x_j|²) V x_j.
- [`SinkhornAttention`][stochformer.model.attention_variants.SinkhornAttention]: Σ_j P_ij V x_j · (N/n), P the Sinkhorn scaling of e^{⟨Qx_i, Kx_j⟩}
  to row sums 1/n and column sums 1/N (for n = N: n·P is doubly stochastic), computed in log space.
- [`ResampledAttention`][stochformer.model.attention_variants.ResampledAttention]: Q, K, V drawn afresh at every call (one call = one layer), as in
  a network at initialisation: Q = √β I + σ Z_Q/√d, K = √β I + σ Z_K/√d, V = γ I + σ Z_V/√d.
- [`AveragedAttention`][stochformer.model.attention_variants.AveragedAttention]: the drift that the T/L-scaled resampled attention averages to as
  L → ∞, b̄(x_i, μ) = γ E_{Q,K}[Σ_j softmax_j(⟨Q x_i, K x_j⟩) x_j] (V's centred part averages out
  exactly), by Monte Carlo over a fixed bank of draws of (Q, K).

No 1/√d factor anywhere (SPEC §1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Optional

import torch

from .attention import reset_stream, running_stream
from ..core.validation import (
    DeviceLike,
    FiniteFloat,
    FloatDtype,
    HeadMatrices,
    Int,
    Matrices,
    Matrix,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    RealTensor,
    Seed,
    TensorCheck,
    check_int,
    check_memory,
    check_parts,
    validated,
)

#: Sinkhorn rounds: 1 to 10⁴ (as RunConfig.sinkhorn_iters)
_Iters = Annotated[int, Int(1, 10000)]
#: output projections (H, d, d_h)
_Outputs = Annotated[torch.Tensor, TensorCheck(("H", "d", "d_h"))]


def _same(owner: str, **tensors: torch.Tensor) -> None:
    """One dtype and device, and one shape, for the matrices of an attention."""
    check_parts(owner, dict(tensors))
    shapes = {tuple(t.shape) for t in tensors.values()}
    if len(shapes) > 1:
        raise ValueError(f"{owner}: {', '.join(tensors)} must have one shape (got "
                         f"{', '.join(f'{k} {tuple(t.shape)}' for k, t in tensors.items())})")

#: the ``attention_kind`` names (``softmax`` is [`stochformer.model.attention.SoftmaxAttention`][stochformer.model.attention.SoftmaxAttention])
ATTENTION_KINDS = ("softmax", "multihead", "usa", "l2", "sinkhorn", "resampled", "averaged")


def _bmat(M: torch.Tensor) -> torch.Tensor:
    """A (d, e) matrix, or a (batch, d, e) stack, ready to multiply (batch, n, e) rows: Xᵀ ↦ X Mᵀ."""
    return M.transpose(-1, -2)


@validated
@dataclass(frozen=True)
class MultiHeadAttention:
    r"""H softmax heads with an output projection (SPEC §7).

    $$
    \mathrm{Attn}(x_i) = \sum_h O_h \sum_j \mathrm{softmax}_j(\langle Q_h x_i, K_h x_j\rangle)\, V_h x_j .
    $$

    Parameters
    ----------
    Q, K, V : torch.Tensor, shape (H, d_h, d)
        Each head's query, key and value matrices.
    O : torch.Tensor, shape (H, d, d_h)
        Each head's output projection.
    """

    Q: HeadMatrices
    K: HeadMatrices
    V: HeadMatrices
    O: _Outputs  # noqa: E741 (SPEC §7 names the output projection O)

    def __post_init__(self) -> None:
        _same("MultiHeadAttention", Q=self.Q, K=self.K, V=self.V)
        H, dh, d = self.Q.shape
        check_parts("MultiHeadAttention", {"Q": self.Q, "O": self.O})
        if tuple(self.O.shape) != (H, d, dh):
            raise ValueError(f"O: must have shape (H, d, d_h) = {(H, d, dh)} (got {tuple(self.O.shape)})")

    @property
    def d(self) -> int:
        return int(self.Q.shape[-1])

    def __call__(self, X: torch.Tensor, keys: Optional[torch.Tensor] = None) -> torch.Tensor:
        keys = X if keys is None else keys
        q = torch.einsum("hed,bnd->bhne", self.Q, X)  # (batch, H, n, d_h)
        k = torch.einsum("hed,bnd->bhne", self.K, keys)
        v = torch.einsum("hed,bnd->bhne", self.V, keys)
        heads = torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v  # (batch, H, n, d_h)
        return torch.einsum("hde,bhne->bnd", self.O, heads)

    @classmethod
    @validated
    def split(cls, Q: Matrix, K: Matrix, V: Matrix, heads: PositiveInt) -> "MultiHeadAttention":
        """Heads from d×d matrices: head h takes rows h·d_h … (h+1)·d_h − 1 of Q, K, V (d_h = d/H)
        and O concatenates the heads (O_h = the columns of I for those rows). H = 1 is the single
        head ⟨Q x, K y⟩, V.

        Parameters
        ----------
        Q, K, V : torch.Tensor, shape (d, d)
            Query, key and value matrices.
        heads : int
            H, a divisor of d.

        Returns
        -------
        MultiHeadAttention
            The H heads.
        """
        _same("MultiHeadAttention.split", Q=Q, K=K, V=V)
        d = Q.shape[-1]
        if d % heads:
            raise ValueError(f"heads: must divide d = {d} (got {heads})")
        dh = d // heads
        eye = torch.eye(d, dtype=Q.dtype, device=Q.device)
        O = eye.reshape(d, heads, dh).permute(1, 0, 2)  # noqa: E741  O_h = I[:, rows of head h]
        return cls(Q.reshape(heads, dh, d), K.reshape(heads, dh, d), V.reshape(heads, dh, d), O.contiguous())


@validated
@dataclass(frozen=True)
class UnnormalisedAttention:
    r"""Unnormalised self-attention (USA),

    $$
    \mathrm{Attn}(x_i) = \frac{1}{N} \sum_j e^{\langle x_i, A x_j\rangle}\, V x_j, \qquad A = Q^\top K .
    $$

    Parameters
    ----------
    A : torch.Tensor, shape (d, d)
        The score matrix Qᵀ K.
    V : torch.Tensor, shape (d, d)
        The value matrix.
    """

    A: Matrix
    V: Matrix

    def __post_init__(self) -> None:
        _same("UnnormalisedAttention", A=self.A, V=self.V)

    @property
    def d(self) -> int:
        return int(self.A.shape[-1])

    def __call__(self, X: torch.Tensor, keys: Optional[torch.Tensor] = None) -> torch.Tensor:
        keys = X if keys is None else keys
        W = torch.exp((X @ self.A) @ keys.transpose(-1, -2))
        return W @ (keys @ _bmat(self.V)) / keys.shape[-2]


@validated
@dataclass(frozen=True)
class L2Attention:
    """Σ_j softmax_j(−|Q x_i − K x_j|²) V x_j; ``Q, K, V``: (d, d). With Q = K = √(β/2) I and unit
    tokens the weights equal softmax_j(β⟨x_i, x_j⟩) (−(β/2)|x − y|² = β⟨x, y⟩ − β).

    Parameters
    ----------
    Q, K, V : torch.Tensor, shape (d, d)
        Query, key and value matrices.
    """

    Q: Matrix
    K: Matrix
    V: Matrix

    def __post_init__(self) -> None:
        _same("L2Attention", Q=self.Q, K=self.K, V=self.V)

    @property
    def d(self) -> int:
        return int(self.Q.shape[-1])

    def __call__(self, X: torch.Tensor, keys: Optional[torch.Tensor] = None) -> torch.Tensor:
        keys = X if keys is None else keys
        q, k = X @ _bmat(self.Q), keys @ _bmat(self.K)
        scores = -((q * q).sum(-1, keepdim=True) - 2 * q @ k.transpose(-1, -2) + (k * k).sum(-1).unsqueeze(-2))
        return torch.softmax(scores, dim=-1) @ (keys @ _bmat(self.V))


@validated
def sinkhorn_log(scores: RealTensor, iters: _Iters, tol: Optional[PositiveFloat] = None) -> torch.Tensor:
    """log P for P = diag(a) e^{scores} diag(b) with row sums 1/n and column sums 1/N:
    scores (..., n, N). Alternating row and column normalisations in log space, ``iters`` times
    at most, stopping early once every row sum is within ``tol`` of 1/n (after a column step the
    columns are exact).

    Parameters
    ----------
    scores : torch.Tensor, shape (..., n, N)
        The log-kernel, finite.
    iters : int
        The most normalisation rounds (row, then column).
    tol : float, optional
        Stop once every row sum is within ``tol`` of 1/n.

    Returns
    -------
    torch.Tensor, shape (..., n, N)
        log P.
    """
    if scores.dim() < 2:
        raise ValueError(f"scores: expected a tensor of shape (..., n, N), got shape {tuple(scores.shape)}")
    return _sinkhorn_log(scores, iters, tol)


def _sinkhorn_log(scores: torch.Tensor, iters: int, tol: Optional[float] = None) -> torch.Tensor:
    n, N = scores.shape[-2], scores.shape[-1]
    log_r, log_c = -math.log(n), -math.log(N)
    logP = scores
    for _ in range(iters):
        logP = logP - torch.logsumexp(logP, dim=-1, keepdim=True) + log_r
        logP = logP - torch.logsumexp(logP, dim=-2, keepdim=True) + log_c
        if tol is not None and float((torch.logsumexp(logP, dim=-1).exp() * n - 1).abs().max()) <= tol:
            break
    return logP


@validated
@dataclass(frozen=True)
class SinkhornAttention:
    """Attn(x_i) = Σ_j S_ij V x_j, S = n·P with P of [`sinkhorn_log`][stochformer.model.attention_variants.sinkhorn_log] applied to
    ⟨Q x_i, K x_j⟩ = x_iᵀ A x_j: rows of S sum to 1, columns to n/N (doubly stochastic for n = N).
    ``iters`` normalisation rounds, or fewer once ``tol`` is met.

    Parameters
    ----------
    A : torch.Tensor, shape (d, d)
        The score matrix Qᵀ K.
    V : torch.Tensor, shape (d, d)
        The value matrix.
    iters : int, optional
        The most Sinkhorn rounds.
    tol : float, optional
        Stop once the row sums are within ``tol``.
    """

    A: Matrix
    V: Matrix
    iters: _Iters = 20
    tol: Optional[PositiveFloat] = None

    def __post_init__(self) -> None:
        _same("SinkhornAttention", A=self.A, V=self.V)

    @property
    def d(self) -> int:
        return int(self.A.shape[-1])

    def weights(self, X: torch.Tensor, keys: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The doubly stochastic weights S = n·P.

        Parameters
        ----------
        X : torch.Tensor, shape (batch, n, d)
            The queries.
        keys : torch.Tensor, optional, shape (batch, N, d)
            The cloud (default X).

        Returns
        -------
        torch.Tensor, shape (batch, n, N)
            S, rows summing to 1.
        """
        keys = X if keys is None else keys
        logP = _sinkhorn_log((X @ self.A) @ keys.transpose(-1, -2), self.iters, self.tol)
        return logP.exp() * X.shape[-2]

    def __call__(self, X: torch.Tensor, keys: Optional[torch.Tensor] = None) -> torch.Tensor:
        keys = X if keys is None else keys
        return self.weights(X, keys) @ (keys @ _bmat(self.V))


def _softmax_average(X: torch.Tensor, keys: torch.Tensor, Q: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    """Σ_j softmax_j(⟨Q x_i, K x_j⟩) x_j for stacks Q, K (..., d, d) broadcast against X (..., n, d)."""
    scores = (X @ _bmat(Q)) @ (keys @ _bmat(K)).transpose(-1, -2)
    return torch.softmax(scores, dim=-1) @ keys


@validated
@dataclass
class ResampledAttention:
    """Per-layer random attention: every call draws, for each sample of the batch,
    Q = √β I + σ Z_Q/√d, K = √β I + σ Z_K/√d, V = γ I + σ Z_V/√d (Z i.i.d. N(0, 1)), and returns
    Σ_j softmax_j(⟨Q x_i, K x_j⟩) V x_j. One call is one layer (the post-LN transformer calls
    attention once per layer).

    ``seed``: None (the default) draws from the run's attention stream, given to
    [`reset`][stochformer.model.attention_variants.ResampledAttention.reset] at the start of every
    run (see [`RandomAttention`][stochformer.model.attention.RandomAttention]): the draws change
    with the run's seed and leave the run's generator to the noise. An integer fixes the draws
    instead: every run starts again from ``seed``.

    Parameters
    ----------
    d : int
        Token dimension, >= 2.
    beta : float, optional
        The mean score scale β, >= 0.
    gamma : float, optional
        The mean value scale γ.
    std : float, optional
        σ, the fluctuation's scale, >= 0.
    seed : int, optional
        None: the run's attention stream; an integer: fixed draws, the same in every run.
    """

    d: PositiveInt
    beta: NonNegativeFloat = 1.0
    gamma: FiniteFloat = 1.0
    std: NonNegativeFloat = 1.0
    seed: Optional[Seed] = None
    _gen: Optional[torch.Generator] = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        check_int("d", self.d, 2)
        check_memory("d", 8.0 * self.d * self.d)  # its identity and per-sample draws are d x d

    def reset(self, batch, d, generator, dtype, device) -> None:
        """The start of a run: the draws come from ``generator`` (the run's attention stream), or
        start again from ``seed`` when one is fixed (a model object reused for a run with the same
        seed gives that run's numbers).

        Parameters
        ----------
        batch : int
            Independent samples of the run.
        d : int
            Token dimension.
        generator : torch.Generator
            The run's attention stream.
        dtype : torch.dtype
            The tokens' dtype.
        device : str or torch.device
            The tokens' device.
        """
        self._gen = reset_stream(self.seed, generator, device)

    def draw(self, batch: int, dtype, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Draw the matrices of one layer from the run's attention stream (or from ``seed``).

        Parameters
        ----------
        batch : int
            Independent draws.
        dtype : torch.dtype
            Their dtype.
        device : str or torch.device
            Their device.

        Returns
        -------
        tuple of torch.Tensor
            (Q, K, V), each (batch, d, d).
        """
        gen = self._gen = running_stream("ResampledAttention", self._gen, self.seed, device)
        eye = torch.eye(self.d, dtype=dtype, device=device)
        Z = torch.randn(3, batch, self.d, self.d, generator=gen, dtype=dtype, device=device)
        Z = Z * (self.std / math.sqrt(self.d))
        s = math.sqrt(self.beta)
        return s * eye + Z[0], s * eye + Z[1], self.gamma * eye + Z[2]

    def __call__(self, X: torch.Tensor, keys: Optional[torch.Tensor] = None) -> torch.Tensor:
        keys = X if keys is None else keys
        Q, K, V = self.draw(X.shape[0], X.dtype, X.device)
        scores = (X @ _bmat(Q)) @ (keys @ _bmat(K)).transpose(-1, -2)
        return torch.softmax(scores, dim=-1) @ (keys @ _bmat(V))


@validated
@dataclass(frozen=True)
class AveragedAttention:
    """The averaged drift of [`ResampledAttention`][stochformer.model.attention_variants.ResampledAttention],
    b̄(x_i, μ) = γ E_{Q,K}[Σ_j softmax_j(⟨Q x_i, K x_j⟩) x_j], by the mean over ``Q, K``:
    (M, d, d), a fixed bank of M draws (the same for every sample and step).

    Parameters
    ----------
    Q, K : torch.Tensor, shape (M, d, d)
        The bank of draws.
    gamma : float, optional
        The value scale γ.
    """

    Q: Matrices
    K: Matrices
    gamma: FiniteFloat = 1.0

    def __post_init__(self) -> None:
        _same("AveragedAttention", Q=self.Q, K=self.K)

    @property
    def d(self) -> int:
        return int(self.Q.shape[-1])

    @classmethod
    @validated
    def from_law(cls, d: PositiveInt, beta: NonNegativeFloat, gamma: FiniteFloat, std: NonNegativeFloat, draws: PositiveInt,
                 seed: Seed, dtype: FloatDtype = torch.float64, device: DeviceLike = "cpu") -> "AveragedAttention":
        """A bank of ``draws`` (Q, K) from the law of [`ResampledAttention`][stochformer.model.attention_variants.ResampledAttention] (seeded by ``seed``).

        Parameters
        ----------
        d : int
            Token dimension.
        beta : float
            The mean score scale β, >= 0.
        gamma : float
            The value scale γ.
        std : float
            σ, >= 0.
        draws : int
            M, the bank's size.
        seed : int
            Seed of the draws.
        dtype : torch.dtype, optional
            The bank's dtype.
        device : str or torch.device, optional
            Its device.

        Returns
        -------
        AveragedAttention
            The averaged drift over the bank.
        """
        check_memory("draws, d", 4.0 * draws * d * d * dtype.itemsize)
        Q, K, _ = ResampledAttention(d, beta, gamma, std, seed).draw(draws, dtype, device)
        return cls(Q, K, gamma)

    def __call__(self, X: torch.Tensor, keys: Optional[torch.Tensor] = None) -> torch.Tensor:
        keys = X if keys is None else keys
        out = _softmax_average(X.unsqueeze(-3), keys.unsqueeze(-3), self.Q, self.K)  # (batch, M, n, d)
        return self.gamma * out.mean(-3)
