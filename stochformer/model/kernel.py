"""The noise kernel κ of the random MLP and the synchronisation rates built from it.

SPEC §2: ``E[G(x) G(y)ᵀ] = κ(⟨x,y⟩) I_d`` with

    κ(ρ) = s² ( E[φ(V₁) φ(V₂)] + σ_W² ),  (V₁, V₂) centred Gaussian,
    Var Vᵢ = v = 1/d + σ_U²,  Cov = c(ρ) = ρ/d + σ_U²,

where s is the overall noise scale (``noise_scale``, default 1). By Price's theorem
``κ'(ρ) = (s²/d) E[φ'(V₁) φ'(V₂)]``. Closed forms are used for relu, leaky_relu, linear and erf;
everything else (and any callable) goes through tensor-product Gauss–Hermite quadrature, with φ'
from autograd.

SPEC §5: λ₁ = ((d−3)/2) κ' − ((d−1)/2) κ, λ̄ = (d−1) κ' − (d−3) κ, and Theorem 1.4's
λ̄' = −inf_{u∈[−1,1)} F(u). SPEC §8 (derived, docs/spectrum.md): the whole Lyapunov spectrum of one
token's tangent flow λ_i = ((d−1−2i)/2) κ' − ((d−1)/2) κ, the moment exponent g(p) = pλ₁ + p²(κ+κ')/2
of a tangent vector (g(2) = λ̄) and its stability index p* = −2λ₁/(κ+κ').
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Annotated

import numpy as np
import torch

from .activations import LEAKY_RELU_SLOPE, ActivationLike, activation_name, get_activation
from ..core.validation import INT_MAX, EnergyBeta, FiniteFloat, Int, NonNegativeFloat, short, validated

_F64 = torch.float64


def _as_tensor(rho) -> torch.Tensor:
    return torch.as_tensor(rho, dtype=_F64)


def _as_rho(rho) -> torch.Tensor:
    """Cosines as a float64 tensor; ``ValueError`` unless finite and in [−1, 1] (rounding allowed)."""
    if torch.is_tensor(rho) and (rho.device.type == "meta" or rho.is_complex() or rho.dtype == torch.bool):
        raise ValueError(f"rho: must be cosines (real numbers in [-1, 1]), got {short(rho)}")
    try:
        rho = _as_tensor(np.asarray(rho) if isinstance(rho, (list, tuple)) else rho)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"rho: must be cosines (numbers in [-1, 1]), got {short(rho)}") from None
    if rho.is_complex():
        raise ValueError(f"rho: must be cosines (real numbers in [-1, 1]), got {short(rho)}")
    if not bool((rho.abs() <= 1.0 + 1e-6).all()):  # False for NaN too
        raise ValueError("rho: must be cosines, finite numbers in [-1, 1]")
    return rho


def _arccos_parts(r: torch.Tensor, v: float) -> tuple[torch.Tensor, torch.Tensor]:
    """θ = arccos(r) and the arc-cosine kernel E[relu(V₁) relu(V₂)] for Var v, correlation r."""
    theta = torch.arccos(r)
    k = v * (torch.sin(theta) + (math.pi - theta) * torch.cos(theta)) / (2 * math.pi)
    return theta, k


#: token dimensions of a kernel
_Dim = Annotated[int, Int(2, INT_MAX)]


@validated
@dataclass(frozen=True)
class NoiseKernel:
    """κ(ρ) for activation φ, dimension d, bias scales σ_U, σ_W and noise scale s.

    ``kappa(rho)`` and ``kappa_prime(rho)`` take any float or tensor of cosines in [−1, 1] and return
    a float64 tensor of the same shape. Arguments are checked (``ValueError`` naming the argument
    and its range); a κ that does not fit in float64 raises ``ValueError`` naming the fields.
    """

    activation: ActivationLike = "relu"
    d: _Dim = 3
    sigma_U: NonNegativeFloat = 0.0
    sigma_W: NonNegativeFloat = 0.0
    scale: NonNegativeFloat = 1.0
    quad_points: Annotated[int, Int(2, 1000)] = 64

    def __post_init__(self) -> None:
        if not callable(self.activation):
            get_activation(self.activation)  # ValueError naming the valid names

    @property
    def name(self) -> str:
        return activation_name(self.activation)

    @property
    def variance(self) -> float:
        """v = 1/d + σ_U², the variance of one pre-activation."""
        return 1.0 / self.d + self.sigma_U * self.sigma_U

    def _cov(self, rho: torch.Tensor) -> torch.Tensor:
        return rho / self.d + self.sigma_U * self.sigma_U

    def _corr(self, rho: torch.Tensor) -> torch.Tensor:
        """c(ρ)/v, computed without forming σ_U² when σ_U is large (no overflow)."""
        s = self.sigma_U
        if s <= 1.0:
            return (self._cov(rho) / self.variance).clamp(-1.0, 1.0)
        a = (1.0 / self.d) / s / s
        return ((rho * a + 1.0) / (a + 1.0)).clamp(-1.0, 1.0)

    def _finite(self, value: torch.Tensor, what: str) -> torch.Tensor:
        if not bool(torch.isfinite(value).all()):
            raise ValueError(f"NoiseKernel: {what} does not fit in float64 for activation={self.name}, d={self.d}, "
                             f"sigma_U={self.sigma_U:g}, sigma_W={self.sigma_W:g}, scale={self.scale:g}; "
                             "reduce sigma_U, sigma_W or scale")
        return value

    @cached_property
    def _nodes(self) -> tuple[torch.Tensor, torch.Tensor]:
        z, w = np.polynomial.hermite_e.hermegauss(self.quad_points)
        return torch.as_tensor(z, dtype=_F64), torch.as_tensor(w / math.sqrt(2 * math.pi), dtype=_F64)

    def _gauss_expectation(self, f, rho: torch.Tensor) -> torch.Tensor:
        """E[f(V₁) f(V₂)] by 2-D Gauss–Hermite, vectorised over rho (chunked to bound memory)."""
        z, w = (t.to(rho.device) for t in self._nodes)
        flat = rho.reshape(-1)
        out = torch.empty_like(flat)
        sv = math.hypot(1.0 / math.sqrt(self.d), self.sigma_U)  # √v without forming σ_U²
        f1 = f(sv * z)  # (n,) values at V₁ = √v z₁
        ww = w[:, None] * w[None, :]
        rows = max(1, min(256, (1 << 22) // ww.numel()))  # (R, n₁, n₂) blocks of at most 2²² entries
        for start in range(0, flat.numel(), rows):
            r = self._corr(flat[start : start + rows])[:, None, None]
            v2 = sv * (r * z[:, None] + torch.sqrt(1 - r**2) * z[None, :])  # (R, n₁, n₂)
            out[start : start + rows] = ((f1[:, None] * f(v2)) * ww).sum(dim=(-1, -2))
        return out.reshape(rho.shape)

    def _phi_prime(self, x: torch.Tensor) -> torch.Tensor:
        phi = get_activation(self.activation)
        with torch.enable_grad():
            xr = x.detach().clone().requires_grad_(True)
            (g,) = torch.autograd.grad(phi(xr).sum(), xr)
        return g.detach()

    def kappa(self, rho) -> torch.Tensor:
        """κ(ρ), float64, same shape as ``rho``."""
        rho = _as_rho(rho)
        r, v = self._corr(rho), self.variance
        name = self.activation if isinstance(self.activation, str) else None
        if name == "relu":
            base = _arccos_parts(r, v)[1]
        elif name == "leaky_relu":
            a = LEAKY_RELU_SLOPE  # φ = relu(x) − a relu(−x)
            base = (1 + a * a) * _arccos_parts(r, v)[1] - 2 * a * _arccos_parts(-r, v)[1]
        elif name == "linear":
            base = self._cov(rho)
        elif name == "erf":
            base = (2 / math.pi) * torch.arcsin(self._erf_ratio(rho))
        else:
            base = self._gauss_expectation(get_activation(self.activation), rho)
        return self._finite(self.scale * self.scale * (base + self.sigma_W * self.sigma_W), "kappa")

    def _erf_ratio(self, rho: torch.Tensor) -> torch.Tensor:
        """2c/(1 + 2v) of the erf kernel, divided through by max(1, σ_U²) (no overflow)."""
        m = max(1.0, self.sigma_U)
        s2, a = m * m, (self.sigma_U / m) ** 2  # s2 may be inf: its reciprocals are then 0
        return (2 * (rho / self.d / s2 + a) / (1 / s2 + 2 / self.d / s2 + 2 * a)).clamp(-1.0, 1.0)

    def kappa_prime(self, rho) -> torch.Tensor:
        """κ'(ρ) = (s²/d) E[φ'(V₁) φ'(V₂)] (Price's theorem), float64."""
        rho = _as_rho(rho)
        name = self.activation if isinstance(self.activation, str) else None
        if name in ("relu", "leaky_relu"):
            theta = torch.arccos(self._corr(rho))
            a = 0.0 if name == "relu" else LEAKY_RELU_SLOPE
            base = (1 + a * a) * (math.pi - theta) / (2 * math.pi) + a * theta / math.pi
        elif name == "linear":
            base = torch.ones_like(rho)
        elif name == "erf":  # (1 + 2v)² − 4c² = (1 + 2(1 − ρ)/d) (1 + 2(1 + ρ)/d + 4σ_U²)
            near = torch.sqrt(1 + 2 * (1 - rho) / self.d)
            far = torch.hypot(torch.sqrt(1 + 2 * (1 + rho) / self.d), torch.as_tensor(2 * self.sigma_U, dtype=_F64))
            base = (4 / math.pi) / (near * far)
        else:
            base = self._gauss_expectation(self._phi_prime, rho)
        return self._finite(self.scale * self.scale * base / self.d, "kappa_prime")

    @property
    def kappa1(self) -> float:
        """κ(1)."""
        return float(self.kappa(1.0))

    @property
    def kappa1_prime(self) -> float:
        """κ'(1)."""
        return float(self.kappa_prime(1.0))


@validated
@dataclass(frozen=True)
class Rates:
    """The constants of SPEC §5 for one kernel (and, for the ``*_total`` fields, an attention γ).

    ``lambda_1_total = lambda_1 − γ`` and ``lambda_bar_total = lambda_bar − 2γ`` add the derived
    near-synchronisation attention terms for Qᵀ K = βI, V = γI.
    """

    kappa: FiniteFloat
    kappa_prime: FiniteFloat
    lambda_1: FiniteFloat
    lambda_bar: FiniteFloat
    lambda_bar_prime: FiniteFloat
    lambda_1_total: FiniteFloat
    lambda_bar_total: FiniteFloat
    beta: FiniteFloat
    gamma: FiniteFloat

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


@validated
def lyapunov_exponent(kappa: FiniteFloat, kappa_prime: FiniteFloat, d: Annotated[int, Int(2)]) -> float:
    """λ₁ = ((d−3)/2) κ'(1) − ((d−1)/2) κ(1)."""
    return _fits("lyapunov_exponent", 0.5 * (d - 3) * kappa_prime - 0.5 * (d - 1) * kappa)


@validated
def first_moment_rate(kappa: FiniteFloat, kappa_prime: FiniteFloat, d: Annotated[int, Int(2)]) -> float:
    """λ̄ = (d−1) κ'(1) − (d−3) κ(1)."""
    return _fits("first_moment_rate", (d - 1) * kappa_prime - (d - 3) * kappa)


@validated
def lyapunov_spectrum(kappa: FiniteFloat, kappa_prime: FiniteFloat, d: Annotated[int, Int(2)]) -> list[float]:
    """The d − 1 Lyapunov exponents of one token's tangent flow under the noise alone (SPEC §8,
    derived in docs/spectrum.md), in decreasing order when κ'(1) > 0:

        λ_i = ((d − 1 − 2i)/2) κ'(1) − ((d − 1)/2) κ(1),   i = 1, …, d − 1.

    Equally spaced by κ'(1); λ_1 is :func:`lyapunov_exponent`; the sum rule
    Σ λ_i = −(d−1) κ'(1)/2 − (d−1)² κ(1)/2 is the rate of log-volume of a (d−1)-frame."""
    half = 0.5 * (d - 1)
    return [_fits("lyapunov_spectrum", 0.5 * (d - 1 - 2 * i) * kappa_prime - half * kappa) for i in range(1, d)]


@validated
def moment_exponent(p: FiniteFloat, kappa: FiniteFloat, kappa_prime: FiniteFloat, d: Annotated[int, Int(2)]) -> float:
    """g(p) = p λ₁ + p² (κ(1) + κ'(1))/2: E|v_t|^p = |v_0|^p e^{g(p) t} for a tangent vector v of one
    token (SPEC §8: log|v_t| is a Brownian motion with drift λ₁ and variance rate κ + κ'). g(2) is
    :func:`first_moment_rate` λ̄, the mean-square growth rate of the input–output Jacobian."""
    return _fits("moment_exponent", p * lyapunov_exponent(kappa, kappa_prime, d) + 0.5 * p * p * (kappa + kappa_prime))


@validated
def stability_index(kappa: FiniteFloat, kappa_prime: FiniteFloat, d: Annotated[int, Int(2)]) -> float:
    """p* = −2λ₁/(κ(1) + κ'(1)), the root p ≠ 0 of g(p) (:func:`moment_exponent`): for λ₁ < 0 the
    moments E|v_t|^p decay for 0 < p < p* and grow for p > p* (SPEC §8). NaN without noise
    (κ + κ' = 0: g ≡ 0)."""
    spread = kappa + kappa_prime
    if spread == 0:
        return math.nan
    return _fits("stability_index", -2.0 * lyapunov_exponent(kappa, kappa_prime, d) / spread)


def _fits(name: str, rate: float) -> float:
    if not math.isfinite(rate):
        raise ValueError(f"{name}: the rate does not fit in float64; reduce kappa, kappa_prime or d")
    return rate


@validated
def theorem14_F(kernel: NoiseKernel, u, beta: EnergyBeta) -> torch.Tensor:
    """F(u) = β e^{βu} G(u) / (e^β − e^{βu}), G = G₀ + β G₁ (SPEC §5), for u in [−1, 1)."""
    u = _as_rho(u)
    if not bool((u < 1).all()):
        raise ValueError("u: must be cosines in [-1, 1) (F has a pole at u = 1)")
    return _theorem14_F(kernel, u, beta)


def _theorem14_F(kernel: NoiseKernel, u: torch.Tensor, beta: float) -> torch.Tensor:
    d, k1, ku = kernel.d, kernel.kappa1, kernel.kappa(u)
    g0 = ku * (d - 2 + u**2) - k1 * (d - 1) * u
    g1 = (1 - u**2) * (k1 - u * ku)
    # e^β − e^{βu} = −e^β expm1(β(u−1)), accurate as u → 1; dividing through by e^β:
    return beta * torch.exp(beta * (u - 1)) * (g0 + beta * g1) / (-torch.expm1(beta * (u - 1)))


@validated
def lambda_bar_prime(kernel: NoiseKernel, beta: EnergyBeta, grid: Annotated[int, Int(3, 10**7)] = 4001) -> float:
    """λ̄' = −inf_{u∈[−1,1)} F(u), on a grid refined towards u = 1, with the limit F(1⁻) = −λ̄."""
    s = torch.linspace(0.0, 1.0, grid, dtype=_F64)[:-1]
    u = torch.cat([-1 + 2 * s, 1 - torch.logspace(-1, -7, 200, dtype=_F64)])
    f_min = float(_theorem14_F(kernel, u, beta).min())
    lam_bar = first_moment_rate(kernel.kappa1, kernel.kappa1_prime, kernel.d)
    return -min(f_min, -lam_bar)


@validated
def rates(kernel: NoiseKernel, beta: EnergyBeta = 1.0, gamma: FiniteFloat = 0.0) -> Rates:
    """κ(1), κ'(1), λ₁, λ̄, λ̄' (energy inverse temperature β, in (0, 700]) and the attention-shifted
    rates (γ finite). ``ValueError`` naming the argument for invalid input or a rate beyond float64."""
    k, kp, d = kernel.kappa1, kernel.kappa1_prime, kernel.d
    too_big = ValueError(f"rates: the rates do not fit in float64 (kappa(1) = {k:.3g}, d = {d}); reduce sigma_U, "
                         "sigma_W, scale, d or gamma")
    try:
        lam1, lbar = lyapunov_exponent(k, kp, d), first_moment_rate(k, kp, d)
    except ValueError:
        raise too_big from None
    if not (math.isfinite(lam1 - gamma) and math.isfinite(lbar - 2 * gamma)):
        raise too_big
    return Rates(
        kappa=k,
        kappa_prime=kp,
        lambda_1=lam1,
        lambda_bar=lbar,
        lambda_bar_prime=lambda_bar_prime(kernel, beta),
        lambda_1_total=lam1 - gamma,
        lambda_bar_total=lbar - 2 * gamma,
        beta=beta,
        gamma=gamma,
    )
