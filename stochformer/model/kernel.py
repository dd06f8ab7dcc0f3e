"""The noise kernel κ of the random MLP and the synchronisation rates built from it.

SPEC §2: ``E[G(x) G(y)ᵀ] = κ(⟨x,y⟩) I_d`` with

    κ(ρ) = s² ( E[φ(V₁) φ(V₂)] + σ_W² ),  (V₁, V₂) centred Gaussian,
    Var Vᵢ = v = 1/d + σ_U²,  Cov = c(ρ) = ρ/d + σ_U²,

where s is the overall noise scale (``noise_scale``, default 1). By Price's theorem
``κ'(ρ) = (s²/d) E[φ'(V₁) φ'(V₂)]``. Closed forms are used for relu, leaky_relu, linear and erf;
everything else (and any callable) goes through tensor-product Gauss–Hermite quadrature, with φ'
from autograd.

SPEC §5: λ₁ = ((d−3)/2) κ' − ((d−1)/2) κ, λ̄ = (d−1) κ' − (d−3) κ, and Theorem 1.4's
λ̄' = −inf_{u∈[−1,1)} F(u).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any

import numpy as np
import torch

from .activations import LEAKY_RELU_SLOPE, ActivationLike, activation_name, get_activation
from ..validation import INT_MAX, check_float, check_int

_F64 = torch.float64


def _as_tensor(rho) -> torch.Tensor:
    return torch.as_tensor(rho, dtype=_F64)


def _as_rho(rho) -> torch.Tensor:
    """Cosines as a float64 tensor; ``ValueError`` unless finite and in [−1, 1] (rounding allowed)."""
    try:
        rho = _as_tensor(rho)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"rho: must be cosines (numbers in [-1, 1]), got {rho!r}") from None
    if not bool((rho.abs() <= 1.0 + 1e-6).all()):  # False for NaN too
        raise ValueError("rho: must be cosines, finite numbers in [-1, 1]")
    return rho


def _arccos_parts(r: torch.Tensor, v: float) -> tuple[torch.Tensor, torch.Tensor]:
    """θ = arccos(r) and the arc-cosine kernel E[relu(V₁) relu(V₂)] for Var v, correlation r."""
    theta = torch.arccos(r)
    k = v * (torch.sin(theta) + (math.pi - theta) * torch.cos(theta)) / (2 * math.pi)
    return theta, k


@dataclass(frozen=True)
class NoiseKernel:
    """κ(ρ) for activation φ, dimension d, bias scales σ_U, σ_W and noise scale s.

    ``kappa(rho)`` and ``kappa_prime(rho)`` take any float or tensor of cosines in [−1, 1] and return
    a float64 tensor of the same shape. Arguments are checked (``ValueError`` naming the argument
    and its range); a κ that does not fit in float64 raises ``ValueError`` naming the fields.
    """

    activation: ActivationLike = "relu"
    d: int = 3
    sigma_U: float = 0.0
    sigma_W: float = 0.0
    scale: float = 1.0
    quad_points: int = 64

    def __post_init__(self) -> None:
        if not callable(self.activation):
            get_activation(self.activation)  # ValueError naming the valid names
        check_int("d", self.d, 2, INT_MAX)
        check_float("sigma_U", self.sigma_U, 0.0)
        check_float("sigma_W", self.sigma_W, 0.0)
        check_float("scale", self.scale, 0.0)
        check_int("quad_points", self.quad_points, 2, 1000)

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
        for start in range(0, flat.numel(), 256):
            r = self._corr(flat[start : start + 256])[:, None, None]
            v2 = sv * (r * z[:, None] + torch.sqrt(1 - r**2) * z[None, :])  # (R, n₁, n₂)
            out[start : start + 256] = ((f1[:, None] * f(v2)) * ww).sum(dim=(-1, -2))
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


@dataclass(frozen=True)
class Rates:
    """The constants of SPEC §5 for one kernel (and, for the ``*_total`` fields, an attention γ).

    ``lambda_1_total = lambda_1 − γ`` and ``lambda_bar_total = lambda_bar − 2γ`` add the derived
    near-synchronisation attention terms for Qᵀ K = βI, V = γI.
    """

    kappa: float
    kappa_prime: float
    lambda_1: float
    lambda_bar: float
    lambda_bar_prime: float
    lambda_1_total: float
    lambda_bar_total: float
    beta: float
    gamma: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def lyapunov_exponent(kappa: float, kappa_prime: float, d: int) -> float:
    """λ₁ = ((d−3)/2) κ'(1) − ((d−1)/2) κ(1)."""
    check_int("d", d, 2)
    return 0.5 * (d - 3) * kappa_prime - 0.5 * (d - 1) * kappa


def first_moment_rate(kappa: float, kappa_prime: float, d: int) -> float:
    """λ̄ = (d−1) κ'(1) − (d−3) κ(1)."""
    check_int("d", d, 2)
    return (d - 1) * kappa_prime - (d - 3) * kappa


def theorem14_F(kernel: NoiseKernel, u, beta: float) -> torch.Tensor:
    """F(u) = β e^{βu} G(u) / (e^β − e^{βu}), G = G₀ + β G₁ (SPEC §5), for u in [−1, 1)."""
    u = _as_tensor(u)
    d, k1, ku = kernel.d, kernel.kappa1, kernel.kappa(u)
    g0 = ku * (d - 2 + u**2) - k1 * (d - 1) * u
    g1 = (1 - u**2) * (k1 - u * ku)
    # e^β − e^{βu} = −e^β expm1(β(u−1)), accurate as u → 1; dividing through by e^β:
    return beta * torch.exp(beta * (u - 1)) * (g0 + beta * g1) / (-torch.expm1(beta * (u - 1)))


def lambda_bar_prime(kernel: NoiseKernel, beta: float, grid: int = 4001) -> float:
    """λ̄' = −inf_{u∈[−1,1)} F(u), on a grid refined towards u = 1, with the limit F(1⁻) = −λ̄."""
    _check_kernel(kernel)
    beta = check_float("beta", beta, 0.0, 700.0, low_open=True)
    grid = check_int("grid", grid, 3)
    s = torch.linspace(0.0, 1.0, grid, dtype=_F64)[:-1]
    u = torch.cat([-1 + 2 * s, 1 - torch.logspace(-1, -7, 200, dtype=_F64)])
    f_min = float(theorem14_F(kernel, u, beta).min())
    lam_bar = first_moment_rate(kernel.kappa1, kernel.kappa1_prime, kernel.d)
    return -min(f_min, -lam_bar)


def _check_kernel(kernel: Any) -> None:
    if not isinstance(kernel, NoiseKernel):
        raise ValueError(f"kernel: must be a NoiseKernel, got {type(kernel).__name__}")


def rates(kernel: NoiseKernel, beta: float = 1.0, gamma: float = 0.0) -> Rates:
    """κ(1), κ'(1), λ₁, λ̄, λ̄' (energy inverse temperature β, in (0, 700]) and the attention-shifted
    rates (γ finite). ``ValueError`` naming the argument for invalid input or a rate beyond float64."""
    _check_kernel(kernel)
    beta = check_float("beta", beta, 0.0, 700.0, low_open=True)
    gamma = check_float("gamma", gamma)
    k, kp, d = kernel.kappa1, kernel.kappa1_prime, kernel.d
    lam1, lbar = lyapunov_exponent(k, kp, d), first_moment_rate(k, kp, d)
    if not all(math.isfinite(x) for x in (lam1, lbar, lam1 - gamma, lbar - 2 * gamma)):
        raise ValueError(f"rates: the rates do not fit in float64 (kappa(1) = {k:.3g}, d = {d}); reduce sigma_U, "
                         "sigma_W, scale, d or gamma")
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
