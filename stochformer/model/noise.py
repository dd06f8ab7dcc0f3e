"""Noise sources: what drives the tokens (SPEC §1–3).

A noise source turns tokens ``X: (batch, N, d)`` (unit rows), a step ``dt`` and the step's
randomness (a [`Draws`][stochformer.core.brownian.Draws], or a bare ``torch.Generator``) into the
field's increment at the tokens, ``ΔW: (batch, N, d)``, *before* tangent projection. All sources
have the same token covariance per unit time, κ(⟨x_i, x_j⟩) I_d, exactly or in the limit:

- [`RandomMLP`][stochformer.model.noise.RandomMLP] (``mode="weights"``): √dt · s · G^m(X), fresh U, W, b_U, b_W per call (SPEC §1).
- [`RandomMLP`][stochformer.model.noise.RandomMLP] (``mode="gaussian"``): the same law with fewer normals: given U and b_U the
  output is exactly Gaussian with token covariance K_m = ΦΦᵀ/m + σ_W² (SPEC §2).
- [`ExactField`][stochformer.model.noise.ExactField]: the limit Brownian field, √dt · K(X)^{1/2} Ξ with K_ij = κ(⟨x_i, x_j⟩).
- [`RandomFeatureField`][stochformer.model.noise.RandomFeatureField]: a Brownian field with frozen random features of width M,
  covariance (1/M) Σ_k φ_k(x) φ_k(y) + σ_W² → κ as M → ∞; O(N M d) per step instead of O(N³).

Sources with state (random features) are set up by [`reset`][stochformer.model.noise.NoiseSource.reset] at the start of a run. The
Brownian part of an increment is drawn with ``Draws.brownian``: from a shared
[`BrownianPath`][stochformer.core.brownian.BrownianPath] when the run has one (couplings), else from the
generator (``torch.randn``, or with ``rng="parallel"`` the parallel streams of
[`NormalDraws`][stochformer.model.rng.NormalDraws] seeded from it); everything else (weights,
features) from ``Draws.generator``.
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, NamedTuple, Optional, Protocol, Union

import numpy as np
import torch

from ..core.brownian import Draws, as_draws
from ..core.capture import deferred
from ..core.runtime import POOL_PREFIX, forked, one_cpu_thread, thread_pool
from ..core.sphere import normalize
from .activations import ActivationLike, get_activation
from .kernel import NoiseKernel
from .rng import DEFAULT_AHEAD, DrawPrecision, NormalDraws, RngBackend
from ..core.validation import (Choice, Methods, NonFiniteError, NonNegativeFloat, PositiveInt, Real, likely_fields, same_device,
                               validated)


Randomness = Union[torch.Generator, Draws]


class LayerNormals(NamedTuple):
    """The normals of one [`RandomMLP`][stochformer.model.noise.RandomMLP] call (``mode="gaussian"``) as views per sample:
    ``hidden`` (batch, r, m), or (batch, r + 1, m) with b_U's normals as its last row when σ_U > 0;
    ``output`` (batch, N, d) through the root of ΦΦᵀ (``gram``) or (batch, m, d); ``bias_W``
    (batch, 1, d), None when σ_W is 0.

    Attributes
    ----------
    hidden : torch.Tensor, shape (batch, r, m) or (batch, r + 1, m)
        The normals of the hidden layer (b_U's as the last row when σ_U > 0).
    output : torch.Tensor or None
        The output normals, (batch, N, d) through the Gram root or (batch, m, d).
    bias_W : torch.Tensor or None, shape (batch, 1, d)
        b_W's normals (None when σ_W is 0).
    gram : bool
        Whether ``output`` goes through the root of ΦΦᵀ.
    """

    hidden: torch.Tensor
    output: Optional[torch.Tensor]
    bias_W: Optional[torch.Tensor]
    gram: bool = False

    def samples(self, a: int, b: int) -> "LayerNormals":
        """The normals of samples a..b−1.

        Parameters
        ----------
        a, b : int
            The first sample and one past the last.

        Returns
        -------
        LayerNormals
            Views of the same memory.
        """
        output, bias_W = self.output, self.bias_W
        return LayerNormals(self.hidden[a:b], None if output is None else output[a:b],
                            None if bias_W is None else bias_W[a:b], self.gram)


class NeedsDraws(Exception):
    """Raised by [`RandomMLP.apply`][stochformer.model.noise.RandomMLP.apply] without a generator where numerically singular samples
    need more normals (their explicit redraw)."""


class NoiseSource(Protocol):
    """What every noise source provides (any object with these methods plugs into the models).

    ``reset(batch, d, generator, dtype, device)`` draws the state that lives for a whole run;
    ``increment(X, dt, draws)`` is ΔW at the tokens X (batch, N, d), of the same shape;
    ``noise_kernel(d)`` is κ of the field in dimension d (its κ(1) gives the Itô correction of the
    limit SDE). [`RandomMLP`][stochformer.model.noise.RandomMLP],
    [`ExactField`][stochformer.model.noise.ExactField] and
    [`RandomFeatureField`][stochformer.model.noise.RandomFeatureField] are the library's.

    Examples
    --------
    >>> import stochformer as sf
    >>> noise = sf.ExactField(sf.NoiseKernel("relu", 3))
    >>> all(callable(getattr(noise, m)) for m in ("reset", "increment", "noise_kernel"))
    True
    """

    def reset(self, batch: int, d: int, generator: torch.Generator, dtype: torch.dtype, device) -> None:
        """Draw any state that lives for a whole run (one per sample).

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

    def increment(self, X: torch.Tensor, dt: float, draws: Randomness) -> torch.Tensor:
        """ΔW at the tokens; its Brownian normals from ``as_draws(draws).brownian(...)``.

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            The tokens.
        dt : float
            The step.
        draws : torch.Generator or Draws
            The step's randomness (a shared Brownian path, if any, through ``draws.brownian``).

        Returns
        -------
        torch.Tensor, shape (batch, N, d)
            ΔW at the tokens.
        """

    def noise_kernel(self, d: int) -> NoiseKernel:
        """κ of the field in dimension d (its κ(1) gives the Itô correction of the limit SDE).

        Parameters
        ----------
        d : int
            Token dimension.

        Returns
        -------
        NoiseKernel
            κ of the field in dimension d.
        """


def sqrt_psd(K: torch.Tensor, method: Literal["symmetric", "cholesky"] = "symmetric") -> torch.Tensor:
    """A square root S with S Sᵀ = K for symmetric PSD K: (..., n, n).

    ``symmetric``: K^{1/2} by eigh, negative eigenvalues (rounding) clamped to 0; robust when K is
    nearly singular (synchronised tokens). ``cholesky``: lower-triangular, falling back to the
    symmetric root for the matrices whose factorisation fails.

    Parameters
    ----------
    K : torch.Tensor, shape (..., n, n)
        Symmetric positive semi-definite matrices.
    method : {"symmetric", "cholesky"}, optional
        Which root.

    Returns
    -------
    torch.Tensor, shape (..., n, n)
        S with S Sᵀ = K (up to rounding and the clamped negative eigenvalues).
    """
    if method == "cholesky":
        with one_cpu_thread(_small_lapack(K)):
            L, info = torch.linalg.cholesky_ex(K)
        bad = info > 0
        if bool(bad.any()):
            L = L.clone()
            L[bad] = sqrt_psd(K[bad])
        return L
    evals, evecs = _eigh(K)
    return (evecs * evals.clamp_min(0).sqrt().unsqueeze(-2)) @ evecs.transpose(-1, -2)


def root_times(K: torch.Tensor, Z: torch.Tensor, method: Literal["symmetric", "cholesky"] = "symmetric") -> torch.Tensor:
    """S Z for the root S of [`sqrt_psd`][stochformer.model.noise.sqrt_psd], in K's dtype; the
    symmetric root as V (√Λ ⊙ Vᵀ Z) from K = V Λ Vᵀ, without forming S (two thin products instead
    of a cubic one).

    Parameters
    ----------
    K : torch.Tensor, shape (..., n, n)
        Symmetric positive semi-definite matrices.
    Z : torch.Tensor, shape (..., n, k)
        What the root multiplies.
    method : {"symmetric", "cholesky"}, optional
        Which root.

    Returns
    -------
    torch.Tensor, shape (..., n, k)
        S Z.
    """
    Z = Z.to(K.dtype)
    if method == "cholesky":
        return sqrt_psd(K, method) @ Z
    evals, evecs = _eigh(K)
    return evecs @ (evals.clamp_min(0).sqrt().unsqueeze(-1) * (evecs.transpose(-1, -2) @ Z))


#: eigenvalues of K below this fraction of the largest are its null space for [`whiten`][stochformer.model.noise.whiten] (their
#: part of G is at most 10⁻⁶ of its scale; above it, rounding changes an eigenvalue by < 10⁻³)
WHITEN_RTOL = 1e-12


def whiten(K: torch.Tensor, G: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The standard normals Ξ behind a Gaussian G ~ N(0, K) (per column): Ξ = K^{−1/2} G on the range
    of K (the symmetric root of [`sqrt_psd`][stochformer.model.noise.sqrt_psd], so K^{1/2} Ξ = G there) and fresh N(0, 1) normals
    from ``generator`` on its null space (eigenvalues below `WHITEN_RTOL` · max), so that Ξ is
    exactly standard normal whatever the rank.

    Parameters
    ----------
    K : torch.Tensor, shape (n, n)
        The covariance of G's columns (PSD).
    G : torch.Tensor, shape (n, d)
        A Gaussian sample, each column N(0, K).
    generator : torch.Generator
        Draws the normals of the null space.

    Returns
    -------
    torch.Tensor, shape (n, d)
        Ξ, float64, i.i.d. N(0, 1).
    """
    evals, evecs = _eigh(K.to(torch.float64))
    keep = evals > WHITEN_RTOL * evals.abs().max()
    coef = evecs.transpose(-1, -2) @ G.to(torch.float64)
    coef[keep] /= evals[keep].sqrt().unsqueeze(-1)
    coef[~keep] = torch.randn(int((~keep).sum()), G.shape[-1], generator=generator, dtype=torch.float64, device=G.device)
    return evecs @ coef


def _eigh(K: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.linalg.eigh``; where cuSOLVER's batched solver fails (an internal error on a batch of
    65536 2 × 2 matrices, torch 2.11 / CUDA 13, H200: docs/benchmarks.md), on the CPU instead."""
    try:
        if _small_lapack(K):
            return _eigh_small(K)
        return torch.linalg.eigh(K)
    except RuntimeError:
        if not bool(torch.isfinite(K).all()):  # a state that broke down within a step, before its check
            raise NonFiniteError("non-finite {what} in a covariance within a step", likely_fields(None), "tokens") from None
        if not K.is_cuda:
            raise
        evals, evecs = torch.linalg.eigh(K.cpu())
        return evals.to(K.device), evecs.to(K.device)


#: CPU matrices up to this size are factorised in one thread: MKL's threads on a batch of small
#: eigen- or Cholesky problems cost more than they share (the exact-field SDE of
#: ``benchmarks/bench_field.py``, 128 × 32 × 32 per step: 12 s with two threads, 3.7 s with one)
SMALL_LAPACK = 128


def _small_lapack(K: torch.Tensor) -> bool:
    return K.device.type == "cpu" and K.shape[-1] <= SMALL_LAPACK


def _eigh_small(K: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """eigh of a batch of small CPU matrices: one thread per call, the batch split over the
    process's worker threads (as many as torch's threads). Each matrix is factorised alone in one
    thread, at the same address modulo 64 bytes as in one call's buffer, so the numbers are those
    of one single-threaded call on the whole batch, whatever the thread count (MKL's threaded path
    rounds differently). Inside a worker thread, or in a process forked after import: one call."""
    threads = torch.get_num_threads()
    batch = K.reshape(-1, *K.shape[-2:])
    with one_cpu_thread():
        if (threads == 1 or batch.shape[0] < 2 * threads or threading.current_thread().name.startswith(POOL_PREFIX)
                or forked()):
            return torch.linalg.eigh(K)
        # MKL's result for a matrix depends on its address modulo 64 bytes: chunks start at
        # matrices whose offset in the batch is a multiple of 64 bytes, as in one call's buffer
        n = K.shape[-1]
        step = 64 // math.gcd(64, n * n * K.element_size())
        size = math.ceil(math.ceil(batch.shape[0] / threads) / step) * step
        parts = [thread_pool().submit(torch.linalg.eigh, part) for part in batch.split(size)]
        done = [p.result() for p in parts]
    return (torch.cat([v for v, _ in done]).view(K.shape[:-1]), torch.cat([w for _, w in done]).view(K.shape))


def _normal(shape, generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    return torch.randn(*shape, generator=generator, dtype=like.dtype, device=like.device)


#: laws of the explicit MLP weights: i.i.d., mean 0, variance 1 (SPEC §7)
WEIGHT_LAWS = ("gaussian", "rademacher", "uniform", "student_t")


def draw_weights(shape, generator: torch.Generator, like: torch.Tensor, law: str = "gaussian", nu: float = 5.0) -> torch.Tensor:
    """i.i.d. entries of mean 0 and variance 1 from ``law``: N(0, 1); ±1 (Rademacher); uniform on
    [−√3, √3]; Student-t with ν > 4 degrees of freedom times √((ν − 2)/ν) (finite fourth moment
    3(ν − 2)/(ν − 4)).

    Parameters
    ----------
    shape : sequence of int
        The shape drawn.
    generator : torch.Generator
        The generator drawn from.
    like : torch.Tensor
        Gives the dtype and device.
    law : {"gaussian", "rademacher", "uniform", "student_t"}, optional
        The law (`WEIGHT_LAWS`).
    nu : float, optional
        Student-t's degrees of freedom, > 4.

    Returns
    -------
    torch.Tensor
        i.i.d. entries of ``shape``, mean 0, variance 1.

    Raises
    ------
    ValueError
        An unknown law, or ν <= 4.
    """
    kw: dict[str, Any] = dict(generator=generator, dtype=like.dtype, device=like.device)
    if law == "gaussian":
        return torch.randn(*shape, **kw)
    if law == "rademacher":
        return torch.randint(0, 2, tuple(shape), generator=generator, device=like.device).to(like.dtype).mul_(2).sub_(1)
    if law == "uniform":
        return torch.rand(*shape, **kw).mul_(2 * math.sqrt(3.0)).sub_(math.sqrt(3.0))
    if law == "student_t":
        if not nu > 4:
            raise ValueError(f"student_nu: must be > 4 for a finite fourth moment (got {nu})")
        # t = Z / √(χ²_ν/ν), χ²_ν = 2·Gamma(ν/2); torch's gamma sampler takes no generator, so
        # Gamma(ν/2) comes from the run's generator by Marsaglia–Tsang (ν/2 > 2)
        z = torch.randn(*shape, **kw)
        chi2 = _gamma(nu / 2, shape, generator, like) * (2.0 / nu)
        return z / chi2.sqrt() * math.sqrt((nu - 2) / nu)
    raise ValueError(f"weight_law: unknown law {law!r}; valid: {', '.join(WEIGHT_LAWS)}")


def _gamma(a: float, shape, generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    """Gamma(a, 1) variates (a ≥ 1) by Marsaglia–Tsang rejection, from ``generator`` only."""
    kw: dict[str, Any] = dict(generator=generator, dtype=like.dtype, device=like.device)
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    n = math.prod(shape)
    out = torch.empty(n, dtype=like.dtype, device=like.device)
    filled = 0
    while filled < n:
        k = int(1.2 * (n - filled)) + 16
        x = torch.randn(k, **kw)
        u = torch.rand(k, **kw)
        v = (1 + c * x) ** 3
        ok = (v > 0) & (torch.log(u) < 0.5 * x * x + d - d * v + d * torch.log(v.clamp_min(1e-300)))
        acc = (d * v)[ok][: n - filled]
        out[filled : filled + len(acc)] = acc
        filled += len(acc)
    return out.view(*shape)


def gamma_variates(a: float, shape: tuple[int, ...], generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    """Gamma(a, 1) variates of ``shape`` (a >= 1) from ``generator`` only (Marsaglia–Tsang; torch's
    own gamma sampler takes no generator), in ``like``'s dtype and device.

    Parameters
    ----------
    a : float
        The shape parameter, >= 1.
    shape : tuple of int
        The shape drawn.
    generator : torch.Generator
        The generator drawn from.
    like : torch.Tensor
        Gives the dtype and device.

    Returns
    -------
    torch.Tensor
        Gamma(a, 1) variates.
    """
    if not a >= 1:
        raise ValueError(f"a: must be >= 1 (got {a})")
    return _gamma(a, shape, generator, like)


@validated
@dataclass
class RandomMLP:
    r"""The random MLP block $G^m$ of SPEC §1, times the noise scale s, times $\sqrt{dt}$:

    $$
    \sqrt{dt}\; s\; G^m(y), \qquad G^m(y) = \frac{1}{\sqrt m}\, W\,\varphi\Big(\frac{1}{\sqrt d}\, U y + b_U\Big) + b_W,
    $$

    fresh weights $U \in \mathbb{R}^{m\times d}$, $W \in \mathbb{R}^{d\times m}$ (i.i.d. unit variance) and
    biases $b_U \sim \mathcal N(0, \sigma_U^2 I_m)$, $b_W \sim \mathcal N(0, \sigma_W^2 I_d)$ at every call.

    ``mode="weights"`` draws U, W, b_U, b_W explicitly with ``torch.randn`` (the reference); U and
    W from ``law`` ([`draw_weights`][stochformer.model.noise.draw_weights], Student-t with ``nu``
    degrees of freedom) when it is not Gaussian (SPEC §7).
    ``mode="gaussian"`` draws the same law with the fewest normals, per sample and call:

    - pre-activations H = Y Uᵀ/√d (N × m): columns i.i.d. N(0, YYᵀ/d), rank ≤ min(N, d). For
      d ≤ N draw U (m·d normals); for d > N draw Z (m × N) and use H = C Zᵀ with C Cᵀ = YYᵀ/d (m·N);
    - b_U (m normals, if σ_U > 0); Φ = φ(H + b_U), one row of m features per token;
    - the output given Φ is exactly Gaussian with token covariance ΦΦᵀ/m (SPEC §2): either
      Φ Z'/√m with Z' (m × d) (m·d normals) or S Z''/√m with S Sᵀ = ΦΦᵀ (N·d normals),
      whichever [`gram_output_cheaper`][stochformer.model.noise.gram_output_cheaper] says costs less
      on this device;
    - b_W (d normals, if σ_W > 0).

    Parameters
    ----------
    width : int, optional
        m, the hidden width, >= 1.
    activation : str or callable, optional
        φ, a name of [`ACTIVATIONS`][stochformer.model.activations] or a callable on tensors.
    sigma_U, sigma_W : float, optional
        Standard deviations of the biases $b_U$, $b_W$, >= 0.
    scale : float, optional
        The noise scale s, >= 0.
    mode : {"gaussian", "weights"}, optional
        How the block is sampled (above); both give the same law.
    rng : str, optional
        How the normals of ``mode="gaussian"`` are drawn (`stochformer.model.rng.NormalDraws`):
        ``torch``, or ``parallel`` streams on all CPU cores.
    precision : str, optional
        ``"full"``, or the opt-in ``"float32"`` that draws the normals in float32.
    law : {"gaussian", "rademacher", "uniform", "student_t"}, optional
        The law of the unit-variance weights U, W; a non-Gaussian law needs ``mode="weights"``.
    nu : float, optional
        The degrees of freedom of ``law="student_t"``, in (4, 1e6].
    gain : float, optional
        g >= 0 (default 1): the std of the inner weights U, which have variance g²; the
        pre-activations are g U y/√d + b_U (SPEC §8; its kernel is [`NoiseKernel`][stochformer.model.kernel.NoiseKernel] with that gain).

    Raises
    ------
    ValueError
        A field out of range, an unknown activation, or a non-Gaussian law without
        ``mode="weights"``, naming the field.

    Examples
    --------
    >>> import torch
    >>> import stochformer as sf
    >>> mlp = sf.RandomMLP(width=128, activation="tanh", sigma_U=0.1)
    >>> mlp.noise_kernel(4).kappa1 > 0
    True
    """

    width: PositiveInt = 256
    activation: ActivationLike = "relu"
    sigma_U: NonNegativeFloat = 0.0
    sigma_W: NonNegativeFloat = 0.0
    scale: NonNegativeFloat = 1.0
    mode: Literal["weights", "gaussian"] = "gaussian"
    rng: RngBackend = "torch"
    precision: DrawPrecision = "full"
    law: Annotated[str, Choice(WEIGHT_LAWS)] = "gaussian"
    nu: Annotated[float, Real(4.0, 1e6, low_open=True)] = 5.0
    gain: NonNegativeFloat = 1.0

    def __post_init__(self) -> None:
        if self.law != "gaussian" and self.mode != "weights":
            raise ValueError(f"weight_law: {self.law!r} needs explicit weights (mode = 'weights')")
        self._phi = get_activation(self.activation)
        # on a CPU several layers' normals are drawn at once (they do not depend on the tokens)
        self._draw = NormalDraws(self.rng, self.precision, ahead=DEFAULT_AHEAD if self.rng == "parallel" else 0)
        # the gaussian sampler applies φ to a fresh buffer: in place where that is known to be safe
        self._phi_fresh = torch.relu_ if self.activation == "relu" else self._phi
        self._work: Optional[torch.Tensor] = None  # the pre-activations of [`increment`][stochformer.model.noise.RandomMLP.increment], kept across layers

    @property
    def capture_safe(self) -> bool:
        """Whether its steps can be captured ([`stochformer.core.capture`][stochformer.core.capture]): with
        ``rng="torch"`` (the parallel sampler draws ahead on the host's threads)."""
        return self.rng == "torch"

    def reset(self, batch, d, generator, dtype, device) -> None:
        """Start a run: the MLP draws fresh weights at every layer, so only its buffer of normals
        is emptied.

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
        self._draw.reset()

    def noise_kernel(self, d: int) -> NoiseKernel:
        """κ of the MLP's field (SPEC §2).

        Parameters
        ----------
        d : int
            Token dimension.

        Returns
        -------
        NoiseKernel
            κ of the field in dimension d.
        """
        return NoiseKernel(self.activation, d, self.sigma_U, self.sigma_W, self.scale, gain=self.gain)

    def hidden(self, X: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """The hidden layer Φ = φ(g U x/√d + b_U) with fresh U, b_U.

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            The tokens.
        generator : torch.Generator
            Draws U and b_U.

        Returns
        -------
        torch.Tensor, shape (batch, N, m)
            Row i the features of token i.
        """
        if self.mode == "gaussian":
            B, N, d = X.shape
            z = self._draw(self._n_hidden(B, N, d, X.dtype), generator, X.dtype, X.device)
            return self._hidden_from(X, self._split(z, X, hidden_only=True), generator)
        B, N, d = X.shape
        U = draw_weights((B, self.width, d), generator, X, self.law, self.nu)
        pre = (X @ U.transpose(-1, -2)) * self.gain / math.sqrt(d)  # × 1.0 is exact: g = 1 changes no bit
        if self.sigma_U > 0:
            pre = pre + self.sigma_U * _normal((B, 1, self.width), generator, X)
        return self._phi(pre)

    def empirical_kernel(self, X: torch.Tensor, generator: torch.Generator, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        """The empirical kernel K_m = ΦΦᵀ/m + σ_W² for fresh inner weights (SPEC §3 coupling).

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            The tokens.
        generator : torch.Generator
            Draws the inner weights.
        dtype : torch.dtype, optional
            The result's dtype (default X's).

        Returns
        -------
        torch.Tensor, shape (batch, N, N)
            K_m.
        """
        Phi = self.hidden(X, generator).to(dtype or X.dtype)
        return Phi @ Phi.transpose(-1, -2) / self.width + self.sigma_W**2

    def cost(self, N: int, d: int, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float64) -> dict[str, float]:
        """Work of one ``mode="gaussian"`` call per sample at N tokens in dimension d: ``normals``
        drawn and matrix-product ``flops``, for rooflines: 2nkp per general product, n(n+1)k per
        symmetric one (Y Yᵀ, ΦΦᵀ) or triangular one (C Z, S Z''), n³/3 per Cholesky.

        Parameters
        ----------
        N : int
            Tokens.
        d : int
            Token dimension.
        device : str or torch.device, optional
            Where it runs (the cheaper output path depends on it).
        dtype : torch.dtype, optional
            The tokens' dtype.

        Returns
        -------
        dict
            ``{"normals": float, "flops": float}`` per sample.
        """
        m, r = self.width, _hidden_rank(N, d, dtype)
        normals = m * r + m * (self.sigma_U > 0) + d * (self.sigma_W > 0)
        sym = N * (N + 1.0)
        flops = sym * (d + m) + N**3 / 3 if r < d else 2.0 * m * N * d  # Y Yᵀ, its root C, C Z; or Y Uᵀ
        if _output_through_gram(N, d, m, torch.device(device), dtype):
            normals += N * d
            flops += sym * (m + d) + N**3 / 3  # ΦΦᵀ, its root S, S Z''
        else:
            normals += m * d
            flops += 2.0 * m * N * d
        return {"normals": float(normals), "flops": flops}

    def _n_hidden(self, B: int, N: int, d: int, dtype: torch.dtype) -> int:
        return B * self.width * (_hidden_rank(N, d, dtype) + (self.sigma_U > 0))

    def _n_call(self, B: int, N: int, d: int, dtype: torch.dtype, device: torch.device) -> int:
        """Normals of one [`increment`][stochformer.model.noise.RandomMLP.increment] call in ``mode="gaussian"``: hidden, output, b_W."""
        gram = _output_through_gram(N, d, self.width, device, dtype)
        return self._n_hidden(B, N, d, dtype) + B * d * ((N if gram else self.width) + (self.sigma_W > 0))

    def normals(self, X: torch.Tensor, generator: torch.Generator) -> LayerNormals:
        """The normals of one ``mode="gaussian"`` call at X, drawn now: they do not depend on the
        tokens, only on their shape.

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            The tokens (their shape, dtype and device).
        generator : torch.Generator
            Draws the normals.

        Returns
        -------
        LayerNormals
            Views per sample into one buffer.
        """
        B, N, d = X.shape
        return self._split(self._draw(self._n_call(B, N, d, X.dtype, X.device), generator, X.dtype, X.device), X)

    def _split(self, z: torch.Tensor, X: torch.Tensor, hidden_only: bool = False) -> LayerNormals:
        """The flat buffer z of one call as views per sample (the layout of `_n_call`): per
        sample Zᵀ (r × m) and b_U's row, then per sample the output normals, then b_W's."""
        B, N, d = X.shape
        k = self._n_hidden(B, N, d, X.dtype)
        hidden = z[:k].view(B, -1, self.width)
        if hidden_only:
            return LayerNormals(hidden, None, None)
        gram = _output_through_gram(N, d, self.width, X.device, X.dtype)
        rows = N if gram else self.width
        output, k = z[k : k + B * rows * d].view(B, rows, d), k + B * rows * d
        return LayerNormals(hidden, output, z[k : k + B * d].view(B, 1, d) if self.sigma_W > 0 else None, gram)

    def _hidden_from(
        self, X: torch.Tensor, z: LayerNormals, generator: Optional[torch.Generator], out: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """Φ (batch, N, m) from the hidden normals of ``z``; the pre-activations are written into
        ``out`` (batch, N, m) when given. ``generator`` None: raise [`NeedsDraws`][stochformer.model.noise.NeedsDraws] where
        more normals are needed.

        H = A Z + σ_U 1 bᵀ is one product [A, σ_U 1] [Z; bᵀ] with the bias row of ``z.hidden``:
        A = Y = g X/√d (then Z = Uᵀ), or A = C with C Cᵀ = Y Yᵀ (N × N) when r = N < d."""
        B, N, d = X.shape
        Y = X * (self.gain / math.sqrt(d))
        r = z.hidden.shape[-2] - (self.sigma_U > 0)
        A, bad = Y, None
        if r < d:  # H = C Z: m·N normals instead of m·d
            A, bad = _cholesky(torch.matmul(Y, Y.transpose(-1, -2)), d)
        if self.sigma_U > 0:
            A = torch.cat([A, A.new_full((B, N, 1), self.sigma_U)], dim=-1)
        pre = torch.matmul(A, z.hidden, out=out)
        if bad is not None:
            # Y Yᵀ numerically singular (synchronised tokens): draw U for those samples, the
            # same law; the extra normals are drawn after the buffer, so runs stay reproducible
            Ut = self._more(int(bad.sum()) * self.width * d, generator, X).view(-1, d, self.width)
            redo = torch.matmul(Y[bad], Ut)
            if self.sigma_U > 0:
                redo.add_(z.hidden[bad, r:], alpha=self.sigma_U)
            pre[bad] = redo
        return self._phi_fresh(pre)

    def _more(self, n: int, generator: Optional[torch.Generator], like: torch.Tensor) -> torch.Tensor:
        if generator is None:
            raise NeedsDraws
        return self._draw(n, generator, like.dtype, like.device)

    def increment(self, X: torch.Tensor, dt: float, draws: Randomness) -> torch.Tensor:
        """With a Brownian path (``draws`` a coupled [`Draws`][stochformer.core.brownian.Draws]) the conditional Gaussian law is
        driven by the path's normals Ξ (batch, N, d) through the symmetric root,
        √dt s K_m^{1/2} Ξ with K_m = ΦΦᵀ/m + σ_W² (the coupling of SPEC §3). K_m and its root are
        computed in float64 whatever X's dtype (`_gram_roots_resolve`). Without a path: the MLP's
        increment √dt s G^m(X), by ``mode``.

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            The tokens.
        dt : float
            The step.
        draws : torch.Generator or Draws
            The step's randomness (a shared Brownian path, if any, through ``draws.brownian``).

        Returns
        -------
        torch.Tensor, shape (batch, N, d)
            ΔW at the tokens.
        """
        draws = as_draws(draws)
        generator = draws.generator
        if draws.coupled:
            xi = draws.brownian(X.shape, X.dtype, X.device)
            S = sqrt_psd(self.empirical_kernel(X, generator, torch.float64)).to(X.dtype)
            return (self.scale * math.sqrt(dt)) * (S @ xi)
        if self.mode == "weights":
            return self._increment_weights(X, dt, generator)
        return self.apply(X, dt, self.normals(X, generator), generator)

    def apply(
        self, X: torch.Tensor, dt: float, z: LayerNormals, generator: Optional[torch.Generator],
        work: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """The increment of ``mode="gaussian"`` at X (batch, N, d) from the normals ``z`` of
        [`normals`][stochformer.model.noise.RandomMLP.normals] (or a slice of them over the samples). The pre-activations go into
        ``work`` (batch, N, m) (default: memory kept across layers; none where X requires grad: a product
        with ``out=`` has no gradient). ``generator`` draws the
        redraws of numerically singular samples; None: [`NeedsDraws`][stochformer.model.noise.NeedsDraws] is raised instead.

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            The tokens.
        dt : float
            The step.
        z : LayerNormals
            The step's normals.
        generator : torch.Generator or None
            Draws the redraws.
        work : torch.Tensor, optional, shape (batch, N, m)
            Memory for the pre-activations.

        Returns
        -------
        torch.Tensor, shape (batch, N, d)
            ΔW at the tokens.
        """
        B, N, d = X.shape
        m = self.width
        if torch.is_grad_enabled() and X.requires_grad:  # autograd: no out= (kept memory only without a graph)
            work = None
        elif work is None:
            work = self.workspace(X)
        Phi = self._hidden_from(X, z, generator, work)  # (B, N, m)
        bad = None
        assert z.output is not None, "LayerNormals.output: None only for hidden-only normals"
        if z.gram:  # given Φ the output rows are N(0, ΦΦᵀ/m): S Z'' with S Sᵀ = ΦΦᵀ
            S, bad = _cholesky(torch.matmul(Phi, Phi.transpose(-1, -2)), m)
            out = torch.matmul(S, z.output)
        else:  # Φ Wᵀ/√m with W (d, m) i.i.d. N(0,1), written as Φ Z' with Z' = Wᵀ: (B, m, d)
            out = torch.matmul(Phi, z.output)
        if bad is not None:  # ΦΦᵀ numerically singular: Φ Z' for those samples, the same law
            out[bad] = torch.matmul(Phi[bad], self._more(int(bad.sum()) * m * d, generator, X).view(-1, m, d))
        coef = self.scale * math.sqrt(dt)
        if z.bias_W is not None:
            return out.mul_(coef / math.sqrt(m)).add_(z.bias_W, alpha=coef * self.sigma_W)
        return out.mul_(coef / math.sqrt(m))

    def workspace(self, X: torch.Tensor) -> torch.Tensor:
        """Memory for the pre-activations at X (batch, N, d): (batch, N, m), the same at every
        layer (a fresh multi-MB tensor per layer may come as fresh pages from the OS each time:
        page faults; glibc's heuristics).

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            The tokens (their shape, dtype and device).

        Returns
        -------
        torch.Tensor, shape (batch, N, m)
            Uninitialised memory, kept by the MLP.
        """
        shape, like = (*X.shape[:2], self.width), X
        w = self._work
        if w is None or w.shape != shape or w.dtype != like.dtype or w.device != like.device:
            w = self._work = torch.empty(shape, dtype=like.dtype, device=like.device)
        return w

    def _increment_weights(self, X: torch.Tensor, dt: float, generator: torch.Generator) -> torch.Tensor:
        """√dt · s · G^m(X) with U, W, b_U, b_W drawn explicitly (SPEC §1)."""
        B, N, d = X.shape
        Phi = self.hidden(X, generator)  # (B, N, m)
        out = Phi @ draw_weights((B, self.width, d), generator, X, self.law, self.nu) / math.sqrt(self.width)
        if self.sigma_W > 0:
            out = out + self.sigma_W * _normal((B, 1, d), generator, X)
        return (self.scale * math.sqrt(dt)) * out


def _cholesky(K: torch.Tensor, inner: int) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Lower Cholesky factors of the Gram matrices K = AᵀA (..., n, n), A with ``inner`` rows,
    and the mask of those that failed (None if none).

    Every matrix is factorised with δ = ``inner · ε · max_i K_ii`` added to its diagonal (in
    place: K is overwritten), the size of the rounding error of the product AᵀA itself, so the
    law is unchanged at float precision, while near synchronisation, where K is singular to
    rounding and its plain factorisation fails, the shifted one succeeds. What still fails is
    redrawn by the caller another exact way (never an O(n³) eigendecomposition). Inside a capture
    the failure is [`deferred`][stochformer.core.capture.deferred] (None returned)."""
    diag = K.diagonal(dim1=-2, dim2=-1)
    # the shift, of rounding size, carries no gradient (and its max keeps no view of K for autograd)
    diag.add_(diag.detach().amax(-1, keepdim=True), alpha=inner * torch.finfo(K.dtype).eps)
    C, info = torch.linalg.cholesky_ex(K)  # threads kept: one thread was no faster for the MLP's d × d Grams
    if deferred(info > 0):  # captured: a failure reruns the steps uncaptured, where it is redrawn
        return C, None
    return C, (info > 0 if bool(info.any()) else None)


#: cost of one normal draw in floating-point operations (measured: ~4 ns per float64 normal with
#: parallel SFC64 on 2 CPU cores against ~20-80 GFLOP/s for the products; far cheaper on a GPU)
_NORMAL_COST_FLOPS = {"cpu": 100.0, "cuda": 2.0}


def _gram_roots_resolve(dtype: torch.dtype) -> bool:
    """Whether roots of Gram matrices are used in ``dtype``: float64 only. A Gram matrix of nearly
    equal rows is known to about ``inner · ε`` of its diagonal, so its root cannot tell apart
    rows closer than about √(inner · ε) (relative): 2·10⁻⁷ in float64 at inner = 256, but 6·10⁻³ in
    float32, where near synchronisation it would add independent noise far larger than the
    tokens' separations (measured: λ₁ = +46 instead of −0.13; docs/performance.md). In float32
    the explicit routes (U, Φ Z') are used, whose error is the rounding of the tokens themselves."""
    return torch.finfo(dtype).eps < 1e-12


def _hidden_rank(N: int, d: int, dtype: torch.dtype) -> int:
    """Normals per hidden unit: min(N, d) through the root of YYᵀ/d when it resolves, else d (U)."""
    return min(N, d) if _gram_roots_resolve(dtype) else d


def _output_through_gram(N: int, d: int, m: int, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the output is drawn through the root of ΦΦᵀ (float64 only, and when cheaper)."""
    return _gram_roots_resolve(dtype) and gram_output_cheaper(N, d, m, device)


def gram_output_cheaper(N: int, d: int, m: int, device: Union[torch.device, str]) -> bool:
    """Whether drawing the MLP output through a root of the N × N Gram ΦΦᵀ (N·d normals,
    2mN² + N³/3 + 2N²d flops) costs less than through Φ Z' (m·d normals, 2mNd flops).

    Parameters
    ----------
    N : int
        Tokens.
    d : int
        Token dimension.
    m : int
        The MLP's width.
    device : str or torch.device
        Where it runs (a normal's cost in flops depends on it).

    Returns
    -------
    bool
        True where the Gram route is cheaper.
    """
    if m <= N:
        return False
    c = _NORMAL_COST_FLOPS.get(torch.device(device).type, 2.0)
    gram = c * N * d + 2 * m * N * N + N**3 / 3 + 2 * N * N * d
    return gram < c * m * d + 2 * m * N * d


def _field_sampler(rng: RngBackend) -> Optional[NormalDraws]:
    """The sampler of a limit field's fresh Brownian normals: None for ``"torch"`` (``torch.randn``
    on the run's generator, in ``Draws.brownian``), else parallel streams seeded from that
    generator, drawn ahead as the MLP's (their numbers depend only on the generator's state and
    the sequence of requests).

    Parameters
    ----------
    rng : {"torch", "parallel"}
        The field's ``rng``.

    Returns
    -------
    NormalDraws or None
        The sampler handed to [`Draws.brownian`][stochformer.core.brownian.Draws.brownian].
    """
    return NormalDraws(rng, ahead=DEFAULT_AHEAD) if rng == "parallel" else None


@validated
@dataclass
class ExactField:
    r"""The limit field of SPEC §3, exactly: the increment at the tokens $X = (x_1, \dots, x_N)$ is

    $$
    \Delta W = \sqrt{dt}\;K(X)^{1/2}\,\Xi, \qquad K_{ij} = \kappa(\langle x_i, x_j\rangle),
    $$

    Ξ (batch, N, d) the step's Brownian normals. O(N³) per step. Tokens must have the kernel's d
    (checked at ``reset`` and every step: one comparison).

    Parameters
    ----------
    kernel : NoiseKernel
        κ ([`NoiseKernel`][stochformer.model.kernel.NoiseKernel], or any object with ``kappa(rho)``,
        ``d`` and ``kappa1``).
    sqrt_method : {"symmetric", "cholesky"}, optional
        The root $K^{1/2}$: the symmetric root (the default: continuous in X) or the Cholesky factor.
    rng : {"torch", "parallel"}, optional
        The sampler of the fresh normals Ξ (without a shared path): ``torch.randn`` on the run's
        generator (the default), or ``parallel`` streams seeded from it, on all CPU cores
        ([`NormalDraws`][stochformer.model.rng.NormalDraws]; other numbers, the same law).

    Raises
    ------
    ValueError
        A κ beyond float64 (naming the fields); tokens of another d than the kernel's.

    Examples
    --------
    >>> import stochformer as sf
    >>> field = sf.ExactField(sf.NoiseKernel("relu", 3))
    >>> X0 = sf.sphere.uniform(batch=1, N=4, d=3, seed=0)
    >>> field.covariance(X0).shape
    torch.Size([1, 4, 4])
    """

    kernel: Annotated[NoiseKernel, Methods(("kappa",))]  # or any object with kappa(rho) (and d, kappa1)
    sqrt_method: Literal["symmetric", "cholesky"] = "symmetric"
    rng: RngBackend = "torch"

    def __post_init__(self) -> None:
        self._sampler = _field_sampler(self.rng)
        # κ without a closed form (Gauss–Hermite, 64² nodes per entry) is replaced by its Chebyshev
        # interpolant on [−1, 1] when that agrees to 1e-12 (smooth activations); else computed directly
        closed = isinstance(self.kernel.activation, str) and self.kernel.activation in ("relu", "leaky_relu", "linear", "erf")
        self._cheb = None if closed else _chebyshev_fit(self.kernel)
        if closed:
            self.kernel.kappa(1.0)  # κ beyond float64 is refused now (ValueError naming the fields), not at a step

    @property
    def d(self) -> Optional[int]:
        """The token dimension of its kernel (None for a kernel without one)."""
        return getattr(self.kernel, "d", None)

    def reset(self, batch, d, generator, dtype, device) -> None:
        """Start a run: the field is stateless, only the dimension is checked (and the normals a
        parallel sampler drew ahead are dropped).

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

        Raises
        ------
        ValueError
            If d is not the kernel's.
        """
        if self.d is not None:
            self.noise_kernel(d)
        if self._sampler is not None:
            self._sampler.reset()

    def noise_kernel(self, d: int) -> NoiseKernel:
        """Its kernel, checked against the tokens' dimension.

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
            raise ValueError(f"ExactField: its kernel is for d = {self.kernel.d}, the tokens have d = {d}")
        return self.kernel

    def covariance(self, X: torch.Tensor, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        r"""The covariance of the field at the tokens, $K_{ij} = \kappa(\langle x_i, x_j\rangle)$,
        computed in float64. The cosines are those of the tokens renormalised in float64: a float32
        token's norm is 1 only to ~1e-7, which on the diagonal would swamp 1 − cosine of close tokens.

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            The tokens.
        dtype : torch.dtype, optional
            The result's dtype (default X's).

        Returns
        -------
        torch.Tensor, shape (batch, N, N)
            K(X), differentiable in X (the diagonal, 1 for unit tokens, out of the graph).
        """
        Xd = normalize(X.to(torch.float64))
        G = (Xd @ Xd.transpose(-1, -2)).clamp(-1.0, 1.0)
        if G.requires_grad:
            # ⟨x_i, x_i⟩ = 1 for every unit x_i, so the diagonal's derivative is 0; kept in the graph it
            # would meet arccos's infinite slope at 1 in the ReLU kernel (∞·0 = NaN). Same values.
            eye = torch.eye(G.shape[-1], dtype=torch.bool, device=G.device)
            G = torch.where(eye, G.detach(), G)
        if self._cheb is not None:
            K = _clenshaw(self._cheb.to(G.device), G)
        else:  # a closed form (κ(1) checked at construction) takes G as it is: already cosines
            K = self.kernel.kappa_of_cosines(G) if isinstance(self.kernel, NoiseKernel) else self.kernel.kappa(G)
        return K.to(dtype or X.dtype)

    def increment(self, X: torch.Tensor, dt: float, draws: Randomness) -> torch.Tensor:
        """√dt K(X)^{1/2} Ξ with Ξ (batch, N, d) the step's Brownian normals; K and its root in
        float64 whatever X's dtype (in float32 the root could not tell close tokens apart:
        `_gram_roots_resolve`).

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            The tokens.
        dt : float
            The step.
        draws : torch.Generator or Draws
            The step's randomness (a shared Brownian path, if any, through ``draws.brownian``).

        Returns
        -------
        torch.Tensor, shape (batch, N, d)
            ΔW at the tokens.
        """
        if self.d is not None and X.shape[-1] != self.d:
            self.noise_kernel(X.shape[-1])
        xi = as_draws(draws).brownian(X.shape, X.dtype, X.device, self._sampler)
        return root_times(self.covariance(X, torch.float64), xi, self.sqrt_method).mul_(math.sqrt(dt)).to(X.dtype)


@functools.lru_cache(maxsize=64)
def _chebyshev_fit(kernel: NoiseKernel, tol: float = 1e-12) -> Optional[torch.Tensor]:
    """Chebyshev coefficients of κ on [−1, 1] (the lowest degree in 16, 32, 64, 128 whose interpolant
    is within ``tol``·max|κ| at 2001 test points), or None if none is."""
    f = lambda x: kernel.kappa(torch.from_numpy(x)).numpy()  # noqa: E731
    test = np.linspace(-1.0, 1.0, 2001)
    exact = f(test)
    scale = max(float(np.abs(exact).max()), 1e-300)
    for degree in (16, 32, 64, 128):
        # numpy's stub types func as returning a scalar; it is called on (and returns) an array
        coef = np.polynomial.chebyshev.chebinterpolate(f, degree)  # type: ignore[type-var]
        if np.abs(np.polynomial.chebyshev.chebval(test, coef) - exact).max() <= tol * scale:
            return torch.as_tensor(coef, dtype=torch.float64)
    return None


#: features (samples × tokens × M) formed at once by `RandomFeatureField.increment` (8 MB in
#: float64): more samples are taken a block at a time
FEATURE_BLOCK = 1 << 20

#: entries of x evaluated at once by `_clenshaw`: its buffers stay in a core's cache (a whole
#: 816 × 816 K at once was 4× slower on 2 cores)
CLENSHAW_CHUNK = 1 << 15


def _clenshaw(coef: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Σ_k c_k T_k(x) elementwise by Clenshaw's recurrence, `CLENSHAW_CHUNK` entries at a time (in
    reused buffers; where x needs a gradient, out of place: the same operations, so the same values)."""
    if x.requires_grad and torch.is_grad_enabled():
        b1, b2 = torch.zeros_like(x), torch.zeros_like(x)
        for ck in coef[1:].flip(0).tolist():
            b1, b2 = 2 * x * b1 - b2 + ck, b1
        return x * b1 - b2 + float(coef[0])
    flat = x.reshape(-1)
    out = torch.empty_like(flat)
    c = coef[1:].flip(0).tolist()
    for a in range(0, flat.numel(), CLENSHAW_CHUNK):
        part = flat[a:a + CLENSHAW_CHUNK]
        x2 = 2 * part
        b1, b2, new = torch.zeros_like(part), torch.zeros_like(part), torch.empty_like(part)
        for ck in c:  # b1 ← 2x·b1 − b2 + c_k, in three buffers (the same roundings)
            torch.mul(x2, b1, out=new).sub_(b2).add_(ck)
            b1, b2, new = new, b1, b2
        out[a:a + CLENSHAW_CHUNK] = part * b1 - b2 + float(coef[0])
    return out.view(x.shape)


@validated
@dataclass
class RandomFeatureField:
    r"""A Brownian field with M frozen random features per sample:

    $$
    W(t, x) = s\Big(\frac{1}{\sqrt M} \sum_{k=1}^{M} \varphi\big(u_k\cdot x/\sqrt d + b_k\big)\,B^k_t
    + \sigma_W B^0_t\Big), \qquad B^k \in \mathbb{R}^d \text{ Brownian motions},
    $$

    with $u_k \sim \mathcal N(0, g^2 I_d)$ (``gain`` g >= 0, default 1), $b_k \sim \mathcal N(0, \sigma_U^2)$ drawn once
    ([`draw`][stochformer.model.noise.RandomFeatureField.draw], or the first
    [`reset`][stochformer.model.noise.RandomFeatureField.reset]). Its covariance tends to κ as M → ∞.

    The field is a function of position: systems of any N evaluated with the same features and a
    generator in the same state receive the same increments (the draws, (F, M, d) per step, do
    not depend on N). F = the ``batch`` of [`reset`][stochformer.model.noise.RandomFeatureField.reset];
    tokens X (B, N, d) need B = F, or F = 1 for one field shared by B independent token clouds
    (conditional statistics given the field).

    Parameters
    ----------
    activation : str or callable, optional
        φ, a name of [`ACTIVATIONS`][stochformer.model.activations] or a callable.
    features : int, optional
        M, the number of frozen features, >= 1.
    sigma_U, sigma_W : float, optional
        Standard deviations of the inner bias $b_k$ and of the outer term, >= 0.
    scale : float, optional
        The noise scale s, >= 0.
    token_chunk : int, optional
        Tokens whose features are formed at once: memory O(token_chunk · M) for many tokens.
    gain : float, optional
        g >= 0, the standard deviation of the features u_k (default 1).
    rng : {"torch", "parallel"}, optional
        The sampler of the fresh normals of $B^k$ and $B^0$ (without a shared path): ``torch.randn``
        on the run's generator (the default), or ``parallel`` streams seeded from it, on all CPU
        cores ([`NormalDraws`][stochformer.model.rng.NormalDraws]; other numbers, the same law).
        Its normals drawn ahead belong to one generator at a time, so systems each with its own
        generator in the same state still receive the same increments, stepped in lockstep or
        one after the other.

    Raises
    ------
    ValueError
        A field out of range (naming it), or tokens of another d than the features were drawn for.

    Examples
    --------
    >>> import stochformer as sf
    >>> sde = sf.LimitSDE(noise=sf.RandomFeatureField("relu", features=256))
    >>> X0 = sf.sphere.uniform(batch=2, N=4, d=3, seed=0)
    >>> sf.solve(sde, X0, T=1.0, steps=10, seed=0).X_final.shape
    (2, 4, 3)
    """

    activation: ActivationLike = "relu"
    features: PositiveInt = 1024
    sigma_U: NonNegativeFloat = 0.0
    sigma_W: NonNegativeFloat = 0.0
    scale: NonNegativeFloat = 1.0
    token_chunk: Optional[PositiveInt] = None
    gain: NonNegativeFloat = 1.0
    rng: RngBackend = "torch"
    _u: Optional[torch.Tensor] = field(default=None, repr=False)
    _b: Optional[torch.Tensor] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._sampler = _field_sampler(self.rng)
        self._phi = get_activation(self.activation)
        self._phi_in_place = self.activation == "relu"
        self._u_scaled: Optional[tuple] = None  # (u, b, their versions, [u/√d; b]ᵀ): made again once u or b changes
        self._work: Optional[torch.Tensor] = None  # the features of a token chunk, kept across steps

    @property
    def d(self) -> Optional[int]:
        """The dimension its features were drawn for (None before the first draw)."""
        return None if self._u is None else int(self._u.shape[1])

    def noise_kernel(self, d: int) -> NoiseKernel:
        """κ of the field (the M → ∞ limit of its features' kernel).

        Parameters
        ----------
        d : int
            Token dimension.

        Returns
        -------
        NoiseKernel
            κ of the field in dimension d.
        """
        return NoiseKernel(self.activation, d, self.sigma_U, self.sigma_W, self.scale, gain=self.gain)

    def reset(self, batch, d, generator, dtype, device) -> None:
        """Draw the features at the start of the first run; a field keeps them afterwards (it is
        a function of position, shared by every system it drives). Every run drops the normals
        a parallel sampler drew ahead.

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

        Raises
        ------
        ValueError
            Tokens of another d, dtype or device than the features drawn.
        """
        if self._sampler is not None:
            self._sampler.reset()
        if self._u is None:
            self.draw(batch, d, generator, dtype, device)
        elif self._u.shape[1] != d:
            raise ValueError(f"RandomFeatureField: drawn for d = {self._u.shape[1]}, the tokens have d = {d}")
        elif self._u.dtype != dtype or not same_device(self._u.device, device):
            raise ValueError(f"RandomFeatureField: drawn in {self._u.dtype} on {self._u.device}, the tokens are {dtype} on "
                             f"{device}; give them the same dtype and device")

    def draw(self, batch, d, generator, dtype, device) -> None:
        """Draw ``batch`` independent fields' features u_k (variance g²), b_k now.

        Parameters
        ----------
        batch : int
            Independent fields (1: one field shared by every sample).
        d : int
            Token dimension.
        generator : torch.Generator
            Draws the features.
        dtype : torch.dtype
            Their dtype.
        device : str or torch.device
            Their device.
        """
        self._u = torch.randn(batch, d, self.features, generator=generator, dtype=dtype, device=device) * self.gain
        self._b = self.sigma_U * torch.randn(batch, 1, self.features, generator=generator, dtype=dtype, device=device)

    def features_at(self, X: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The features φ(u_k·x/√d + b_k) at the tokens (one product u_k·x/√d + b_k, then φ in place
        for ReLU; out of place where a gradient is needed).

        Parameters
        ----------
        X : torch.Tensor, shape (batch, n, d)
            The tokens.
        out : torch.Tensor, optional, shape (batch, n, M)
            Memory to write into.

        Returns
        -------
        torch.Tensor, shape (batch, n, M)
            The features (without ``out``: a transposed view of (batch, M, n) memory).
        """
        phi = self._features_t(X, slice(None)).transpose(1, 2)
        return phi if out is None else out.copy_(phi)

    def _features_t(self, X: torch.Tensor, fields: slice, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The features of the tokens X (batch, n, d) with the fields ``fields`` (a block of samples;
        F = 1 is shared by every block), transposed: (batch, M, n), the layout in which the step's
        two products run fastest (1.3× faster than (batch, n, M) with MKL at B = 128, N = 64,
        M = 1024, on one thread and on two)."""
        u, b = self._u, self._b
        if u is None or b is None:
            raise RuntimeError("RandomFeatureField.draw(...) (or reset) must be called before use")
        if u.shape[0] == 1:
            fields = slice(None)
        A = torch.cat([X, X.new_ones(*X.shape[:-1], 1)], dim=-1).transpose(1, 2)  # [x, 1]ᵀ: (batch, d + 1, n)
        if torch.is_grad_enabled() and (X.requires_grad or u.requires_grad or b.requires_grad):
            W = torch.cat([u[fields] / math.sqrt(X.shape[-1]), b[fields]], dim=1).transpose(1, 2)
            return self._phi(torch.matmul(W, A))  # no out=, no in place: the graph from u and b
        pre = torch.matmul(self._weights()[fields], A, out=out)
        return torch.relu_(pre) if self._phi_in_place else self._phi(pre)

    def _weights(self) -> torch.Tensor:
        """[u/√d; b]ᵀ (F, M, d + 1), contiguous, kept while u and b are: the bias and the 1/√d come
        with the one product, no further pass over (batch, M, n) per step."""
        u, b, kept = self._u, self._b, self._u_scaled
        assert u is not None and b is not None, "RandomFeatureField: drawn before use (features_at checks)"
        if kept is None or kept[0] is not u or kept[1] is not b or kept[2] != (u._version, b._version):
            W = torch.cat([u / math.sqrt(u.shape[1]), b], dim=1).transpose(1, 2).contiguous()
            kept = self._u_scaled = (u, b, (u._version, b._version), W)
        return kept[3]

    def _workspace(self, batch: int, n: int, like: torch.Tensor) -> torch.Tensor:
        """Memory for the features of a token chunk, (batch, M, n), kept across steps (a fresh
        multi-MB tensor per step comes as fresh pages from the OS each time: page faults); it
        grows to the largest chunk asked for, a smaller one (the last chunk) uses its start."""
        size = batch * n * self.features
        w = self._work
        if w is None or w.numel() < size or w.dtype != like.dtype or w.device != like.device:
            w = self._work = torch.empty(size, dtype=like.dtype, device=like.device)
        return w[:size].view(batch, self.features, n)

    def increment(self, X: torch.Tensor, dt: float, draws: Randomness) -> torch.Tensor:
        """The Brownian normals of a step are (F, M, d), and (F, 1, d) for B⁰ with σ_W > 0: they
        do not depend on N, so one path drives systems of any size. Per token chunk: one product
        for the pre-activations into a buffer kept across steps, φ in place, one product with the
        normals; the scales act on the (B, N, d) result only.

        Parameters
        ----------
        X : torch.Tensor, shape (batch, N, d)
            The tokens.
        dt : float
            The step.
        draws : torch.Generator or Draws
            The step's randomness (a shared Brownian path, if any, through ``draws.brownian``).

        Returns
        -------
        torch.Tensor, shape (batch, N, d)
            ΔW at the tokens.
        """
        B, N, d = X.shape
        F = self._u.shape[0] if self._u is not None else B
        if F not in (B, 1):
            raise ValueError(f"RandomFeatureField: tokens have batch {B} but the field has {F} samples (need equal, or 1)")
        draws = as_draws(draws)
        Z = draws.brownian((F, self.features, d), X.dtype, X.device, self._sampler)
        flat = F == 1 and B > 1  # one shared field: treat all B·N tokens as one cloud
        Xf = X.reshape(1, B * N, d) if flat else X
        n = Xf.shape[1]
        chunk = self.token_chunk or n
        if chunk < 1:  # every row of ``out`` is written by the loop below only for chunk >= 1
            raise ValueError(f"token_chunk: must be an integer >= 1 (got {chunk})")
        out = Xf.new_empty(Xf.shape[0], d, n)  # ΔWᵀ: the products run with the tokens last
        Zt = Z.transpose(1, 2).expand(Xf.shape[0], -1, -1)  # (·, d, M), a view
        # samples per block: a block's features stay near FEATURE_BLOCK entries (in cache: 1.4x faster
        # at B = 128, N = 64, M = 1024 than one pass over all samples); each sample's products are the
        # same operations whatever the block, so the same numbers
        per = max(1, FEATURE_BLOCK // (min(chunk, n) * self.features))
        for a in range(0, Xf.shape[0], per):  # sample blocks
            for s in range(0, n, chunk):  # token chunks, memory O(per · chunk · M)
                Xs = Xf[a : a + per, s : s + chunk]
                phi = self._features_t(Xs, slice(a, a + per), self._workspace(Xs.shape[0], Xs.shape[1], Xs))
                if phi.requires_grad:  # out joins the graph through the slice assignment
                    out[a : a + per, :, s : s + chunk] = torch.matmul(Zt[a : a + per], phi)
                else:
                    torch.matmul(Zt[a : a + per], phi, out=out[a : a + per, :, s : s + chunk])
        out = out.transpose(1, 2).reshape(B, N, d)
        coef = self.scale * math.sqrt(dt)
        out.mul_(coef / math.sqrt(self.features))
        if self.sigma_W > 0:
            out.add_(draws.brownian((F, 1, d), X.dtype, X.device, self._sampler), alpha=coef * self.sigma_W)
        return out

    def path_shape(self, F: int, d: int) -> list[tuple[int, ...]]:
        """Shapes of the Brownian normals of one step for F fields in dimension d, B^k then B⁰ (for
        a [`BrownianPath`][stochformer.core.brownian.BrownianPath] shared by several systems).

        Parameters
        ----------
        F : int
            Independent fields.
        d : int
            Token dimension.

        Returns
        -------
        list of tuple of int
            (F, M, d), then (F, 1, d) when σ_W > 0.
        """
        shapes: list[tuple[int, ...]] = [(F, self.features, d)]
        return shapes + ([(F, 1, d)] if self.sigma_W > 0 else [])
