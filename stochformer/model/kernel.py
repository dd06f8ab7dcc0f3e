"""The noise kernel κ of the random MLP and the synchronisation rates built from it.

SPEC §2: ``E[G(x) G(y)ᵀ] = κ(⟨x,y⟩) I_d`` with

    κ(ρ) = s² ( E[φ(V₁) φ(V₂)] + σ_W² ),  (V₁, V₂) centred Gaussian,
    Var Vᵢ = v = g²/d + σ_U²,  Cov = c(ρ) = g²ρ/d + σ_U²,

where s is the overall noise scale (``noise_scale``, default 1) and g the gain (``gain``, default
1): the std of the inner weights U, which have variance g² (SPEC §8, the order-to-chaos
transition; docs/theory.md). By Price's theorem ``κ'(ρ) = (s² g²/d) E[φ'(V₁) φ'(V₂)]``. Closed forms are used for relu, leaky_relu, linear and erf
(ReLU's to full relative precision also where c/v is near −1: there its arc-cosine part is summed
as a series in π − θ, `NoiseKernel._near_antipodal`);
everything else (and any callable) goes through tensor-product Gauss–Hermite quadrature for a
pre-activation variance v ≤ 1 and Mehler's Hermite series above (accurate at any v), with φ' from
autograd.

SPEC §5: λ₁ = ((d−3)/2) κ' − ((d−1)/2) κ, λ̄ = (d−1) κ' − (d−3) κ, and Theorem 1.4's
λ̄' = −inf_{u∈[−1,1)} F(u). SPEC §8 (derived, docs/spectrum.md): the whole Lyapunov spectrum of one
token's tangent flow λ_i = ((d−1−2i)/2) κ' − ((d−1)/2) κ, the moment exponent g(p) = pλ₁ + p²(κ+κ')/2
of a tangent vector (g(2) = λ̄) and its stability index p* = −2λ₁/(κ+κ'); the critical gain g_c
where λ₁ changes sign as the inner weights' std g grows ([`critical_gain`][stochformer.model.kernel.critical_gain], the order-to-chaos
transition).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from functools import cached_property
from typing import Annotated

import numpy as np
import torch

from .activations import LEAKY_RELU_SLOPE, ActivationLike, activation_name, get_activation
from ..core.validation import INT_MAX, EnergyBeta, FiniteFloat, Int, NonNegativeFloat, Real, short, validated

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
    if torch.is_grad_enabled() and r.requires_grad:
        return theta, v * (torch.sin(theta) + (math.pi - theta) * torch.cos(theta)) / (2 * math.pi)
    # the same operations in two buffers (the same values; a quarter of the passes over memory)
    k = torch.cos(theta).mul_(math.pi - theta)
    return theta, k.add_(torch.sin(theta)).mul_(v).div_(2 * math.pi)


def _panels(half: float, width: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Nodes and weights of composite 16-point Gauss–Legendre on [−half, half]: an even number of
    equal panels at most ``width`` wide (so a panel edge sits at the kink 0 of relu-like φ)."""
    panels = 2 * math.ceil(half / width)
    edges = torch.linspace(-half, half, panels + 1, dtype=_F64)
    z, w = (torch.as_tensor(t, dtype=_F64) for t in np.polynomial.legendre.leggauss(16))
    mid, h = (edges[1:] + edges[:-1]) / 2, (edges[1:] - edges[:-1]) / 2
    return (mid[:, None] + h[:, None] * z).reshape(-1), (h[:, None] * w).reshape(-1)


#: below this correlation c/v (π − θ < 0.505) ReLU's arc-cosine part is summed as its series
#: J(θ) = sin δ − δ cos δ = Σ_k (−1)^{k+1} 2k δ^{2k+1}/(2k+1)!, δ = π − θ (`NoiseKernel._near_antipodal`)
ANTIPODAL = -0.875
#: that series' coefficients of δ³, δ⁵, …, δ¹⁹ (the next term is below 10⁻²⁰ of the sum for δ < 0.505)
_ANTIPODAL_SERIES = tuple((-1) ** (k + 1) * 2 * k / math.factorial(2 * k + 1) for k in range(1, 10))

#: the activations with closed-form kernels
CLOSED_FORMS = ("relu", "leaky_relu", "linear", "erf")
#: the composite rule of [`NoiseKernel.moments_at_one`][stochformer.model.kernel.NoiseKernel.moments_at_one]: its largest panel width (in x) and panel
#: count (the panels widen beyond v ≈ 10⁵)
DIAGONAL_PANEL, DIAGONAL_PANELS = 0.5, 1 << 15
#: above this pre-activation variance v the quadrature route takes the Hermite (Mehler) series, at
#: most ``MEHLER_TERMS`` terms, instead of 2-D Gauss–Hermite, whose central nodes are ≈ 0.28√v
#: apart: too coarse for φ's own scale 1 once v ≫ 1 (tanh at d = 4, g = 10: κ'(1) = 1.444 against 2.643)
#: (up to v = ``MEHLER_MAX_VARIANCE``: beyond it its panels, 0.5/√v wide, are too many, and
#: Gauss–Hermite is kept, where a bounded φ is its limiting sign function at the nodes)
MEHLER_VARIANCE, MEHLER_TERMS, MEHLER_MAX_VARIANCE = 1.0, 4096, 1e4

#: token dimensions of a kernel
_Dim = Annotated[int, Int(2, INT_MAX)]


@validated
@dataclass(frozen=True)
class NoiseKernel:
    r"""The noise kernel κ of SPEC §2 for activation φ, dimension d, bias scales σ_U, σ_W, noise scale s and gain g.

    $$
    \kappa(\rho) = s^2\Big(\mathbb{E}\big[\varphi(V_1)\,\varphi(V_2)\big] + \sigma_W^2\Big), \qquad
    \operatorname{Var} V_i = \frac{g^2}{d} + \sigma_U^2, \quad \operatorname{Cov}(V_1, V_2) = \frac{g^2\rho}{d} + \sigma_U^2,
    $$

    $(V_1, V_2)$ centred Gaussian, so that $\mathbb{E}[G^m(x)\,G^m(y)^\top] = \kappa(\langle x, y\rangle)\,I_d$;
    closed forms for ReLU, leaky ReLU, linear and erf, Gauss–Hermite quadrature otherwise.
    ``kappa(rho)`` and ``kappa_prime(rho)`` take any float or tensor of cosines in [−1, 1] and return
    a float64 tensor of the same shape.

    Parameters
    ----------
    activation : str or callable, optional
        φ: a name of [`ACTIVATIONS`][stochformer.model.activations] or a callable on tensors.
    d : int, optional
        The token dimension, >= 2.
    sigma_U, sigma_W : float, optional
        Standard deviations of the inner and outer biases, >= 0.
    scale : float, optional
        The noise scale s, >= 0 (κ → s²κ).
    quad_points : int, optional
        Gauss–Hermite nodes per dimension, in [2, 1000].
    gain : float, optional
        g >= 0, finite (default 1): the std of the inner weights U, which have variance g² (SPEC §8);
        κ'(ρ) = (s² g²/d) E[φ'(V₁) φ'(V₂)]. At g = 1 every value is bit for bit that of the kernel
        without a gain.

    Raises
    ------
    ValueError
        An argument out of range (naming it and its range), an unknown activation, or a κ that does
        not fit in float64 (naming the fields).

    Examples
    --------
    >>> from stochformer import NoiseKernel
    >>> k = NoiseKernel("linear", d=4)      # κ(ρ) = ρ/d
    >>> k.kappa1, k.kappa1_prime
    (0.25, 0.25)
    """

    activation: ActivationLike = "relu"
    d: _Dim = 3
    sigma_U: NonNegativeFloat = 0.0
    sigma_W: NonNegativeFloat = 0.0
    scale: NonNegativeFloat = 1.0
    quad_points: Annotated[int, Int(2, 1000)] = 64
    gain: NonNegativeFloat = 1.0

    def __post_init__(self) -> None:
        if not callable(self.activation):
            get_activation(self.activation)  # ValueError naming the valid names

    @property
    def name(self) -> str:
        return activation_name(self.activation)

    @property
    def variance(self) -> float:
        """v = g²/d + σ_U², the variance of one pre-activation."""
        return self._g2 / self.d + self.sigma_U * self.sigma_U

    @property
    def _g2(self) -> float:
        """g², the variance of one inner weight (exactly 1.0 at the default gain)."""
        return self.gain * self.gain

    def _cov(self, rho: torch.Tensor) -> torch.Tensor:
        return self._g2 * rho / self.d + self.sigma_U * self.sigma_U

    def _corr(self, rho: torch.Tensor) -> torch.Tensor:
        """c(ρ)/v, computed without forming σ_U² when σ_U is large (no overflow); 1 where v = 0
        (g = σ_U = 0: both pre-activations are 0)."""
        s = self.sigma_U
        if self.variance == 0.0:
            return torch.ones_like(rho)
        if s <= 1.0:
            return (self._cov(rho) / self.variance).clamp(-1.0, 1.0)
        a = (self._g2 / self.d) / s / s
        return ((rho * a + 1.0) / (a + 1.0)).clamp(-1.0, 1.0)

    def _angle(self, rho: torch.Tensor, complement: bool = False) -> torch.Tensor:
        """θ = arccos(c(ρ)/v) as 2 atan2(√(v − c), √(v + c)), v − c = g²(1 − ρ)/d and v + c =
        g²(1 + ρ)/d + 2σ_U² formed without cancellation (arccos of the rounded ratio c/v has an
        error ε/√(1 − r²): percents of κ' near ρ = −1 when σ_U ≪ g/√d); divided through by
        max(1, σ_U)² (no overflow); 0 where v = 0. ``complement``: π − θ = 2 atan2(√(v + c), √(v − c)),
        to full relative precision where it is small (θ near π)."""
        if self.variance == 0.0:
            return torch.full_like(rho, math.pi) if complement else torch.zeros_like(rho)
        m = max(1.0, self.sigma_U)
        g2d = self._g2 / self.d / m / m
        lo = (g2d * (1 - rho)).clamp(min=0.0)
        hi = (g2d * (1 + rho)).clamp(min=0.0) + 2 * (self.sigma_U / m) ** 2
        return 2 * (torch.atan2(hi.sqrt(), lo.sqrt()) if complement else torch.atan2(lo.sqrt(), hi.sqrt()))

    def _near_antipodal(self, rho: torch.Tensor, r: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        """ReLU's E[relu(V₁) relu(V₂)] = v J(θ)/(2π), J = sin θ + (π − θ) cos θ, where the correlation
        r = c/v is below `ANTIPODAL`: by J's series in δ = π − θ (`_angle`'s complement), where the
        closed form cancels (J ≈ δ³/3 out of terms of order δ: its relative error grows as ε/δ³, a
        factor 8838 off at ρ = −1, σ_U = 10⁻⁷, d = 3). ``base`` elsewhere (on a CPU, one comparison
        when no entry is that close; elsewhere both, without waiting for the device to answer)."""
        near = r < ANTIPODAL
        cpu = r.device.type == "cpu"
        if cpu and not bool(near.any()):
            return base
        # on a CPU for those entries only (0.1% of the pairs of uniform tokens at d = 8, 16% at d = 2;
        # the series costs a few dozen passes), into a copy of base (it may be in an autograd
        # graph); elsewhere on all entries
        flat = near.reshape(-1)
        delta = self._angle(rho.reshape(-1)[flat] if cpu else rho, complement=True)  # r has rho's shape
        d2, series = delta * delta, torch.zeros_like(delta)
        for c in reversed(_ANTIPODAL_SERIES):
            series = series * d2 + c
        value = self.variance * series * d2 * delta / (2 * math.pi)
        return base.reshape(-1).index_put((flat,), value).view(base.shape) if cpu else torch.where(near, value, base)

    def _finite(self, value: torch.Tensor, what: str) -> torch.Tensor:
        if not bool(torch.isfinite(value).all()):
            raise ValueError(f"NoiseKernel: {what} does not fit in float64 for activation={self.name}, d={self.d}, "
                             f"sigma_U={self.sigma_U:g}, sigma_W={self.sigma_W:g}, scale={self.scale:g}"
                             + (f", gain={self.gain:g}; reduce sigma_U, sigma_W, scale (a config's noise_scale) or gain" if self.gain != 1.0 else
                                "; reduce sigma_U, sigma_W or scale (a config's noise_scale)"))
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
        sv = self._std
        f1 = f(sv * z)  # (n,) values at V₁ = √v z₁
        ww = w[:, None] * w[None, :]
        rows = max(1, min(256, (1 << 22) // ww.numel()))  # (R, n₁, n₂) blocks of at most 2²² entries
        for start in range(0, flat.numel(), rows):
            r = self._corr(flat[start : start + rows])[:, None, None]
            v2 = sv * (r * z[:, None] + torch.sqrt(1 - r**2) * z[None, :])  # (R, n₁, n₂)
            out[start : start + rows] = ((f1[:, None] * f(v2)) * ww).sum(dim=(-1, -2))
        return out.reshape(rho.shape)

    def _hermite_coefficients(self, f) -> tuple[torch.Tensor, float]:
        """a_n = E[f(√v Z) h_n(Z)], n = 0..N (h_n = He_n/√n!, orthonormal for N(0, 1)) and the mass
        E[f(√v Z)²] − Σ a_n² left beyond N: the composite rule of `_panels` in z over |z| ≤ 10
        (panels at most min(0.05, 0.5/√v) wide), h_n by its three-term recurrence; N grows until
        the mass left is below 10⁻¹⁵ E[f²] or reaches ``MEHLER_TERMS``."""
        sv = self._std
        z, w = _panels(10.0, min(0.05, 0.5 / sv))
        fz = f(sv * z)
        fw = fz * w * torch.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
        total = float((fz * fw).sum())
        coeffs, h_prev, h = [float(fw.sum())], torch.zeros_like(z), torch.ones_like(z)
        left = total - coeffs[0] ** 2
        for n in range(1, MEHLER_TERMS + 1):
            h_prev, h = h, (z * h - math.sqrt(n - 1) * h_prev) / math.sqrt(n)
            coeffs.append(float((fw * h).sum()))
            left -= coeffs[-1] ** 2
            if left <= 1e-15 * abs(total):
                break
        return torch.tensor(coeffs, dtype=_F64), max(left, 0.0)

    @cached_property
    def _hermite_phi(self) -> tuple[torch.Tensor, float]:
        return self._hermite_coefficients(get_activation(self.activation))

    @cached_property
    def _hermite_phi_prime(self) -> tuple[torch.Tensor, float]:
        return self._hermite_coefficients(self._phi_prime)

    def _mehler_expectation(self, terms: tuple[torch.Tensor, float], rho: torch.Tensor) -> torch.Tensor:
        """E[f(V₁) f(V₂)] = Σ_n a_n² r^n (Mehler's formula, r = c(ρ)/v) from f's Hermite ``terms``,
        with the mass left beyond the last term N added as left · r^{N+1}: exact at r = 1, and
        within left · |r|^{N+1} elsewhere."""
        a, left = terms
        a = a.to(rho.device)
        r = self._corr(rho.reshape(-1))[:, None]
        n = torch.arange(a.numel(), dtype=_F64, device=rho.device)
        out = (a * a * r ** n).sum(-1) + left * r[:, 0] ** a.numel()
        return out.reshape(rho.shape)

    @property
    def _std(self) -> float:
        """√v, without forming σ_U² (no overflow)."""
        return math.hypot(self.gain / math.sqrt(self.d), self.sigma_U)

    def _diagonal_expectation(self, f) -> float:
        """E[f(V)²], V ~ N(0, v), by the composite rule of `_panels` in x: panels at most
        ``DIAGONAL_PANEL`` wide (the activation's own scale 1) over |x| ≤ 12√v, at most
        ``DIAGONAL_PANELS`` of them."""
        sv = self._std
        if sv == 0.0:
            return float(f(torch.zeros(1, dtype=_F64))[0] ** 2)
        half = 12.0 * sv
        if not math.isfinite(half):
            raise ValueError(f"NoiseKernel: the pre-activation's variance does not fit in float64 (sigma_U={self.sigma_U:g}, "
                             f"gain={self.gain:g}); reduce sigma_U or gain")
        x, w = _panels(half, max(DIAGONAL_PANEL, half / (DIAGONAL_PANELS // 2)))
        weight = w * torch.exp(-0.5 * (x / sv) ** 2) / (sv * math.sqrt(2 * math.pi))
        return float((f(x) ** 2 * weight).sum())

    @property
    def moments_at_one(self) -> tuple[float, float]:
        """(κ(1), κ'(1)) of the Gaussian pre-activation law, accurate whatever v = g²/d + σ_U²: the
        closed forms (relu, leaky_relu, linear, erf: [`kappa1`][stochformer.model.kernel.NoiseKernel.kappa1], [`kappa1_prime`][stochformer.model.kernel.NoiseKernel.kappa1_prime]), else the
        1-D expectations s²(E[φ(V)²] + σ_W²) and (s² g²/d) E[φ'(V)²] by a composite rule
        (`_diagonal_expectation`; within 1e-10 of scipy's adaptive quadrature, tests/test_gain.py).

        Above ``MEHLER_VARIANCE`` the kernel's own κ(1), κ'(1) (Mehler's series) equal these to 1e-12;
        [`gain_exponent`][stochformer.model.kernel.gain_exponent] and
        [`critical_gain`][stochformer.model.kernel.critical_gain] use these moments."""
        name = self.activation if isinstance(self.activation, str) else None
        if name in CLOSED_FORMS:
            return self.kappa1, self.kappa1_prime
        s2 = self.scale * self.scale
        k1 = s2 * (self._diagonal_expectation(get_activation(self.activation)) + self.sigma_W * self.sigma_W)
        kp = s2 * self._diagonal_expectation(self._phi_prime) * self._g2 / self.d
        for value, what in ((k1, "kappa"), (kp, "kappa_prime")):
            self._finite(torch.tensor(value, dtype=_F64), what)
        return k1, kp

    def _phi_prime(self, x: torch.Tensor) -> torch.Tensor:
        phi = get_activation(self.activation)
        with torch.enable_grad():
            xr = x.detach().clone().requires_grad_(True)
            (g,) = torch.autograd.grad(phi(xr).sum(), xr)
        return g.detach()

    def kappa(self, rho) -> torch.Tensor:
        r"""The noise kernel $\kappa(\rho) = s^2\,(\mathbb{E}[\phi(V_1)\phi(V_2)] + \sigma_W^2)$ (SPEC §2)
        at cosines ρ.

        Parameters
        ----------
        rho : float, sequence or torch.Tensor
            Cosines in [−1, 1] (rounding beyond allowed up to 1e-6).

        Returns
        -------
        torch.Tensor
            κ(ρ), float64, the shape of ``rho``.

        Raises
        ------
        ValueError
            If ``rho`` is not cosines, or κ is beyond float64 (naming the fields).
        """
        return self._finite(self.kappa_of_cosines(_as_rho(rho)), "kappa")

    def kappa_of_cosines(self, rho: torch.Tensor) -> torch.Tensor:
        """[`kappa`][stochformer.model.kernel.NoiseKernel.kappa] without its checks, for callers that
        hold float64 cosines already in [−1, 1] and a κ known to fit in float64 (``kappa(1.0)``
        called once): the same values, two passes over memory fewer.

        Parameters
        ----------
        rho : torch.Tensor
            float64 cosines in [−1, 1].

        Returns
        -------
        torch.Tensor
            κ(ρ), the shape of ``rho``.
        """
        r, v = self._corr(rho), self.variance
        name = self.activation if isinstance(self.activation, str) else None
        if name == "relu":
            base = self._near_antipodal(rho, r, _arccos_parts(r, v)[1])
        elif name == "leaky_relu":
            a = LEAKY_RELU_SLOPE  # φ = relu(x) − a relu(−x)
            base = (1 + a * a) * _arccos_parts(r, v)[1] - 2 * a * _arccos_parts(-r, v)[1]
        elif name == "linear":
            base = self._cov(rho)
        elif name == "erf":
            base = (2 / math.pi) * torch.arcsin(self._erf_ratio(rho))
        elif MEHLER_VARIANCE < self.variance <= MEHLER_MAX_VARIANCE:
            base = self._mehler_expectation(self._hermite_phi, rho)
        else:
            base = self._gauss_expectation(get_activation(self.activation), rho)
        if self.sigma_W != 0.0:
            base = base + self.sigma_W * self.sigma_W
        return base if self.scale == 1.0 else self.scale * self.scale * base

    def _erf_ratio(self, rho: torch.Tensor) -> torch.Tensor:
        """2c/(1 + 2v) of the erf kernel, divided through by max(1, σ_U²) (no overflow)."""
        m, g2 = max(1.0, self.sigma_U), self._g2
        s2, a = m * m, (self.sigma_U / m) ** 2  # s2 may be inf: its reciprocals are then 0
        return (2 * (g2 * rho / self.d / s2 + a) / (1 / s2 + 2 * g2 / self.d / s2 + 2 * a)).clamp(-1.0, 1.0)

    def kappa_prime(self, rho) -> torch.Tensor:
        r"""The kernel's slope by Price's theorem,

        $$
        \kappa'(\rho) = \frac{s^2 g^2}{d}\, \mathbb{E}[\phi'(V_1)\,\phi'(V_2)] ,
        $$

        in closed form for relu, leaky_relu, linear and erf, by Mehler's series or Gauss–Hermite
        quadrature otherwise.

        Parameters
        ----------
        rho : float, sequence or torch.Tensor
            Cosines in [−1, 1].

        Returns
        -------
        torch.Tensor
            κ'(ρ), float64, the shape of ``rho``.

        Raises
        ------
        ValueError
            If ``rho`` is not cosines, or κ' is beyond float64 (naming the fields).
        """
        rho = _as_rho(rho)
        name = self.activation if isinstance(self.activation, str) else None
        if name in ("relu", "leaky_relu"):
            a = 0.0 if name == "relu" else LEAKY_RELU_SLOPE
            base = (1 + a * a) * self._angle(rho, complement=True) / (2 * math.pi)
            if a:
                base = base + a * self._angle(rho) / math.pi
        elif name == "linear":
            base = torch.ones_like(rho)
        elif name == "erf":  # (1 + 2v)² − 4c² = (1 + 2g²(1 − ρ)/d) (1 + 2g²(1 + ρ)/d + 4σ_U²)
            g2 = self._g2
            near = torch.sqrt(1 + 2 * g2 * (1 - rho) / self.d)
            far = torch.hypot(torch.sqrt(1 + 2 * g2 * (1 + rho) / self.d), torch.as_tensor(2 * self.sigma_U, dtype=_F64))
            base = (4 / math.pi) / (near * far)
        elif MEHLER_VARIANCE < self.variance <= MEHLER_MAX_VARIANCE:
            base = self._mehler_expectation(self._hermite_phi_prime, rho)
        else:
            base = self._gauss_expectation(self._phi_prime, rho)
        return self._finite(self.scale * self.scale * base * self._g2 / self.d, "kappa_prime")

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

    Attributes
    ----------
    kappa, kappa_prime : float
        κ(1) and κ'(1).
    lambda_1 : float
        The pair's Lyapunov exponent λ₁ (noise only).
    lambda_bar : float
        The first-moment rate λ̄ (noise only).
    lambda_bar_prime : float
        λ̄', the energy rate of Theorem 1.4 at β.
    lambda_1_total, lambda_bar_total : float
        λ₁ − γ and λ̄ − 2γ.
    beta, gamma : float
        The energy's β and the attention's γ these were computed for.
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
        """The fields as a dict.

        Returns
        -------
        dict of str to float
            Field name → value (JSON-able).
        """
        return asdict(self)


@validated
def lyapunov_exponent(kappa: FiniteFloat, kappa_prime: FiniteFloat, d: Annotated[int, Int(2)]) -> float:
    r"""The Lyapunov exponent of a near-synchronised pair under the noise alone (SPEC §5),

    $$
    \lambda_1 = \frac{d-3}{2}\,\kappa'(1) - \frac{d-1}{2}\,\kappa(1) .
    $$

    Parameters
    ----------
    kappa : float
        κ(1), the noise's variance per coordinate and unit time (finite).
    kappa_prime : float
        κ'(1), the kernel's slope at 1 (finite).
    d : int
        Token dimension, >= 2.

    Returns
    -------
    float
        λ₁ (< 0: synchronisation by noise).

    Raises
    ------
    ValueError
        If λ₁ does not fit in float64.

    Examples
    --------
    >>> from stochformer.model.kernel import lyapunov_exponent
    >>> lyapunov_exponent(kappa=1.0, kappa_prime=0.5, d=4)
    -1.25
    """
    return _fits("lyapunov_exponent", 0.5 * (d - 3) * kappa_prime - 0.5 * (d - 1) * kappa)


@validated
def first_moment_rate(kappa: FiniteFloat, kappa_prime: FiniteFloat, d: Annotated[int, Int(2)]) -> float:
    r"""The first-moment rate of the pair's distance (SPEC §5),

    $$
    \bar\lambda = (d-1)\,\kappa'(1) - (d-3)\,\kappa(1) .
    $$

    Parameters
    ----------
    kappa : float
        κ(1), the noise's variance per coordinate and unit time (finite).
    kappa_prime : float
        κ'(1), the kernel's slope at 1 (finite).
    d : int
        Token dimension, >= 2.

    Returns
    -------
    float
        λ̄, also the mean-square growth rate g(2) of a tangent vector.

    Raises
    ------
    ValueError
        If λ̄ does not fit in float64.

    Examples
    --------
    >>> from stochformer.model.kernel import first_moment_rate
    >>> first_moment_rate(kappa=1.0, kappa_prime=0.5, d=4)
    0.5
    """
    return _fits("first_moment_rate", (d - 1) * kappa_prime - (d - 3) * kappa)


@validated
def lyapunov_spectrum(kappa: FiniteFloat, kappa_prime: FiniteFloat, d: Annotated[int, Int(2)]) -> list[float]:
    """The d − 1 Lyapunov exponents of one token's tangent flow under the noise alone (SPEC §8,
    derived in docs/spectrum.md), in decreasing order when κ'(1) > 0:

        λ_i = ((d − 1 − 2i)/2) κ'(1) − ((d − 1)/2) κ(1),   i = 1, …, d − 1.

    Equally spaced by κ'(1); λ_1 is [`lyapunov_exponent`][stochformer.model.kernel.lyapunov_exponent]; the sum rule
    Σ λ_i = −(d−1) κ'(1)/2 − (d−1)² κ(1)/2 is the rate of log-volume of a (d−1)-frame.

    Parameters
    ----------
    kappa : float
        κ(1), the noise's variance per coordinate and unit time (finite).
    kappa_prime : float
        κ'(1), the kernel's slope at 1 (finite).
    d : int
        Token dimension, >= 2.

    Returns
    -------
    list of float
        λ_1, …, λ_{d−1}.

    Examples
    --------
    >>> from stochformer.model.kernel import lyapunov_spectrum
    >>> lyapunov_spectrum(kappa=1.0, kappa_prime=0.5, d=4)
    [-1.25, -1.75, -2.25]
    """
    half = 0.5 * (d - 1)
    return [_fits("lyapunov_spectrum", 0.5 * (d - 1 - 2 * i) * kappa_prime - half * kappa) for i in range(1, d)]


def fastest_rate(kappa: float, kappa_prime: float, d: int) -> float:
    """The fastest rate of one token's tangent law (SPEC §8): max(|λ_1|, |λ_{d−1}|, κ(1) + κ'(1)),
    the extreme exponents of [`lyapunov_spectrum`][stochformer.model.kernel.lyapunov_spectrum] and the
    variance rate of log|v_t|, without listing the d − 1 exponents. A step Δt is small for the law
    where Δt times this is small.

    Parameters
    ----------
    kappa, kappa_prime : float
        κ(1), κ'(1).
    d : int
        Token dimension, >= 2.

    Returns
    -------
    float
        The rate per unit time (inf past float64).

    Examples
    --------
    >>> from stochformer.model.kernel import fastest_rate
    >>> fastest_rate(kappa=1.0, kappa_prime=0.5, d=4)                 # |λ_3| = 2.25
    2.25
    """
    half = 0.5 * (d - 1)
    return max(abs((half - 1) * kappa_prime - half * kappa), abs(half * (kappa_prime + kappa)), abs(kappa + kappa_prime))


@validated
def moment_exponent(p: FiniteFloat, kappa: FiniteFloat, kappa_prime: FiniteFloat, d: Annotated[int, Int(2)]) -> float:
    r"""g(p) = p λ₁ + p² (κ(1) + κ'(1))/2: E|v_t|^p = |v_0|^p e^{g(p) t} for a tangent vector v of one
    token (SPEC §8: log|v_t| is a Brownian motion with drift λ₁ and variance rate κ + κ'). g(2) is
    [`first_moment_rate`][stochformer.model.kernel.first_moment_rate] λ̄, the mean-square growth rate of the input–output Jacobian.

    $$
    g(p) = p\,\lambda_1 + \frac{p^2}{2}\,(\kappa(1) + \kappa'(1)) .
    $$

    Parameters
    ----------
    p : float
        The moment's order (finite).
    kappa : float
        κ(1), the noise's variance per coordinate and unit time (finite).
    kappa_prime : float
        κ'(1), the kernel's slope at 1 (finite).
    d : int
        Token dimension, >= 2.

    Returns
    -------
    float
        g(p).
    """
    return _fits("moment_exponent", p * lyapunov_exponent(kappa, kappa_prime, d) + 0.5 * p * p * (kappa + kappa_prime))


@validated
def stability_index(kappa: FiniteFloat, kappa_prime: FiniteFloat, d: Annotated[int, Int(2)]) -> float:
    """p* = −2λ₁/(κ(1) + κ'(1)), the root p ≠ 0 of g(p) ([`moment_exponent`][stochformer.model.kernel.moment_exponent]): for λ₁ < 0 the
    moments E|v_t|^p decay for 0 < p < p* and grow for p > p* (SPEC §8). NaN without noise
    (κ + κ' = 0: g ≡ 0).

    Parameters
    ----------
    kappa : float
        κ(1), the noise's variance per coordinate and unit time (finite).
    kappa_prime : float
        κ'(1), the kernel's slope at 1 (finite).
    d : int
        Token dimension, >= 2.

    Returns
    -------
    float
        p*, or NaN without noise.
    """
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
    r"""The function of Theorem 1.4 whose infimum gives the energy rate (SPEC §5):

    $$
    F(u) = \frac{\beta\, e^{\beta u}\,(G_0(u) + \beta\, G_1(u))}{e^\beta - e^{\beta u}}, \quad
    G_0 = \kappa(u)(d - 2 + u^2) - \kappa(1)(d-1)u, \quad G_1 = (1 - u^2)(\kappa(1) - u\,\kappa(u)).
    $$

    Parameters
    ----------
    kernel : NoiseKernel
        The noise kernel.
    u : float, sequence or torch.Tensor
        Cosines in [−1, 1) (F has a pole at 1).
    beta : float
        The energy's inverse temperature β, in (0, 700].

    Returns
    -------
    torch.Tensor
        F(u), float64, the shape of ``u``.
    """
    u = _as_rho(u)
    if not bool((u < 1).all()):
        raise ValueError("u: must be cosines in [-1, 1) (F has a pole at u = 1)")
    return _theorem14_F(kernel, u, beta)


def _theorem14_F(kernel: NoiseKernel, u: torch.Tensor, beta: float) -> torch.Tensor:
    d, k1, ku = kernel.d, kernel.kappa1, kernel.kappa(u)
    g0 = ku * (d - 2 + u**2) - k1 * (d - 1) * u
    g1 = (1 - u**2) * (k1 - u * ku)
    # e^β − e^{βu} = −e^β expm1(β(u−1)), accurate as u → 1; dividing through by e^β:
    x = beta * (u - 1)
    ratio = torch.where(x < 0, -torch.expm1(x) / beta, 1 - u)  # (e^β − e^{βu}) / (β e^β); x = 0 only by underflow
    return torch.exp(x) * (g0 + beta * g1) / ratio


@validated
def lambda_bar_prime(kernel: NoiseKernel, beta: EnergyBeta, grid: Annotated[int, Int(3, 10**7)] = 4001) -> float:
    r"""The energy rate of Theorem 1.4, $\bar\lambda' = -\inf_{u\in[-1,1)} F(u)$
    ([`theorem14_F`][stochformer.model.kernel.theorem14_F]), on a grid refined towards u = 1, with
    the limit $F(1^-) = -\bar\lambda$.

    Parameters
    ----------
    kernel : NoiseKernel
        The noise kernel.
    beta : float
        The energy's inverse temperature β, in (0, 700].
    grid : int, optional
        Uniform points on [−1, 1] (besides 200 geometric ones towards 1), 3..10⁷.

    Returns
    -------
    float
        λ̄' (an upper bound on the growth rate of E E_β(μ_t)).
    """
    s = torch.linspace(0.0, 1.0, grid, dtype=_F64)[:-1]
    u = torch.cat([-1 + 2 * s, 1 - torch.logspace(-1, -7, 200, dtype=_F64)])
    f_min = float(_theorem14_F(kernel, u, beta).min())
    lam_bar = first_moment_rate(kernel.kappa1, kernel.kappa1_prime, kernel.d)
    return -min(f_min, -lam_bar)


@validated
def rates(kernel: NoiseKernel, beta: EnergyBeta = 1.0, gamma: FiniteFloat = 0.0) -> Rates:
    r"""The rates of SPEC §5 for one kernel: κ(1), κ'(1), λ₁, λ̄, λ̄' and the attention-shifted rates.

    $$
    \lambda_1 = \frac{d-3}{2}\,\kappa'(1) - \frac{d-1}{2}\,\kappa(1), \qquad
    \bar\lambda = (d-1)\,\kappa'(1) - (d-3)\,\kappa(1),
    $$

    $\bar\lambda' = -\inf_{u\in[-1,1)} F(u)$ the energy rate of Theorem 1.4 at inverse temperature β, and,
    for attention $Q^\top K = \beta I$, $V = \gamma I$, $\lambda_1 - \gamma$ and $\bar\lambda - 2\gamma$.

    Parameters
    ----------
    kernel : NoiseKernel
        The noise kernel ([`NoiseKernel`][stochformer.model.kernel.NoiseKernel]).
    beta : float, optional
        The energy's inverse temperature β, in (0, 700].
    gamma : float, optional
        The attention's γ (finite), for the ``*_total`` rates.

    Returns
    -------
    Rates
        ``kappa``, ``kappa_prime``, ``lambda_1``, ``lambda_bar``, ``lambda_bar_prime``,
        ``lambda_1_total``, ``lambda_bar_total``, ``beta``, ``gamma``
        ([`Rates`][stochformer.model.kernel.Rates]).

    Raises
    ------
    ValueError
        An argument out of range, or a rate beyond float64, naming the argument.

    Examples
    --------
    >>> from stochformer import NoiseKernel, rates
    >>> r = rates(NoiseKernel("linear", d=4))
    >>> r.lambda_1, r.lambda_bar
    (-0.25, 0.5)
    """
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


#: the largest gain [`critical_gain`][stochformer.model.kernel.critical_gain] searches by default: g ∈ (0, G_MAX]
G_MAX = 100.0
#: the points of the geometric grid on [g_max·GAIN_GRID_LOW, g_max] on which λ₁'s sign is read
GAIN_GRID = 241
GAIN_GRID_LOW = 1e-4


@validated
def gain_exponent(kernel: NoiseKernel, g: NonNegativeFloat) -> float:
    """λ₁(g) = ((d−3)/2) κ'(1) − ((d−1)/2) κ(1) of ``kernel`` with its gain replaced by g (SPEC §8:
    the inner weights U of variance g², so Var V = g²/d + σ_U² and κ'(1) = (s² g²/d) E[φ'(V)²]),
    from [`NoiseKernel.moments_at_one`][stochformer.model.kernel.NoiseKernel.moments_at_one] (accurate at any g, also without a closed form).

    Parameters
    ----------
    kernel : NoiseKernel
        φ, d, σ_U, σ_W and the scale s (its own gain is replaced).
    g : float
        The gain, >= 0.

    Returns
    -------
    float
        λ₁ at gain g.
    """
    k = replace(kernel, gain=g)
    return lyapunov_exponent(*k.moments_at_one, k.d)


@validated
def critical_gain(
    kernel: NoiseKernel,
    g_max: Annotated[float, Real(0.0, low_open=True)] = G_MAX,
    grid: Annotated[int, Int(3, 10**6)] = GAIN_GRID,
    xtol: Annotated[float, Real(0.0, low_open=True)] = 1e-12,
) -> float | None:
    """The critical gain g_c: the smallest g in (0, g_max] at which λ₁(g) ([`gain_exponent`][stochformer.model.kernel.gain_exponent])
    changes sign, or None where it keeps one sign there (SPEC §8, the order-to-chaos transition).

    ``kernel`` gives φ, d, σ_U, σ_W and s (its own gain is ignored). λ₁'s sign is read on a
    geometric grid of ``grid`` points g_j from g_max·1e-4 to g_max; the first pair of neighbours
    with opposite signs brackets the root, refined by `scipy.optimize.brentq` to ``xtol``
    (a λ₁ that is exactly 0, as without noise, is no sign). Two sign changes closer than the
    grid's ratio 10^{4/(grid−1)} would be missed.

    Known cases (docs/theory.md, "The gain"): λ₁ < 0 at every g for d ≤ 3, for linear φ
    (λ₁ = −s²(g²/d + (d−1)(σ_U² + σ_W²)/2)) and for ReLU (κ'(1) = s² g²/(2d) ≤ κ(1)): None; for an
    odd φ without biases and d ≥ 4, λ₁ ≈ −s² g²/d < 0 at small g and λ₁ > 0 at large g, one root.

    Parameters
    ----------
    kernel : NoiseKernel
        φ, d, σ_U, σ_W and the scale s.
    g_max : float, optional
        The largest gain searched, > 0.
    grid : int, optional
        Points of the geometric grid, 3..10⁶.
    xtol : float, optional
        The root's absolute tolerance, > 0.

    Returns
    -------
    float or None
        g_c, or None where λ₁ keeps one sign on (0, g_max].

    Examples
    --------
    >>> from stochformer.model.kernel import NoiseKernel, critical_gain
    >>> round(critical_gain(NoiseKernel("erf", 4)), 4)
    8.0069
    """
    import scipy.optimize

    prev_g, prev = 0.0, 0.0  # the last grid point where λ₁ ≠ 0, and λ₁ there
    for g in np.geomspace(g_max * GAIN_GRID_LOW, g_max, grid):
        g = float(g)
        lam = gain_exponent(kernel, g)
        if lam != 0.0 and prev != 0.0 and (lam > 0) != (prev > 0):
            return float(scipy.optimize.brentq(lambda x: gain_exponent(kernel, x), prev_g, g, xtol=xtol,
                                               rtol=4 * np.finfo(float).eps))
        if lam != 0.0:
            prev_g, prev = g, lam
    return None


@dataclass(frozen=True)
class GainPhase:
    """λ₁ on a grid of gains g and bias scales σ_U ([`gain_phase`][stochformer.model.kernel.gain_phase]).

    ``gains`` (n_g,), ``sigmas`` (n_σ,), ``lambda_1`` (n_σ, n_g) with row j at σ_U = sigmas[j];
    ``g_c`` (n_σ,): [`critical_gain`][stochformer.model.kernel.critical_gain] at each σ_U (NaN where None), the zero contour of
    ``lambda_1``; ``kernel``: φ, d, σ_W and s (its gain and σ_U replaced on the grid).

    Attributes
    ----------
    kernel : NoiseKernel
        The kernel the grid varies.
    gains : numpy.ndarray, shape (n_g,)
        The gains g.
    sigmas : numpy.ndarray, shape (n_σ,)
        The bias scales σ_U.
    lambda_1 : numpy.ndarray, shape (n_σ, n_g)
        λ₁ at (σ_U, g).
    g_c : numpy.ndarray, shape (n_σ,)
        The critical gain at each σ_U (NaN where none).
    """

    kernel: NoiseKernel
    gains: np.ndarray
    sigmas: np.ndarray
    lambda_1: np.ndarray
    g_c: np.ndarray


@validated
def gain_phase(kernel: NoiseKernel, gains, sigmas, g_max: Annotated[float, Real(0.0, low_open=True)] = G_MAX) -> GainPhase:
    """The phase diagram of the order-to-chaos transition over (g, σ_U) from the formula λ₁ =
    ((d−3)/2) κ'(1) − ((d−1)/2) κ(1) (SPEC §8): λ₁ at every grid point and g_c(σ_U) (λ₁ > 0: no
    synchronisation by noise).

    Parameters
    ----------
    kernel : NoiseKernel
        φ, d, σ_W and s (gain and σ_U are replaced on the grid).
    gains : sequence of float
        Gains g, finite, >= 0 (1-D).
    sigmas : sequence of float
        Bias scales σ_U, finite, >= 0 (1-D).
    g_max : float, optional
        The largest gain searched for g_c, > 0.

    Returns
    -------
    GainPhase
        λ₁ on the grid and g_c(σ_U).
    """
    g = np.asarray(gains, dtype=float).reshape(-1)
    s = np.asarray(sigmas, dtype=float).reshape(-1)
    for name, arr in (("gains", g), ("sigmas", s)):
        if arr.size == 0 or not bool(np.all(np.isfinite(arr) & (arr >= 0))):
            raise ValueError(f"{name}: must be a non-empty sequence of finite numbers >= 0")
    lam = np.array([[gain_exponent(replace(kernel, sigma_U=float(sj)), float(gi)) for gi in g] for sj in s])
    gc = [critical_gain(replace(kernel, sigma_U=float(sj)), g_max) for sj in s]
    return GainPhase(kernel, g, s, lam, np.array([math.nan if x is None else x for x in gc]))
