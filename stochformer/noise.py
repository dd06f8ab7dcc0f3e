"""Noise sources: what drives the tokens (SPEC §1–3).

A noise source turns tokens ``X: (batch, N, d)`` (unit rows) and a step ``dt`` into the field's
increment at the tokens, ``ΔW: (batch, N, d)``, *before* tangent projection. All sources have the
same token covariance per unit time, κ(⟨x_i, x_j⟩) I_d, exactly or in the limit:

- :class:`MLPNoise` (``mode="weights"``): √dt · s · G^m(X), fresh U, W, b_U, b_W per call (SPEC §1).
- :class:`MLPNoise` (``mode="gaussian"``): the same law with fewer normals: given U and b_U the
  output is exactly Gaussian with token covariance K_m = ΦΦᵀ/m + σ_W² (SPEC §2).
- :class:`ExactField`: the limit Brownian field, √dt · K(X)^{1/2} Ξ with K_ij = κ(⟨x_i, x_j⟩).
- :class:`RandomFeatureField`: a Brownian field with frozen random features of width M,
  covariance (1/M) Σ_k φ_k(x) φ_k(y) + σ_W² → κ as M → ∞; O(N M d) per step instead of O(N³).

Sources with state (random features) are set up by :meth:`reset` at the start of a run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Optional, Protocol

import torch

from .activations import ActivationLike, get_activation
from .kernel import NoiseKernel


class NoiseSource(Protocol):
    """What every noise source provides."""

    def reset(self, batch: int, d: int, generator: torch.Generator, dtype: torch.dtype, device) -> None:
        """Draw any state that lives for a whole run (one per sample)."""

    def increment(self, X: torch.Tensor, dt: float, generator: torch.Generator) -> torch.Tensor:
        """ΔW at the tokens: X (batch, N, d) → (batch, N, d)."""


def sqrt_psd(K: torch.Tensor, method: Literal["symmetric", "cholesky"] = "symmetric") -> torch.Tensor:
    """A square root S with S Sᵀ = K for symmetric PSD K: (..., n, n).

    ``symmetric``: K^{1/2} by eigh, negative eigenvalues (rounding) clamped to 0; robust when K is
    nearly singular (synchronised tokens). ``cholesky``: lower-triangular, falling back to the
    symmetric root for the matrices whose factorisation fails.
    """
    if method == "cholesky":
        L, info = torch.linalg.cholesky_ex(K)
        bad = info > 0
        if bool(bad.any()):
            L = L.clone()
            L[bad] = sqrt_psd(K[bad])
        return L
    evals, evecs = torch.linalg.eigh(K)
    return (evecs * evals.clamp_min(0).sqrt().unsqueeze(-2)) @ evecs.transpose(-1, -2)


def _normal(shape, generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    return torch.randn(*shape, generator=generator, dtype=like.dtype, device=like.device)


@dataclass
class MLPNoise:
    """The random MLP block G^m of SPEC §1, times the noise scale s, times √dt."""

    activation: ActivationLike = "relu"
    m: int = 256
    sigma_U: float = 0.0
    sigma_W: float = 0.0
    scale: float = 1.0
    mode: Literal["weights", "gaussian"] = "gaussian"

    def __post_init__(self) -> None:
        self._phi = get_activation(self.activation)

    def reset(self, batch, d, generator, dtype, device) -> None:  # stateless
        pass

    def hidden(self, X: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Φ = φ(U x/√d + b_U) with fresh U, b_U: X (batch, N, d) → (batch, m, N)."""
        B, N, d = X.shape
        U = _normal((B, self.m, d), generator, X)
        pre = (U @ X.transpose(-1, -2)) / math.sqrt(d)
        if self.sigma_U > 0:
            pre = pre + self.sigma_U * _normal((B, self.m, 1), generator, X)
        return self._phi(pre)

    def empirical_kernel(self, X: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """K_m = ΦᵀΦ/m + σ_W² for fresh inner weights: (batch, N, N) (SPEC §3 coupling)."""
        Phi = self.hidden(X, generator)
        return Phi.transpose(-1, -2) @ Phi / self.m + self.sigma_W**2

    def increment(self, X: torch.Tensor, dt: float, generator: torch.Generator) -> torch.Tensor:
        B, N, d = X.shape
        Phi = self.hidden(X, generator)  # (B, m, N)
        if self.mode == "weights" or self.m <= N:
            # W φ(...)/√m with W (d, m) i.i.d. N(0,1), written as Φᵀ Z with Z = Wᵀ: (B, m, d)
            out = Phi.transpose(-1, -2) @ _normal((B, self.m, d), generator, X)
        else:
            # Given Φ the rows are Gaussian with covariance ΦᵀΦ: draw N·d normals instead of m·d
            out = sqrt_psd(Phi.transpose(-1, -2) @ Phi, "cholesky") @ _normal((B, N, d), generator, X)
        out = out / math.sqrt(self.m)
        if self.sigma_W > 0:
            out = out + self.sigma_W * _normal((B, 1, d), generator, X)
        return (self.scale * math.sqrt(dt)) * out


@dataclass
class ExactField:
    """The limit field: ΔW = √dt K(X)^{1/2} Ξ, K_ij = κ(⟨x_i, x_j⟩) (SPEC §3). O(N³) per step."""

    kernel: NoiseKernel
    sqrt_method: Literal["symmetric", "cholesky"] = "symmetric"

    def reset(self, batch, d, generator, dtype, device) -> None:  # stateless
        pass

    def covariance(self, X: torch.Tensor) -> torch.Tensor:
        """K(X): (batch, N, N), computed in float64 and returned in X's dtype."""
        G = (X @ X.transpose(-1, -2)).clamp(-1.0, 1.0)
        return self.kernel.kappa(G.to(torch.float64)).to(X.dtype)

    def increment(self, X: torch.Tensor, dt: float, generator: torch.Generator, xi: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``xi``: optional normals (batch, N, d) to drive the field with (couplings)."""
        xi = _normal(X.shape, generator, X) if xi is None else xi
        return math.sqrt(dt) * (sqrt_psd(self.covariance(X), self.sqrt_method) @ xi)


@dataclass
class RandomFeatureField:
    """A Brownian field with M frozen random features per sample:

    W(t, x) = s ( (1/√M) Σ_k φ(u_k·x/√d + b_k) B^k_t + σ_W B^0_t ),  B^k ∈ R^d Brownian motions,

    with u_k ~ N(0, I_d), b_k ~ N(0, σ_U²) drawn once in :meth:`reset`. Its covariance tends to κ.
    ``token_chunk`` bounds memory to O(token_chunk · M) for many tokens.
    """

    activation: ActivationLike = "relu"
    features: int = 1024
    sigma_U: float = 0.0
    sigma_W: float = 0.0
    scale: float = 1.0
    token_chunk: Optional[int] = None
    _u: Optional[torch.Tensor] = field(default=None, repr=False)
    _b: Optional[torch.Tensor] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._phi = get_activation(self.activation)

    def reset(self, batch, d, generator, dtype, device) -> None:
        self._u = torch.randn(batch, d, self.features, generator=generator, dtype=dtype, device=device)
        self._b = self.sigma_U * torch.randn(batch, 1, self.features, generator=generator, dtype=dtype, device=device)

    def features_at(self, X: torch.Tensor) -> torch.Tensor:
        """φ(u_k·x/√d + b_k): X (batch, n, d) → (batch, n, M)."""
        if self._u is None:
            raise RuntimeError("RandomFeatureField.reset(...) must be called before use")
        return self._phi(X @ self._u / math.sqrt(X.shape[-1]) + self._b)

    def increment(self, X: torch.Tensor, dt: float, generator: torch.Generator) -> torch.Tensor:
        B, N, d = X.shape
        Z = _normal((B, self.features, d), generator, X)
        chunk = self.token_chunk or N
        out = torch.empty_like(X)
        for s in range(0, N, chunk):  # token chunks, memory O(chunk · M)
            out[:, s : s + chunk] = self.features_at(X[:, s : s + chunk]) @ Z
        out = out / math.sqrt(self.features)
        if self.sigma_W > 0:
            out = out + self.sigma_W * _normal((B, 1, d), generator, X)
        return (self.scale * math.sqrt(dt)) * out
