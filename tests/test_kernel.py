"""The noise kernel κ and the synchronisation rates (SPEC §2, §5).

Closed forms are checked three ways: against the package's own Gauss–Hermite path (a callable
version of the same activation), against an independent scipy integration of the defining Gaussian
integral, and against a finite difference of κ (for κ'). The rates are checked against the
closed forms of Proposition 1.5 and the limit F(1⁻) = −λ̄ of Theorem 1.4. Exactly: κ and κ′
against their closed forms at small and large bias, the rates' arguments and overflow, λ̄′ on its
grid, and activations by name or callable.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import integrate, special

from stochformer.model.activations import ACTIVATIONS, LEAKY_RELU_SLOPE
from stochformer.cli import main
from stochformer.model.kernel import NoiseKernel, first_moment_rate, lambda_bar_prime, lyapunov_exponent, rates, theorem14_F
from stochformer.model.activations import activation_name, get_activation

from conftest import TOL, close

CLOSED_FORMS = ["relu", "leaky_relu", "linear", "erf"]
PARAMS = [(3, 0.0, 0.0), (5, 0.5, 0.3), (64, 0.1, 0.1)]  # (d, σ_U, σ_W)
RHO = torch.linspace(-1.0, 1.0, 41, dtype=torch.float64)

# numpy versions of φ and φ', written independently of the package (for scipy integration)
_SIG = lambda x: 1.0 / (1.0 + np.exp(-x))  # noqa: E731
_NORM_CDF = lambda x: 0.5 * (1.0 + special.erf(x / math.sqrt(2.0)))  # noqa: E731
_NORM_PDF = lambda x: np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)  # noqa: E731
PHI_NP = {
    "relu": lambda x: np.maximum(x, 0.0),
    "leaky_relu": lambda x: np.where(x > 0, x, LEAKY_RELU_SLOPE * x),
    "linear": lambda x: x,
    "erf": special.erf,
    "tanh": np.tanh,
    "sigmoid": _SIG,
    "silu": lambda x: x * _SIG(x),
    "gelu": lambda x: x * _NORM_CDF(x),
    "sin": np.sin,
}
DPHI_NP = {
    "relu": lambda x: (x > 0).astype(float) if isinstance(x, np.ndarray) else float(x > 0),
    "leaky_relu": lambda x: 1.0 if x > 0 else LEAKY_RELU_SLOPE,
    "linear": lambda x: 1.0,
    "erf": lambda x: 2.0 / math.sqrt(math.pi) * math.exp(-x * x),
    "tanh": lambda x: 1.0 - math.tanh(x) ** 2,
    "sigmoid": lambda x: _SIG(x) * (1.0 - _SIG(x)),
    "silu": lambda x: _SIG(x) * (1.0 + x * (1.0 - _SIG(x))),
    "gelu": lambda x: _NORM_CDF(x) + x * _NORM_PDF(x),
    "sin": math.cos,
}
Z_MAX = 12.0  # N(0,1) mass beyond 12 is ~1e-33


def scipy_pair_expectation(f, rho: float, d: int, sigma_U: float) -> float:
    """E[f(V₁) f(V₂)], Var = 1/d + σ_U², Cov = ρ/d + σ_U², by nested adaptive quadrature with the
    kink line of V₂ = 0 given to the inner integral (independent of the package's code)."""
    v = 1.0 / d + sigma_U**2
    r = min(1.0, (rho / d + sigma_U**2) / v)
    s, sv = math.sqrt(max(0.0, 1.0 - r * r)), math.sqrt(v)

    def inner(z1: float) -> float:
        if s < 1e-12:
            return float(f(sv * r * z1))
        kink = -r * z1 / s
        pts = [kink] if abs(kink) < Z_MAX else None
        val, _ = integrate.quad(lambda z2: f(sv * (r * z1 + s * z2)) * _NORM_PDF(z2), -Z_MAX, Z_MAX,
                                points=pts, epsabs=1e-13, epsrel=1e-11, limit=200)
        return val

    val, _ = integrate.quad(lambda z1: f(sv * z1) * inner(z1) * _NORM_PDF(z1), -Z_MAX, Z_MAX,
                            points=[0.0], epsabs=1e-12, epsrel=1e-10, limit=200)
    return val


def scipy_square_expectation(f, d: int, sigma_U: float) -> float:
    """E[f(V)²], V ~ N(0, 1/d + σ_U²), by 1-D adaptive quadrature."""
    sv = math.sqrt(1.0 / d + sigma_U**2)
    val, _ = integrate.quad(lambda z: f(sv * z) ** 2 * _NORM_PDF(z), -Z_MAX, Z_MAX, points=[0.0],
                            epsabs=1e-13, epsrel=1e-11, limit=200)
    return val


# --- κ and κ' -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CLOSED_FORMS)
@pytest.mark.parametrize("d,sigma_U,sigma_W", PARAMS)
def test_closed_form_matches_gauss_hermite(name, d, sigma_U, sigma_W):
    """The closed form and the quadrature path (a callable version of φ) agree on a grid of ρ.

    relu/leaky_relu have a kink: 2-D Gauss–Hermite on a kink converges only like O(n⁻¹) for κ and,
    φ' having a jump, like O(n^{-1/2}) for κ' (measured at n = 128: κ error ≈ 2e-3 κ(1), κ' error
    ≈ 3.5e-2 κ'(1)). The tolerances below are about twice those; for the smooth linear and erf the
    quadrature is exact to rounding. We also require the error to shrink at those rates from n = 32
    to n = 128 (convergence to the closed form, not to something nearby)."""
    phi = ACTIVATIONS[name]
    closed = NoiseKernel(name, d, sigma_U, sigma_W)
    errs = {}
    for n in (32, 128) if name in ("relu", "leaky_relu") else (64,):
        quad = NoiseKernel(lambda x: phi(x), d, sigma_U, sigma_W, quad_points=n)
        errs[n] = (  # max errors relative to κ(1) and κ'(1)
            float((closed.kappa(RHO) - quad.kappa(RHO)).abs().max()) / closed.kappa1,
            float((closed.kappa_prime(RHO) - quad.kappa_prime(RHO)).abs().max()) / closed.kappa1_prime,
        )
    if name in ("relu", "leaky_relu"):
        assert errs[128][0] < 4e-3 and errs[128][1] < 8e-2
        # 4× the nodes: κ error ÷ ~4, κ' error ÷ ~2
        assert errs[128][0] < 0.35 * errs[32][0] and errs[128][1] < 0.65 * errs[32][1]
    else:
        assert errs[64][0] < 1e-12 and errs[64][1] < 1e-12


@pytest.mark.parametrize("name", CLOSED_FORMS)
@pytest.mark.parametrize("d,sigma_U,sigma_W", PARAMS[:2])
def test_closed_form_matches_scipy_integral(name, d, sigma_U, sigma_W):
    """κ(ρ) = E[φ(V₁)φ(V₂)] + σ_W² against an independent adaptive integration (to ~1e-9)."""
    k = NoiseKernel(name, d, sigma_U, sigma_W)
    for rho in (-1.0, -0.6, 0.0, 0.3, 0.9, 1.0):
        ref = scipy_pair_expectation(PHI_NP[name], rho, d, sigma_U) + sigma_W**2
        assert float(k.kappa(rho)) == pytest.approx(ref, rel=1e-7, abs=1e-9)


@pytest.mark.parametrize("name", CLOSED_FORMS + ["tanh", "silu"])
def test_kappa_prime_is_derivative_of_kappa(name):
    """κ' = dκ/dρ: κ' (closed form, or quadrature of φ'φ' by autograd for tanh/silu) against a
    central difference of κ (interior ρ)."""
    k = NoiseKernel(name, 4, 0.3, 0.2)
    rho = torch.linspace(-0.95, 0.95, 39, dtype=torch.float64)
    h = 1e-5
    fd = (k.kappa(rho + h) - k.kappa(rho - h)) / (2 * h)
    # error of the central difference: O(h² κ''') + rounding O(1e-16/h) ~ 1e-10
    torch.testing.assert_close(k.kappa_prime(rho), fd, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
@pytest.mark.parametrize("d,sigma_U,sigma_W", [(3, 0.0, 0.0), (5, 0.5, 0.3)])
def test_kappa_at_one_and_price_formula(name, d, sigma_U, sigma_W):
    """κ(1) = E[φ(V)²] + σ_W² and κ'(1) = (1/d) E[φ'(V)²] (Price), V ~ N(0, 1/d + σ_U²), for every
    named activation (closed forms and the Gauss–Hermite + autograd path), against scipy."""
    k = NoiseKernel(name, d, sigma_U, sigma_W)
    k1 = scipy_square_expectation(PHI_NP[name], d, sigma_U) + sigma_W**2
    kp1 = scipy_square_expectation(DPHI_NP[name], d, sigma_U) / d
    # at ρ = 1 the 2-D rule collapses to 1-D Gauss–Hermite (64 nodes), accurate for smooth φ
    assert k.kappa1 == pytest.approx(k1, rel=1e-8)
    assert k.kappa1_prime == pytest.approx(kp1, rel=1e-8)


def test_noise_scale_multiplies_kernel_by_s_squared():
    a, b = NoiseKernel("tanh", 4, 0.2, 0.1), NoiseKernel("tanh", 4, 0.2, 0.1, scale=1.7)
    torch.testing.assert_close(b.kappa(RHO), 1.7**2 * a.kappa(RHO), rtol=1e-13, atol=0)
    torch.testing.assert_close(b.kappa_prime(RHO), 1.7**2 * a.kappa_prime(RHO), rtol=1e-13, atol=0)


# --- rates (SPEC §5) ------------------------------------------------------------------------------


@pytest.mark.parametrize("d", [2, 3, 5, 64, 128])
@pytest.mark.parametrize("sigma_U,sigma_W", [(0.0, 0.0), (0.1, 0.1), (0.5, 0.2)])
def test_relu_rates_proposition_1_5(d, sigma_U, sigma_W):
    """Proposition 1.5: κ = (1/d + σ_U²)/2 + σ_W², κ' = 1/(2d),
    λ₁ = −1/(2d) − (σ_U² + 2σ_W²)(d−1)/4 and λ̄ = 1/d − (σ_U² + 2σ_W²)(d−3)/2."""
    r = rates(NoiseKernel("relu", d, sigma_U, sigma_W))
    s2 = sigma_U**2 + 2 * sigma_W**2
    assert r.kappa == pytest.approx((1 / d + sigma_U**2) / 2 + sigma_W**2, rel=1e-13)
    assert r.kappa_prime == pytest.approx(1 / (2 * d), rel=1e-13)
    assert r.lambda_1 == pytest.approx(-1 / (2 * d) - s2 * (d - 1) / 4, rel=1e-12, abs=1e-15)
    assert r.lambda_bar == pytest.approx(1 / d - s2 * (d - 3) / 2, rel=1e-12, abs=1e-15)
    assert r.lambda_1 < 0


def test_rates_general_formulas_and_attention_shift():
    """λ₁ = ((d−3)/2)κ' − ((d−1)/2)κ and λ̄ = (d−1)κ' − (d−3)κ for a non-ReLU kernel, and the
    attention shifts λ₁ − γ, λ̄ − 2γ."""
    k = NoiseKernel("erf", 7, 0.1, 0.1)
    r = rates(k, beta=2.0, gamma=-0.5)
    kap, kp = r.kappa, r.kappa_prime
    assert r.lambda_1 == pytest.approx(2 * kp - 3 * kap, rel=1e-13)
    assert r.lambda_bar == pytest.approx(6 * kp - 4 * kap, rel=1e-13)
    assert r.lambda_1_total == pytest.approx(r.lambda_1 + 0.5, rel=1e-13)
    assert r.lambda_bar_total == pytest.approx(r.lambda_bar + 1.0, rel=1e-13)
    assert lyapunov_exponent(kap, kp, 7) == r.lambda_1 and first_moment_rate(kap, kp, 7) == r.lambda_bar


def _F_direct(k: NoiseKernel, u: np.ndarray, beta: float) -> np.ndarray:
    """Theorem 1.4's F(u) = β e^{βu} G(u) / (e^β − e^{βu}) written literally (no expm1)."""
    d, k1 = k.d, k.kappa1
    ku = k.kappa(torch.as_tensor(u)).numpy()
    G = ku * (d - 2 + u**2) - k1 * (d - 1) * u + beta * (1 - u**2) * (k1 - u * ku)
    return beta * np.exp(beta * u) * G / (np.exp(beta) - np.exp(beta * u))


@pytest.mark.parametrize("name,d,sigma,beta", [("relu", 5, 0.1, 1.0), ("tanh", 8, 0.3, 2.0), ("erf", 64, 0.1, 1.0)])
def test_theorem_1_4_F_and_its_limit(name, d, sigma, beta):
    """F matches the literal formula away from u = 1, F(1⁻) = −λ̄, and λ̄' = −inf F (with the limit)
    agrees with an independent dense grid."""
    k = NoiseKernel(name, d, sigma, sigma)
    lam_bar = first_moment_rate(k.kappa1, k.kappa1_prime, d)
    u = np.linspace(-1.0, 0.9, 200)
    np.testing.assert_allclose(theorem14_F(k, u, beta).numpy(), _F_direct(k, u, beta), rtol=1e-10, atol=1e-13)
    # F(1 − h) + λ̄ → 0: O(√h) for relu (κ'' blows up like (1−u)^{-1/2}), O(h) for smooth φ
    gaps = [abs(float(theorem14_F(k, 1.0 - h, beta)) + lam_bar) for h in (1e-4, 1e-6, 1e-8)]
    assert gaps[2] < gaps[0] and gaps[2] < 1e-3 * max(1.0, abs(lam_bar))
    # λ̄' = −min(inf F, F(1⁻)) on an independent fine grid (F is smooth on [−1, 1))
    grid = np.concatenate([np.linspace(-1.0, 0.999, 2001), 1.0 - np.logspace(-3, -7, 50)])
    ref = -min(_F_direct(k, grid, beta).min(), -lam_bar)
    lbp = lambda_bar_prime(k, beta, grid=801)
    assert lbp >= lam_bar - 1e-12
    assert lbp == pytest.approx(ref, abs=1e-6 * max(1.0, abs(ref)))


def test_lambda_bar_prime_relu():
    """ReLU, σ = 0.1: at d = 5 the infimum of F is its limit −λ̄ at u → 1 (λ̄' = λ̄); at d = 64 it
    is attained inside (−1, 1) and the bound λ̄' is strictly weaker than λ̄ (still negative)."""
    r5, r64 = (rates(NoiseKernel("relu", d, 0.1, 0.1), beta=1.0) for d in (5, 64))
    assert r5.lambda_bar_prime == pytest.approx(r5.lambda_bar, rel=1e-9)
    assert r64.lambda_bar < r64.lambda_bar_prime < 0


# --- the rates CLI --------------------------------------------------------------------------------


def test_rates_cli_json_keys_and_values():
    res = CliRunner().invoke(main, ["rates", "--set", "activation=relu", "--set", "d=5", "--set", "sigma_U=0.1",
                                    "--set", "sigma_W=0.1", "--set", "energy_beta=1", "--set", "gamma=0", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    for key in ("kappa", "kappa_prime", "lambda_1", "lambda_bar", "lambda_bar_prime"):
        assert key in out and isinstance(out[key], float)
    assert out["kappa"] == pytest.approx(0.115, rel=1e-12)  # (1/5 + 0.01)/2 + 0.01
    assert out["kappa_prime"] == pytest.approx(0.1, rel=1e-12)
    assert out["lambda_1"] == pytest.approx(-0.13, rel=1e-12)
    assert out["lambda_bar"] == pytest.approx(0.17, rel=1e-12)


def test_rates_cli_text():
    res = CliRunner().invoke(main, ["rates", "--set", "activation=erf", "--set", "d=8", "--set", "sigma_U=0.2",
                                    "--set", "sigma_W=0.1"])
    assert res.exit_code == 0, res.output
    r = rates(NoiseKernel("erf", 8, 0.2, 0.1))
    for label, value in (("kappa(1)", r.kappa), ("kappa'(1)", r.kappa_prime), ("lambda_1", r.lambda_1),
                         ("lambda_bar ", r.lambda_bar), ("lambda_bar'", r.lambda_bar_prime)):
        line = next(ln for ln in res.output.splitlines() if ln.strip().startswith(label))
        assert float(line.split()[-1]) == pytest.approx(value, rel=1e-7)


@pytest.mark.parametrize("field,value", [("d", "1"), ("activation", "nope"), ("sigma_U", "-1"), ("energy_beta", "0"),
                                         ("gamma", "nan"), ("sigma_W", "inf")])
def test_rates_cli_rejects_bad_input(field, value):
    """The same fields and the same one-line error as every command (``--set FIELD=VALUE``)."""
    res = CliRunner().invoke(main, ["rates", "--set", f"{field}={value}"])
    assert res.exit_code == 2 and f"invalid configuration: {field}:" in res.output, res.output


def test_quadrature_route_is_accurate_at_large_variance():
    """Above MEHLER_VARIANCE the kernel of an activation without a closed form is Mehler's series
    Σ a_n² r^n (model.kernel): where 2-D Gauss–Hermite is converged (v < 1, 150 nodes per axis)
    the two agree to 1e-12; at v = 25 (tanh, d = 4, gain 10) it matches an adaptive 2-D quadrature
    (scipy's dblquad, tolerance 1e-11) to 1e-7, where the old 64-node Gauss–Hermite rule is off by
    more than 1e-3; and κ(1), κ'(1) equal the 1-D moments of ``moments_at_one`` to 1e-12."""
    import scipy.integrate

    import stochformer.model.kernel as kernel_module

    rho = torch.linspace(-1, 1, 9, dtype=torch.float64)
    old = kernel_module.MEHLER_VARIANCE
    try:
        kernel_module.MEHLER_VARIANCE = 0.0  # the series everywhere
        series = NoiseKernel("tanh", 2, 0.6, 0.1)
        mehler = (series.kappa(rho), series.kappa_prime(rho))
        kernel_module.MEHLER_VARIANCE = math.inf  # Gauss–Hermite everywhere
        gh = NoiseKernel("tanh", 2, 0.6, 0.1, quad_points=150)
        for a, b in zip(mehler, (gh.kappa(rho), gh.kappa_prime(rho))):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
        coarse = NoiseKernel("tanh", 4, gain=10.0).kappa(rho)
    finally:
        kernel_module.MEHLER_VARIANCE = old
    k = NoiseKernel("tanh", 4, gain=10.0)
    assert k.variance > kernel_module.MEHLER_VARIANCE
    points = (-0.5, 0.5, 0.99)
    values = k.kappa(torch.tensor(points, dtype=torch.float64))
    v, s = k.variance, math.sqrt(k.variance)
    for r, value in zip(points, values.tolist()):
        c = 100.0 * r / 4
        t = math.sqrt(v - c * c / v)
        ref = scipy.integrate.dblquad(lambda z2, z1: math.tanh(s * z1) * math.tanh(c / s * z1 + t * z2)
                                      * math.exp(-(z1 * z1 + z2 * z2) / 2) / (2 * math.pi),
                                      -10, 10, -10, 10, epsabs=1e-11, epsrel=1e-11)[0]
        assert abs(value - ref) < 1e-7, (r, value, ref)
    assert float((coarse - k.kappa(rho)).abs().max()) > 1e-3
    k1, k1p = k.moments_at_one
    assert abs(k.kappa1 - k1) < 1e-12 and abs(k.kappa1_prime - k1p) < 1e-12


# ----------------------------------------------------------------- rates, lambda_bar_prime, closed forms of the kernel, activations by name


def test_rates_arguments_and_overflow():
    """β in (0, 700], γ finite, d ≥ 2, each refused with a message naming it; γ up to where λ̄ − 2γ
    still fits in float64; rates beyond float64 refused naming the fields to reduce."""
    k = NoiseKernel("relu", 5, 0.1, 0.2)
    assert rates(k, beta=700.0).beta == 700.0
    for beta, valid in ((0.0, "0.0"), (700.5, "700.5"), (math.nan, "nan")):
        with pytest.raises(ValueError, match=rf"^beta: must be a finite number and > 0 and <= 700 \(got {valid}\)$"):
            rates(k, beta=beta)
    with pytest.raises(ValueError, match=r"^gamma: must be a finite number \(got inf\)$"):
        rates(k, gamma=math.inf)
    big = rates(k, gamma=7e307)
    assert big.lambda_bar_total == big.lambda_bar - 1.4e308
    for f in (lyapunov_exponent, first_moment_rate):
        with pytest.raises(ValueError, match=r"^d: must be an integer >= 2 \(got 1\)$"):
            f(1.0, 1.0, 1)
    with pytest.raises(ValueError, match=r"^rates: the rates do not fit in float64 \(kappa\(1\) = 1e\+308, d = 5\); "
                       r"reduce sigma_U, sigma_W, scale, d or gamma$"):
        rates(NoiseKernel("relu", 5, 0.0, 1e154))


def test_lambda_bar_prime_on_its_grid():
    """λ̄' = −min(min F(u), −λ̄) over u = −1 + 2s (s on 4001 points of [0, 1), by default) and
    1 − 10^(−1…−7) (200 points towards 1); β checked by name."""
    k = NoiseKernel("tanh", 6, 0.2, 0.1)
    lam_bar = first_moment_rate(k.kappa1, k.kappa1_prime, 6)
    for grid in (4001, 11):
        s = torch.linspace(0.0, 1.0, grid, dtype=torch.float64)[:-1]
        u = torch.cat([-1 + 2 * s, 1 - torch.logspace(-1, -7, 200, dtype=torch.float64)])
        ref = -min(float(theorem14_F(k, u, 1.5).min()), -lam_bar)
        got = lambda_bar_prime(k, 1.5) if grid == 4001 else lambda_bar_prime(k, 1.5, grid)
        assert abs(got - ref) < TOL
    with pytest.raises(ValueError, match=r"^beta: must be a finite number and > 0 and <= 700 \(got 0\)$"):
        lambda_bar_prime(k, 0)
    lambda_bar_prime(k, 1.0, 3)
    with pytest.raises(ValueError, match=r"^grid: must be an integer >= 3 and <= 10000000 \(got 2\)$"):
        lambda_bar_prime(k, 1.0, 2)
    for f in (rates, lambda_bar_prime):
        with pytest.raises(ValueError, match=r"^kernel: must be a stochformer.NoiseKernel \(got 'relu'\)$"):
            f("relu", 1.0)


def kernel_reference(name: str, rho: float, d: int, sU: float, sW: float, s: float) -> tuple[float, float]:
    """(κ(ρ), κ'(ρ)) from the closed forms of E[φ(V₁)φ(V₂)] and (1/d)E[φ'(V₁)φ'(V₂)], Var Vᵢ = v = 1/d + σ_U²,
    Cov = c = ρ/d + σ_U²: arc-cosine (relu, leaky relu with slope a: φ = relu(x) − a relu(−x)), c
    (linear), (2/π) arcsin(2c/(1 + 2v)) (erf), e^{−v} sinh c and e^{−v} cosh c (sin)."""
    v, c = 1 / d + sU * sU, rho / d + sU * sU
    th = math.acos(max(-1.0, min(1.0, c / v)))
    arc = lambda t: v * (math.sin(t) + (math.pi - t) * math.cos(t)) / (2 * math.pi)  # noqa: E731
    a = 0.01
    base, prime = {
        "relu": (arc(th), (math.pi - th) / (2 * math.pi)),
        "leaky_relu": ((1 + a * a) * arc(th) - 2 * a * arc(math.pi - th), (1 + a * a) * (math.pi - th) / (2 * math.pi) + a * th / math.pi),
        "linear": (c, 1.0),
        "erf": (2 / math.pi * math.asin(2 * c / (1 + 2 * v)), 4 / math.pi / math.sqrt((1 + 2 * v) ** 2 - 4 * c * c)),
        "sin": (math.exp(-v) * math.sinh(c), math.exp(-v) * math.cosh(c)),
    }[name]
    return s * s * (base + sW * sW), s * s * prime / d


@pytest.mark.parametrize("name", ["relu", "leaky_relu", "linear", "erf", "sin"])
def test_kernel_closed_forms_at_small_and_large_bias(name):
    """κ and κ' against their closed forms for σ_U below and above 1 (the two ways of forming c/v),
    ρ from −1 to 1, in one call on a tensor of cosines."""
    rho = [-1.0, -0.3, 0.4, 1.0]
    for d, sU, sW, s in ((3, 0.3, 0.2, 1.3), (4, 3.0, 0.5, 0.7)):
        k = NoiseKernel(name, d, sU, sW, s)
        ref = np.array([kernel_reference(name, r, d, sU, sW, s) for r in rho])
        close(k.kappa(torch.tensor(rho, dtype=torch.float64)), ref[:, 0])
        close(k.kappa_prime(rho), ref[:, 1])
        assert k.kappa1 == float(k.kappa(1.0)) and k.kappa1_prime == float(k.kappa_prime(1.0))


def test_kernel_huge_bias_and_refusals():
    """With σ_U = 1e160 (σ_U² overflows) the erf kernel is 1 + σ_W² at every ρ and κ' is finite;
    arguments and a κ beyond float64 are refused naming the field."""
    k = NoiseKernel("erf", 3, 1e160, 0.5)
    close(k.kappa(torch.tensor([-1.0, 0.0, 1.0])), np.full(3, 1.25))
    assert 0 < float(k.kappa_prime(0.3)) < 1e-150
    cases = {
        "^d: must be an integer >= 2 and <= 9223372036854775807 \\(got 1\\)$": dict(d=1),
        "^sigma_U: must be a finite number and >= 0 \\(got -0.1\\)$": dict(sigma_U=-0.1),
        "^sigma_W: must be a finite number and >= 0 \\(got -0.1\\)$": dict(sigma_W=-0.1),
        "^scale: must be a finite number and >= 0 \\(got -1.0\\)$": dict(scale=-1.0),
        "^quad_points: must be an integer >= 2 and <= 1000 \\(got 1001\\)$": dict(quad_points=1001),
        "^activation: unknown activation 'nope'; valid names are ": dict(activation="nope"),
    }
    for message, kw in cases.items():
        with pytest.raises(ValueError, match=message):
            NoiseKernel(**({"activation": "relu", "d": 3} | kw))
    NoiseKernel("relu", 2, 0.0, 0.0, 0.0, quad_points=2)
    k = NoiseKernel("relu", 3)
    assert float(k.kappa(1 + 1e-7)) == float(k.kappa(1.0))  # rounding of a cosine is allowed
    for bad in (1.01, math.nan, [0.2, -1.5]):
        with pytest.raises(ValueError, match=r"^rho: must be cosines, finite numbers in \[-1, 1\]$"):
            k.kappa(bad)
    with pytest.raises(ValueError, match=r"^rho: must be cosines \(numbers in \[-1, 1\]\), got 'x'$"):
        k.kappa_prime("x")
    with pytest.raises(ValueError, match=r"^NoiseKernel: kappa does not fit in float64 for activation=relu, d=3, "
                       r"sigma_U=1e\+160, sigma_W=0, scale=1; reduce sigma_U, sigma_W or scale \(a config's noise_scale\)$"):
        NoiseKernel("relu", 3, 1e160).kappa(0.5)


def test_get_activation_names_and_callables():
    f = lambda x: x * 2  # noqa: E731
    assert get_activation(f).__wrapped__ is f and get_activation("relu") is torch.relu and activation_name(f) == "<lambda>"
    with pytest.raises(ValueError, match="^activation: unknown activation 'nope'; valid names are erf, gelu, leaky_relu, "
                       r"linear, relu, sigmoid, silu, sin, tanh \(or an import string 'package.module:function', or any callable from the Python API\)$"):
        get_activation("nope")


def test_fixed_points_of_the_closed_forms() -> None:
    """Large biases that stay finite are computed, not refused: κ(1) → E[φ²] + σ_W² for bounded φ."""
    assert NoiseKernel("tanh", 3, 1e300).kappa1 == pytest.approx(1.0, abs=1e-12)
    assert NoiseKernel("erf", 3, 1e155).kappa1 == pytest.approx(1.0, abs=1e-12)
    assert NoiseKernel("erf", 3, 1e155).kappa1_prime == pytest.approx(0.0, abs=1e-12)
    assert NoiseKernel("sigmoid", 3, 1e300, 0.5).kappa1 == pytest.approx(0.5 + 0.25, abs=1e-9)


@pytest.mark.parametrize("name", ["relu", "leaky_relu", "linear", "erf", "tanh"])
@pytest.mark.parametrize("sigma_W, scale", [(0.0, 1.0), (0.3, 1.7)])
def test_kappa_of_cosines_is_kappa_bit_for_bit(name, sigma_W, scale):
    """The unchecked entry point (and ReLU's in-place arc-cosine parts) gives kappa's values exactly."""
    k = NoiseKernel(name, 5, sigma_U=0.4, sigma_W=sigma_W, scale=scale)
    rho = torch.cat([torch.linspace(-1, 1, 101, dtype=torch.float64), torch.tensor([-1.0, 0.0, 1.0], dtype=torch.float64)])
    assert torch.equal(k.kappa_of_cosines(rho), k.kappa(rho))
    r = rho.clone().requires_grad_(True)  # the out-of-place route (a gradient is needed): the same values
    assert torch.equal(k.kappa(r).detach(), k.kappa(rho))


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
@pytest.mark.parametrize("sigma_U", [0.0, 2.0, 200.0])  # Gauss–Hermite (v < 1), Mehler, Gauss–Hermite (v > 10⁴)
def test_kappa_follows_the_device_of_its_cosines(activation, sigma_U):
    """The noise evaluates κ on the run's device: every route of `kappa_of_cosines` (closed forms,
    Mehler, 2-D Gauss–Hermite) computes where ``rho`` lives — on ``meta`` a meta tensor of rho's
    shape, no CPU tensor mixed in — and finite values on the CPU."""
    k = NoiseKernel(activation, d=4, sigma_U=sigma_U, sigma_W=0.1)
    rho = torch.linspace(-0.9, 0.9, 6, dtype=torch.float64).reshape(2, 3)
    out = k.kappa_of_cosines(rho.to("meta"))
    assert out.device.type == "meta" and out.shape == rho.shape and out.dtype == torch.float64
    assert torch.isfinite(k.kappa_of_cosines(rho)).all()


def _relu_kernel_exact(d: int, sigma_U: float, gain: float, rho: float) -> tuple[float, float]:
    """ReLU's κ(ρ) and κ'(ρ) (s = 1, σ_W = 0) in 50-digit arithmetic: v J(θ)/(2π) and
    (g²/d)(π − θ)/(2π), θ = arccos(c/v), J = sin θ + (π − θ) cos θ."""
    import mpmath
    with mpmath.workdps(50):
        g2, s2, r = mpmath.mpf(gain) ** 2, mpmath.mpf(sigma_U) ** 2, mpmath.mpf(rho)
        v, c = g2 / d + s2, g2 * r / d + s2
        theta = mpmath.acos(c / v)
        J = mpmath.sin(theta) + (mpmath.pi - theta) * mpmath.cos(theta)
        return float(v * J / (2 * mpmath.pi)), float(g2 / d * (mpmath.pi - theta) / (2 * mpmath.pi))


@settings(max_examples=300, deadline=None)
@given(d=st.integers(2, 512), log_sigma=st.floats(-12, 1), zero_sigma=st.booleans(), gain=st.floats(0.05, 20),
       rho=st.one_of(st.floats(-1.0, -0.5), st.just(-1.0), st.floats(-1.0, -0.999999)))
@example(d=3, log_sigma=-7, zero_sigma=False, gain=1.0, rho=-1.0)  # the old closed form: 8838× off
@example(d=3, log_sigma=-5, zero_sigma=False, gain=1.0, rho=-1.0)  # 0.9% off
def test_relu_kernel_keeps_its_relative_precision_near_antipodal_tokens(d, log_sigma, zero_sigma, gain, rho):
    """κ(ρ) and κ'(ρ) of ReLU to 1e-13 relative, against 50-digit arithmetic, for cosines from −1/2
    down to −1 and σ_U from 0 to 10: where the correlation c/v is near −1 both are tiny (κ ~ δ³,
    δ = π − θ) and the closed form's terms of order δ cancel; the kernel then sums J's series in δ
    computed from v ± c without cancellation (`NoiseKernel._near_antipodal`)."""
    sigma_U = 0.0 if zero_sigma else 10.0 ** log_sigma
    k = NoiseKernel("relu", d, sigma_U=sigma_U, gain=gain)
    want, want_prime = _relu_kernel_exact(d, sigma_U, gain, rho)
    got, got_prime = float(k.kappa(rho)), float(k.kappa_prime(rho))
    floor = 1e-40 * k.variance  # the 50-digit reference's own rounding (it gives −8e-53 for a κ of 0)
    assert abs(got - want) <= 1e-13 * abs(want) + floor, (got, want)
    assert abs(got_prime - want_prime) <= 1e-13 * abs(want_prime) + floor, (got_prime, want_prime)
    # and in the exact field's path (a (1, 1) Gram of cosines, checks skipped): the same values
    assert float(k.kappa_of_cosines(torch.tensor([[rho]], dtype=torch.float64))) == got
