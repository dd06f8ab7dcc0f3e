"""Softmax self-attention on token clouds (SPEC §1, §4).

``Attn_X(x_i) = Σ_j softmax_j(⟨Q x_i, K x_j⟩) V x_j`` with no 1/√d factor. Only ``A = Qᵀ K`` and
``V`` enter. The special case Qᵀ K = βI, V = γI is stored as scalars.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Annotated, ClassVar, Iterator, Optional, Protocol, runtime_checkable

import torch
import torch.nn.functional as F

from ..core.runtime import make_generator, stream
from ..core.validation import (
    Bool,
    DeviceLike,
    FiniteFloat,
    FloatDtype,
    Int,
    Matrix,
    PositiveFloat,
    PositiveInt,
    Seed,
    check_int,
    check_parts,
    check_tensor,
    same_device,
    validated,
)


#: Entries of one attention (or Gram) block formed at once: 2²² ≈ 4·10⁶ (32 MiB in float64).
DEFAULT_BLOCK = 1 << 22
#: On a CPU a query chunk is processed at most this many rows at a time: larger score blocks fall
#: out of cache (measured fastest for N = 10⁴–4·10⁴, d = 16; docs/benchmarks.md).
CPU_ROWS = 64


def query_chunk(N: int, block: int = DEFAULT_BLOCK) -> int:
    """Query rows per attention chunk so that a (chunk, N) score block has at most ``block``
    entries (at least one row): working memory O(block + N d) per sample.

    Parameters
    ----------
    N : int
        Keys (tokens of the cloud), >= 1.
    block : int, optional
        The most score entries formed at once.

    Returns
    -------
    int
        Query rows per chunk, in 1..N.
    """
    return max(1, min(N, block // N))


class Attention(Protocol):
    """What the models call: the drift field of the cloud at the queries (SPEC §1).

    Any callable ``attention(X, keys=None)`` with queries X (batch, n, d) and the cloud ``keys``
    (default X) (batch, N, d), returning (batch, n, d), plugs in. An attention that draws random
    numbers is a [`RandomAttention`][stochformer.model.attention.RandomAttention]: it also has
    ``reset``, called at the start of every run.

    Examples
    --------
    >>> import torch
    >>> import stochformer as sf
    >>> def mean_field(X, keys=None):               # uniform weights: Attn(x) = mean of the cloud
    ...     keys = X if keys is None else keys
    ...     return keys.mean(dim=-2, keepdim=True).expand_as(X)
    >>> model = sf.Transformer(attention=mean_field)
    >>> X0 = sf.sphere.uniform(batch=1, N=4, d=3, seed=0)
    >>> sf.solve(model, X0, T=1.0, steps=5, seed=0).X_final.shape
    (1, 4, 3)
    """

    def __call__(self, X: torch.Tensor, keys: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Attn_μ(x_i) for queries X: (batch, n, d) against the cloud ``keys`` (default X): (batch, N, d)."""


@runtime_checkable
class RandomAttention(Attention, Protocol):
    """An [`Attention`][stochformer.model.attention.Attention] that draws random numbers (per
    layer or per call): ``reset(batch, d, generator, dtype, device)`` starts its draws at the start
    of every run, as a noise source's ``reset`` does.

    The ``generator`` it receives is the run's ``"attention"`` stream,
    [`stream(run_generator, "attention")`][stochformer.core.runtime.stream], not the run's generator
    itself: its draws change with the run's seed (runs of one model object with seeds 0, 1, …
    are independent), the same seed on the same object gives the same numbers, and the run's
    generator is left to the noise, whose draws are then those of the same model with a
    deterministic attention (the exact softmax, the averaged drift), so that the two can be
    compared path by path.
    """

    def reset(self, batch: int, d: int, generator: torch.Generator, dtype: torch.dtype, device) -> None:
        """Start the draws of a run from ``generator``, the run's attention stream.

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


def start_run(attention: object, batch: int, d: int, generator: torch.Generator, dtype: torch.dtype, device) -> None:
    """The start of a run with the run's ``generator`` for ``attention``: a
    [`RandomAttention`][stochformer.model.attention.RandomAttention] is reset with the run's
    ``"attention"`` stream ([`stream`][stochformer.core.runtime.stream]; the run's generator is not
    drawn from); any other ``attention`` (a deterministic callable, None) has nothing to start.

    Parameters
    ----------
    attention : object
        The attention (None or a deterministic callable: nothing to do).
    batch : int
        Independent samples of the run.
    d : int
        Token dimension.
    generator : torch.Generator
        The run's generator (not drawn from).
    dtype : torch.dtype
        The tokens' dtype.
    device : str or torch.device
        The tokens' device.
    """
    if isinstance(attention, RandomAttention):
        attention.reset(batch, d, stream(generator, "attention", device), dtype, device)


@validated
@dataclass(frozen=True)
class SoftmaxAttention:
    r"""Softmax self-attention of SPEC §1, with score matrix $A = Q^\top K$ (or $\beta I$) and value matrix $V$ (or $\gamma I$):

    $$
    \mathrm{Attn}_X(x_i) = \sum_{j=1}^{N} \frac{e^{\langle x_i, A\,x_j\rangle}}{\sum_{k=1}^{N} e^{\langle x_i, A\,x_k\rangle}}\,V x_j .
    $$

    γ = 1 is attractive, γ = 0 no attention, γ = −1 repulsive.

    Parameters
    ----------
    beta : float, optional
        The inverse temperature β of $A = \beta I$ (finite), unless ``A`` is given.
    gamma : float, optional
        γ of $V = \gamma I$ (finite), unless ``V`` is given.
    A : torch.Tensor, shape (d, d), optional
        An explicit score matrix $Q^\top K$ (see [`from_matrices`][stochformer.model.attention.SoftmaxAttention.from_matrices]).
    V : torch.Tensor, shape (d, d), optional
        An explicit value matrix.
    chunk : int, optional
        Query tokens processed at once (at most `CPU_ROWS` on a CPU); None computes the dense
        (N, N) score matrix. Chunking keeps memory linear in N for the many-token solver (SPEC §4);
        where the tokens require grad the dense product is used (the graph keeps every score block).
    sdpa : bool, optional
        Use ``torch.nn.functional.scaled_dot_product_attention`` with scale 1 (fused,
        memory-efficient kernels: CPU flash attention, CUDA memory-efficient/flash attention)
        instead; float64 on CUDA has no such kernel and falls back to the chunked path.

    Raises
    ------
    ValueError
        A non-finite field, or ``A`` and ``V`` of different shapes, naming the field.

    Examples
    --------
    >>> import torch
    >>> import stochformer as sf
    >>> attn = sf.SoftmaxAttention(beta=2.0, gamma=1.0)
    >>> X = sf.sphere.uniform(batch=1, N=3, d=3, seed=0)
    >>> out = attn(X)                               # (batch, N, d): a convex combination of the tokens
    >>> out.shape, bool(out.norm(dim=-1).max() <= 1 + 1e-12)
    (torch.Size([1, 3, 3]), True)
    """

    beta: FiniteFloat = 1.0
    gamma: FiniteFloat = 1.0
    A: Optional[Matrix] = None  # (d, d), overrides beta
    V: Optional[Matrix] = None  # (d, d), overrides gamma
    chunk: Optional[PositiveInt] = None
    sdpa: Bool = False
    #: its calls can be captured ([`stochformer.core.capture`][stochformer.core.capture]): tensor operations only
    capture_safe: ClassVar[bool] = True

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
        without V the value γI.

        Parameters
        ----------
        d : int
            Token dimension, >= 2.
        beta : float, optional
            The score scale where neither Q nor K is given.
        gamma : float, optional
            The value scale where V is not given.
        Q, K, V : array_like, optional
            d × d finite matrices.
        dtype : torch.dtype, optional
            The matrices' dtype.
        device : str or torch.device, optional
            Their device.
        chunk : int, optional
            Query rows per chunk (None: all at once).
        sdpa : bool, optional
            Use ``torch.nn.functional.scaled_dot_product_attention``.

        Returns
        -------
        SoftmaxAttention
            The attention with ``A`` and ``V`` set (or β, γ).
        """
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
        product with the values (2N²d, and 2Nd² for X Vᵀ with V).

        Parameters
        ----------
        N : int
            Tokens.
        d : int
            Token dimension.

        Returns
        -------
        float
            Flops per sample.
        """
        scores = N * (N + 1.0) * d if self.A is None else 2.0 * N * d * (d + N)
        return scores + 2.0 * N * N * d + (0.0 if self.V is None else 2.0 * N * d * d)

    def __call__(self, X: torch.Tensor, keys: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Attn_μ(x_i) for queries X: (batch, n, d) against the cloud ``keys`` (default X): (batch, N, d)."""
        keys = X if keys is None else keys
        q, vals = self._queries(X), self._values(keys)
        if self.sdpa and not (X.is_cuda and X.dtype == torch.float64):
            out = F.scaled_dot_product_attention(q.unsqueeze(-3), keys.unsqueeze(-3), vals.unsqueeze(-3), scale=1.0)
            return out.squeeze(-3)
        grad = torch.is_grad_enabled() and (q.requires_grad or vals.requires_grad)
        if self.chunk is None or X.shape[-2] <= self.chunk or grad:  # a graph keeps every score block anyway
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


@validated
@dataclass
class RandomBatchAttention:
    """Random-batch attention (Jin, Li, Liu, J. Comput. Phys. 400, 2020) for the many-token solver
    (SPEC §4): at every call the N tokens of each sample are split, by a uniform random
    permutation, into batches of ``p`` (the last batch takes the remainder: p to 2p − 1 tokens),
    and token i attends only to its batch-mates, self excluded:

        Attn(x_i) ≈ Σ_{j ∈ B(i), j ≠ i} softmax_j(⟨Q x_i, K x_j⟩) V x_j.

    Numerator and denominator are unbiased for the sums over j ≠ i, so the error against the exact
    attention is a bias O(1/p) (from their ratio and the self term, which exact attention includes
    with weight O(1/N)) and a fluctuation of variance O(1/p) that is redrawn at every step and
    averages out over steps (Jin–Li–Liu: the strong error of the dynamics is O(√(Δt/p))). Cost
    O(N p d) and memory O(N d) per sample instead of O(N² d): at N ≥ 10⁵ tokens the exact step is
    out of reach on a CPU and this one is not (docs/benchmarks.md, "Random-batch attention").

    ``exact``: the attention whose scores and values are used (β, γ or A, V of
    [`SoftmaxAttention`][stochformer.model.attention.SoftmaxAttention]; its ``chunk`` and ``sdpa`` do not apply). ``p``: tokens per batch
    (≥ 2). ``seed``: None (the default) draws the permutations from the run's attention stream
    (given to [`reset`][stochformer.model.attention.RandomBatchAttention.reset] at the start of every
    run: they change with the run's seed, and the run's noise draws are the same as with the exact
    attention, so the two can be compared path by path); an integer fixes them instead, the same in
    every run. Only self-attention (``keys=None``).

    Parameters
    ----------
    exact : SoftmaxAttention
        The attention whose scores and values are used.
    p : int
        Tokens per batch, >= 2.
    seed : int, optional
        None: the run's attention stream; an integer: fixed permutations, the same in every run.
    """

    exact: SoftmaxAttention
    p: Annotated[int, Int(2)]
    seed: Optional[Seed] = None
    _gen: Optional[torch.Generator] = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.exact, SoftmaxAttention):
            raise TypeError(f"exact: must be a SoftmaxAttention (got {type(self.exact).__name__})")

    @property
    def d(self) -> Optional[int]:
        return self.exact.d

    def reset(self, batch, d, generator, dtype, device) -> None:
        """The start of a run: the permutations are drawn from ``generator`` (the run's attention
        stream), or start again from ``seed`` when one is fixed.

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

    def flops(self, N: int, d: int) -> float:
        """Matrix-product flops per sample: 4 N p d for the scores and their product with the values
        (plus the d × d products of A and V, as in [`SoftmaxAttention.flops`][stochformer.model.attention.SoftmaxAttention.flops]).

        Parameters
        ----------
        N : int
            Tokens.
        d : int
            Token dimension.

        Returns
        -------
        float
            Flops per sample.
        """
        extra = (0.0 if self.exact.A is None else 2.0 * N * d * d) + (0.0 if self.exact.V is None else 2.0 * N * d * d)
        return 4.0 * N * min(self.p, N) * d + extra

    def __call__(self, X: torch.Tensor, keys: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The random-batch estimate of Attn_μ(x_i) for the tokens X: (batch, N, d) → (batch, N, e)."""
        if keys is not None and keys is not X:
            raise ValueError("RandomBatchAttention: the batches are drawn among the tokens themselves (keys must be None)")
        B, N, d = X.shape
        if N < 2:
            raise ValueError(f"RandomBatchAttention: needs N >= 2 tokens, each attending to others (got N = {N})")
        gen = self._gen = running_stream("RandomBatchAttention", self._gen, self.seed, X.device)
        perm = torch.stack([torch.randperm(N, generator=gen, device=X.device) for _ in range(B)])
        rows = (perm + N * torch.arange(B, device=X.device).unsqueeze(-1)).flatten()  # into (B·N, ·)
        Xp = X.reshape(B * N, d).index_select(0, rows).view(B, N, d)
        q, vals = self.exact._queries(Xp), self.exact._values(Xp)
        e = vals.shape[-1]
        n_full = max(N // self.p - 1, 0)  # batches of exactly p; the last batch has the rest
        head = n_full * self.p
        out = torch.empty(B, N, e, dtype=vals.dtype, device=X.device)
        if n_full:
            out[:, :head] = _within(q[:, :head].reshape(B, n_full, self.p, d), Xp[:, :head].reshape(B, n_full, self.p, d),
                                    vals[:, :head].reshape(B, n_full, self.p, e)).reshape(B, head, e)
        out[:, head:] = _within(q[:, head:].unsqueeze(1), Xp[:, head:].unsqueeze(1), vals[:, head:].unsqueeze(1)).squeeze(1)
        return torch.empty_like(out).view(B * N, e).index_copy_(0, rows, out.view(B * N, e)).view(B, N, e)


#: the precisions of [`GuardedAttention`][stochformer.model.attention.GuardedAttention]: name → (the
#: dtype its inputs are cast to, whether CUDA's products run on TensorFloat-32 tensor cores)
PRECISIONS: dict[str, tuple[torch.dtype, bool]] = {
    "float32": (torch.float32, False), "tf32": (torch.float32, True), "float16": (torch.float16, False),
}


class PrecisionError(ValueError):
    """A [`GuardedAttention`][stochformer.model.attention.GuardedAttention]'s low-precision output
    differs from the float64 attention at its guard rows by more than its tolerance."""


@validated
@dataclass
class GuardedAttention:
    r"""Softmax attention computed in a low precision, checked at every call against float64 on a
    random sample of queries (SPEC §4: the many-token solver).

    All n queries are computed by ``inner`` with its inputs (queries, keys, A, V) cast to the
    ``precision``'s dtype, the fused kernel of ``scaled_dot_product_attention`` where ``inner`` has
    ``sdpa`` (always for float16: the softmax is then accumulated in float32), and the output cast
    back to the tokens' dtype. Then, at the same call, ``inner`` in float64 is evaluated at m =
    min(``guard_queries``, n) query rows (drawn without replacement from the run's attention
    stream, the same rows in every sample; all rows when m = n) against all N keys, and the error
    of each of those rows, $e_i = |\mathrm{Attn}^{\mathrm{low}}(x_i) - \mathrm{Attn}^{64}(x_i)|$ (Euclidean
    norm over the value components), is recorded: its maximum and RMS over the rows and samples
    ([`record`][stochformer.model.attention.GuardedAttention.record]). The call fails if

    $$
    \max_i e_i > \mathrm{tol} \cdot N^{-1/2},
    $$

    the fluctuation of the empirical attention about the mean-field attention being of order
    $N^{-1/2}$ (for values of norm about 1): with the default tol = 0.1 the precision's error
    stays an order of magnitude below the particle noise. The guard costs m/n of a float64 step.

    Precisions: ``"float32"`` (rounding 2⁻²⁴ ≈ 6·10⁻⁸: errors ~10⁻⁷ at moderate β and N);
    ``"tf32"``, float32 with TensorFloat-32 products on CUDA (``torch.backends.cuda.matmul.allow_tf32``
    and ``torch.backends.cudnn.allow_tf32`` on during the call; 10-bit significand; it changes the
    cuBLAS products of the query-chunked path, the fused kernels choose their own), refused on a
    CPU, which has no such mode; ``"float16"`` (10-bit significand; the fused kernels accumulate in
    float32 but write float16, so the output carries a rounding of up to 2⁻¹²|Attn| per component:
    about 10⁻⁴ per row once the tokens cluster and |Attn| nears 1, the tolerance at N = 10⁶, where
    the guard may stop the run). bfloat16 is not offered: its 8-bit significand rounds the scores
    and the output at 2⁻⁹ ≈ 2·10⁻³, the particle noise of N = 2.5·10⁵ tokens, too coarse for
    synchronisation statistics at the sizes where a low precision pays.

    Parameters
    ----------
    inner : SoftmaxAttention
        The attention (β, γ or A, V; its ``chunk`` and ``sdpa``); its float64 evaluation is the guard's reference.
    precision : {"float32", "tf32", "float16"}, optional
        The precision of the full evaluation.
    guard_queries : int, optional
        Query rows checked in float64 at every call, >= 1.
    tol : float, optional
        The tolerance of the largest row error in units of $N^{-1/2}$ (N: the keys), > 0.
    seed : int, optional
        None (the default): the guard rows are drawn from the run's attention stream (given to
        [`reset`][stochformer.model.attention.GuardedAttention.reset] by ``solve``: the same run
        seed gives the same rows, and the run's noise is that of ``inner`` alone); an integer:
        drawn from a generator of that seed instead (also outside a run).

    Raises
    ------
    ValueError
        An unknown precision (bfloat16 with the reason), naming ``precision``; at the start of a
        run, ``"tf32"`` off CUDA or a precision the device's fused kernel does not support.
    PrecisionError
        At a call, the largest row error above the tolerance (a ``ValueError``; the message gives
        the error, the tolerance, N and the call).

    Examples
    --------
    >>> import stochformer as sf
    >>> from stochformer.model.attention import GuardedAttention
    >>> attn = GuardedAttention(sf.SoftmaxAttention(beta=2.0, sdpa=True), "float32", guard_queries=64, seed=0)
    >>> X = sf.sphere.uniform(batch=1, N=500, d=8, seed=0)
    >>> out = attn(X)                               # float64 out, computed in float32
    >>> out.dtype, attn.record["max_error"] < 1e-6 < attn.record["tolerance"]
    (torch.float64, True)
    """

    inner: SoftmaxAttention
    precision: str = "float32"
    guard_queries: PositiveInt = 1024
    tol: PositiveFloat = 0.1
    seed: Optional[Seed] = None
    _gen: Optional[torch.Generator] = field(default=None, init=False, repr=False)
    _parts: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _record: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _rows: Optional[torch.Tensor] = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.precision in ("bfloat16", "bf16"):
            raise ValueError("precision: bfloat16 is not offered: its 8-bit significand rounds at 2^-9 ≈ 2e-3, the "
                             "particle noise N^-1/2 of N = 2.5e5 tokens; valid: " + ", ".join(map(repr, PRECISIONS)))
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision: must be one of {', '.join(map(repr, PRECISIONS))} (got {self.precision!r})")
        self._clear()

    @property
    def d(self) -> Optional[int]:
        return self.inner.d

    @property
    def record(self) -> dict:
        """The guard's record since the run's start: ``calls``; ``max_error``, the largest row error
        of any call; ``last_max_error``, ``last_rms_error``, the largest and the RMS row error of the
        last call; ``tolerance``, tol·N^{-1/2} of the last call (NaN before the first call).

        Returns
        -------
        dict
            The record (floats, ``calls`` an int).
        """
        return dict(self._record)

    @property
    def rows(self) -> Optional[torch.Tensor]:
        """The query rows the last call checked, shape (m,) (None before the first call)."""
        return self._rows

    def _clear(self) -> None:
        nan = float("nan")
        self._record.update(calls=0, max_error=0.0, last_max_error=nan, last_rms_error=nan, tolerance=nan)
        self._rows = None

    def _pair(self, device) -> tuple[SoftmaxAttention, SoftmaxAttention]:
        """(the low-precision attention, the float64 one) on ``device``, built once per device."""
        key = str(torch.device(device))
        if key not in self._parts:
            dtype, tf32 = PRECISIONS[self.precision]
            if tf32 and torch.device(device).type != "cuda":
                raise ValueError(f"precision: 'tf32' (TensorFloat-32 products) exists on CUDA only, the tokens are "
                                 f"on {key}: use 'float32'")
            low = self._cast(dtype, device, sdpa=self.inner.sdpa or dtype == torch.float16)
            if low.sdpa:
                try:
                    probe = torch.zeros(1, 1, 2, 2, dtype=dtype, device=device)
                    F.scaled_dot_product_attention(probe, probe, probe, scale=1.0)
                except RuntimeError as exc:
                    raise ValueError(f"precision: {self.precision} has no fused attention kernel on {key} "
                                     f"({str(exc).splitlines()[0][:120]})") from None
            self._parts[key] = (low, self._cast(torch.float64, device, sdpa=self.inner.sdpa))
        return self._parts[key]

    def _cast(self, dtype: torch.dtype, device, sdpa: bool) -> SoftmaxAttention:
        A, V = (None if M is None else M.to(dtype=dtype, device=device) for M in (self.inner.A, self.inner.V))
        return dataclasses.replace(self.inner, A=A, V=V, sdpa=sdpa)

    def reset(self, batch: int, d: int, generator: torch.Generator, dtype: torch.dtype, device) -> None:
        """The start of a run: the guard rows are drawn from ``generator`` (the run's attention
        stream), or from ``seed`` again when one is fixed; the record starts afresh; ``precision``
        is checked on ``device``.

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
        self._pair(device)
        self._gen = reset_stream(self.seed, generator, device)
        self._clear()

    def _fast(self, low: SoftmaxAttention, X: torch.Tensor, keys: Optional[torch.Tensor]) -> torch.Tensor:
        """``low`` at every query, inputs cast to its dtype, output in X's dtype."""
        dtype, tf32 = PRECISIONS[self.precision]
        with _tf32(tf32 and X.is_cuda):
            return low(X.to(dtype), None if keys is None else keys.to(dtype)).to(X.dtype)

    def __call__(self, X: torch.Tensor, keys: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Attn_μ(x_i) in ``precision`` for queries X: (batch, n, d) against ``keys`` (default X):
        (batch, N, d), returned in X's dtype after the float64 check of the guard rows."""
        low, ref = self._pair(X.device)
        out = self._fast(low, X, keys)
        n, N = X.shape[-2], (X if keys is None else keys).shape[-2]
        m = min(self.guard_queries, n)
        if m < n:
            self._gen = gen = running_stream("GuardedAttention", self._gen, self.seed, X.device)
            rows = torch.randperm(n, generator=gen, device=X.device)[:m]
        else:
            rows = torch.arange(n, device=X.device)
        X64 = X.to(torch.float64)
        exact = ref(X64.index_select(-2, rows), X64 if keys is None else keys.to(torch.float64))
        err = torch.linalg.vector_norm(out.index_select(-2, rows).to(torch.float64) - exact, dim=-1)
        worst, rms, tol = float(err.max()), float(err.square().mean().sqrt()), self.tol / math.sqrt(N)
        r = self._record
        r.update(calls=r["calls"] + 1, max_error=max(r["max_error"], worst), last_max_error=worst, last_rms_error=rms,
                 tolerance=tol)
        self._rows = rows
        if not worst <= tol:  # NaN included
            raise PrecisionError(
                f"precision: the {self.precision} attention is off the float64 one by {worst:.3g} (largest of {m} guard "
                f"rows; RMS {rms:.3g}) at call {r['calls']}, above the tolerance tol·N^-1/2 = {tol:.3g} (tol = "
                f"{self.tol:g}, N = {N}): use a finer precision or, knowingly, a larger tol")
        return out


@contextlib.contextmanager
def _tf32(on: bool) -> Iterator[None]:
    """Within: CUDA's float32 products on TensorFloat-32 tensor cores when ``on`` (restored after)."""
    if not on:
        yield
        return
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def reset_stream(seed: Optional[int], generator: torch.Generator, device) -> torch.Generator:
    """A random attention's generator for a run: ``generator`` (the run's attention stream), or a
    fresh one from a fixed ``seed``.

    Parameters
    ----------
    seed : int or None
        The attention's fixed seed (None: the run's stream).
    generator : torch.Generator
        The run's attention stream.
    device : str or torch.device
        Where a fresh generator draws.

    Returns
    -------
    torch.Generator
        The generator of the run's draws.
    """
    return generator if seed is None else make_generator(seed, device)


def running_stream(owner: str, gen: Optional[torch.Generator], seed: Optional[int], device) -> torch.Generator:
    """The generator a random attention draws from at a call on ``device``: the one of its run, or
    (called outside a run) a fresh one from its fixed ``seed``.

    Parameters
    ----------
    owner : str
        The attention's class name, for the message.
    gen : torch.Generator or None
        The generator its run's ``reset`` gave it.
    seed : int or None
        Its fixed seed.
    device : str or torch.device
        Where the call draws.

    Returns
    -------
    torch.Generator
        The generator to draw from.

    Raises
    ------
    RuntimeError
        Neither a run's generator on ``device`` nor a seed, naming ``owner``.
    """
    if gen is not None and same_device(gen.device, device):
        return gen
    if seed is None:
        raise RuntimeError(f"{owner}: no draws on {device}: a run starts them (reset, called by solve), or give a seed")
    return make_generator(seed, device)


def _within(q: torch.Tensor, keys: torch.Tensor, vals: torch.Tensor) -> torch.Tensor:
    """Σ_{j ≠ i} softmax_j(⟨q_i, k_j⟩) v_j within each batch: q, keys (..., p, d), vals (..., p, e);
    PyTorch's fused attention with the diagonal masked (scale 1, no 1/√d)."""
    p = q.shape[-2]
    others = ~torch.eye(p, dtype=torch.bool, device=q.device)
    return F.scaled_dot_product_attention(q, keys, vals, attn_mask=others, scale=1.0)
