"""The gain g of the inner weights U (variance g²) and the order-to-chaos transition (SPEC §2, §8).

With pre-activations g U y/√d + b_U the kernel is κ(ρ) = s²(E[φ(V₁)φ(V₂)] + σ_W²) with
Var V = g²/d + σ_U², Cov = g²ρ/d + σ_U², and κ'(1) = (s² g²/d) E[φ'(V)²]. Checked by the exact
rescalings that exist (any φ: gain √k at dimension k d' is gain 1 at d'; a positively homogeneous
φ: gain g is gain 1 with σ_U/g, σ_W/g and scale s g), against the random MLP's, the random-feature
field's and the MLP jet's outputs over many draws (4.5 SE, fixed seeds; the same check rejects the
kernel that ignores g), and at g = 1 bit for bit against the kernel without a gain. The critical
gain g_c (λ₁(g_c) = 0) is checked against closed forms (linear φ, ReLU: none; erf without biases:
the root of one equation in v = g²/d, solved here with ``math`` alone) and by the sign of λ₁ on
both sides; a shifted value fails that check.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from click.testing import CliRunner
from hypothesis import example, given, settings
from hypothesis import strategies as st

from stochformer.cli import main
from stochformer.config import RunConfig
from stochformer.config.build import make_kernel, make_noise
from stochformer.model.kernel import G_MAX, NoiseKernel, critical_gain, gain_exponent, lyapunov_exponent
from stochformer.model.noise import RandomFeatureField, RandomMLP
from stochformer.model.tangent import MLPJet, tangent_frame
from stochformer.core.brownian import Draws

ACTS = ["relu", "leaky_relu", "linear", "erf", "tanh", "gelu"]
HOMOGENEOUS = ["relu", "leaky_relu", "linear"]
RHO = torch.linspace(-1.0, 1.0, 21, dtype=torch.float64)
Z_TOL = 4.5


# --------------------------------------------------------------------------- the kernel with a gain


@settings(max_examples=20, deadline=None, derandomize=True)
@given(act=st.sampled_from(ACTS), d_small=st.integers(2, 6), k=st.integers(1, 5),
       sigma_U=st.floats(0.0, 2.0), sigma_W=st.floats(0.0, 1.0))
def test_gain_is_a_change_of_dimension(act, d_small, k, sigma_U, sigma_W):
    """Any φ: Var V = g²/d + σ_U², Cov = g²ρ/d + σ_U² and the prefactor g²/d of κ' depend on g²/d
    only, so gain √k at dimension k d' is gain 1 at dimension d'."""
    a = NoiseKernel(act, k * d_small, sigma_U, sigma_W, 1.3, gain=math.sqrt(k))
    b = NoiseKernel(act, d_small, sigma_U, sigma_W, 1.3)
    assert torch.allclose(a.kappa(RHO), b.kappa(RHO), rtol=1e-12, atol=1e-14)
    assert torch.allclose(a.kappa_prime(RHO), b.kappa_prime(RHO), rtol=1e-12, atol=1e-14)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(act=st.sampled_from(HOMOGENEOUS), d=st.integers(2, 64), g=st.floats(0.05, 20.0),
       sigma_U=st.floats(0.0, 3.0), sigma_W=st.floats(0.0, 1.0))
@example(act="relu", d=2, g=3.0, sigma_U=5.960464477539063e-08, sigma_W=0.0)  # σ_U ≪ g/√d: κ' at ρ = −1 from arccos lost
@example(act="relu", d=32, g=0.75, sigma_U=1e-09, sigma_W=0.0)  # √ε of its scale (found with random examples)
def test_gain_of_a_homogeneous_activation(act, d, g, sigma_U, sigma_W):
    """φ(gx) = gφ(x) (ReLU, leaky ReLU, linear): V = g V' with Var V' = 1/d + (σ_U/g)², so
    κ_g(ρ; σ_U, σ_W, s) = κ_1(ρ; σ_U/g, σ_W/g, s g), and the same for κ' (φ' is 0-homogeneous)."""
    a = NoiseKernel(act, d, sigma_U, sigma_W, 1.0, gain=g)
    b = NoiseKernel(act, d, sigma_U / g, sigma_W / g, g)
    for f, h in ((a.kappa, b.kappa), (a.kappa_prime, b.kappa_prime)):  # to rounding of the kernel's scale
        ka, kb = f(RHO), h(RHO)
        assert torch.allclose(ka, kb, rtol=1e-11, atol=1e-11 * float(kb.abs().max()))


@pytest.mark.parametrize("act", ACTS)
def test_gain_one_changes_no_bit(act):
    """The default gain 1.0 reproduces the kernel bit for bit (κ, κ'); the rescalings above are
    not trivially true: gain 2 changes κ."""
    rho = torch.linspace(-1.0, 1.0, 7, dtype=torch.float64)
    for sigma_U in (0.0, 0.4, 3.0):
        a, b = NoiseKernel(act, 5, sigma_U, 0.2, 1.1), NoiseKernel(act, 5, sigma_U, 0.2, 1.1, gain=1.0)
        assert torch.equal(a.kappa(rho), b.kappa(rho)) and torch.equal(a.kappa_prime(rho), b.kappa_prime(rho))
        assert not torch.allclose(NoiseKernel(act, 5, sigma_U, 0.2, 1.1, gain=2.0).kappa(rho), a.kappa(rho))


def test_gain_zero_and_bad_gains():
    """g = 0: V = b_U; without biases V = 0, κ = s²(φ(0)² + σ_W²) and κ' = 0. A negative or
    infinite gain is one error naming the field."""
    k = NoiseKernel("erf", 4, 0.0, 0.5, 2.0, gain=0.0)
    assert torch.equal(k.kappa(RHO), torch.full_like(RHO, 4.0 * 0.25))
    assert torch.equal(k.kappa_prime(RHO), torch.zeros_like(RHO))
    assert float(NoiseKernel("sigmoid", 4, gain=0.0).kappa(0.3)) == pytest.approx(0.25, rel=1e-14)
    for bad in (-0.1, math.inf, math.nan):
        with pytest.raises(ValueError, match="gain"):
            NoiseKernel("relu", 4, gain=bad)
    with pytest.raises(ValueError, match="gain"):
        RunConfig(gain=-1.0)


# --------------------------------------------------------------------------- the random MLP against κ


def _z(samples: torch.Tensor, predicted: float) -> float:
    """(mean − predicted)/SE over independent samples (B,)."""
    mean, se = float(samples.mean()), float(samples.std() / math.sqrt(samples.numel()))
    return (mean - predicted) / se


def _pair(d: int, rho: float) -> torch.Tensor:
    """Two unit tokens with cosine ρ: (1, 2, d)."""
    x = torch.zeros(d, dtype=torch.float64)
    y = torch.zeros(d, dtype=torch.float64)
    x[0], y[0], y[1] = 1.0, rho, math.sqrt(1 - rho * rho)
    return torch.stack([x, y])[None]


def _mlp_products(noise, d: int, rho: float, B: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per independent draw: the mean over coordinates of G(x)_i G(y)_i and of G(x)_i², (B,) each,
    for the noise source's increment at Δt = 1 (its expectation κ(ρ) and κ(1), SPEC §2)."""
    X = _pair(d, rho).expand(B, 2, d).contiguous()
    gen = torch.Generator().manual_seed(seed)
    noise.reset(B, d, gen, torch.float64, "cpu")
    G = noise.increment(X, 1.0, Draws(gen))
    return (G[:, 0] * G[:, 1]).mean(-1), (G[:, 0] ** 2).mean(-1)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(act=st.sampled_from(["relu", "erf", "tanh", "linear"]), d=st.integers(2, 6), g=st.floats(0.2, 3.0),
       sigma_U=st.floats(0.0, 1.0), rho=st.floats(-0.9, 0.9), mode=st.sampled_from(["weights", "gaussian"]))
def test_mlp_covariance_is_the_kernel(act, d, g, sigma_U, rho, mode):
    """E[G(x)_i G(y)_i] = κ(⟨x, y⟩) for the MLP with gain g at any width (the width-8 MLP's
    conditional covariance averages to κ over U, b_U): 20000 draws, within 4.5 SE, seed 0."""
    mlp = RandomMLP(width=8, activation=act, sigma_U=sigma_U, sigma_W=0.2, mode=mode, gain=g)
    cross, square = _mlp_products(mlp, d, rho, 20000, 0)
    kern = mlp.noise_kernel(d)
    assert abs(_z(cross, float(kern.kappa(rho)))) < Z_TOL
    assert abs(_z(square, kern.kappa1)) < Z_TOL


@pytest.mark.parametrize("mode", ["weights", "gaussian"])
def test_mlp_check_rejects_a_kernel_without_the_gain(mode):
    """The check above fails for the kernel that ignores g (gain 1 in place of 2)."""
    mlp = RandomMLP(width=8, activation="tanh", sigma_U=0.3, mode=mode, gain=2.0)
    cross, square = _mlp_products(mlp, 4, 0.5, 20000, 0)
    wrong = NoiseKernel("tanh", 4, 0.3)
    right = mlp.noise_kernel(4)
    assert abs(_z(cross, float(right.kappa(0.5)))) < Z_TOL and abs(_z(square, right.kappa1)) < Z_TOL
    assert abs(_z(cross, float(wrong.kappa(0.5)))) > Z_TOL and abs(_z(square, wrong.kappa1)) > Z_TOL


def test_random_feature_field_covariance_is_the_kernel():
    """The random-feature field with gain g: over 20000 independent fields (each of 4 features),
    E[ΔW(x)_i ΔW(y)_i] = κ(ρ) at Δt = 1 within 4.5 SE; the kernel ignoring g is rejected."""
    field = RandomFeatureField("erf", 4, 0.3, 0.1, gain=2.5)
    cross, square = _mlp_products(field, 3, -0.4, 20000, 1)
    kern = field.noise_kernel(3)
    assert abs(_z(cross, float(kern.kappa(-0.4)))) < Z_TOL and abs(_z(square, kern.kappa1)) < Z_TOL
    assert abs(_z(square, NoiseKernel("erf", 3, 0.3, 0.1).kappa1)) > Z_TOL


@pytest.mark.parametrize("mode", ["weights", "gaussian"])
def test_mlp_jet_variances_are_the_kernel(mode):
    """The MLP's 1-jet at a token with gain g: the value has variance κ(1) per coordinate and the
    derivative along a unit tangent vector variance κ'(1) = (g²/d) E[φ'(V)²] (the g² of κ'), over
    20000 draws within 4.5 SE; the gain-1 κ'(1) is rejected."""
    d, B = 4, 20000
    jet = MLPJet(RandomMLP(8, "tanh", 0.2, 0.0, 1.0, mode, gain=2.0))
    gen = torch.Generator().manual_seed(2)
    x = _pair(d, 0.0)[:, :1].expand(B, 1, d).contiguous()
    V = tangent_frame(x, 1, gen)
    J = jet.jet(x, V, 1.0, Draws(gen)).value
    kern = jet.noise_kernel(d)
    value, slope = (J[:, 0] ** 2).mean(-1), (J[:, 1] ** 2).mean(-1)
    assert abs(_z(value, kern.kappa1)) < Z_TOL and abs(_z(slope, kern.kappa1_prime)) < Z_TOL
    assert abs(_z(slope, NoiseKernel("tanh", d, 0.2).kappa1_prime)) > Z_TOL


def test_config_forwards_the_gain():
    """``gain`` reaches the kernel and every noise source built from a config."""
    for dynamics, noise in (("transformer", "mlp"), ("transformer", "mlp_gaussian"), ("sde", "exact"),
                            ("sde", "random_features")):
        cfg = RunConfig(gain=2.5, dynamics=dynamics, noise=noise, activation="erf", d=4)
        src = make_noise(cfg)
        assert src is not None and src.noise_kernel(4) == make_kernel(cfg)
        assert make_kernel(cfg).gain == 2.5


# --------------------------------------------------------------------------- the critical gain


def _erf_lambda_1(v: float, d: int) -> float:
    """λ₁/(s²) for erf without biases as a function of v = g²/d, from SPEC §2's closed forms with
    ``math`` only: κ(1) = (2/π) asin(2v/(1 + 2v)), κ'(1) = v (4/π)/√(1 + 4v)."""
    kappa = (2 / math.pi) * math.asin(2 * v / (1 + 2 * v))
    kappa_prime = v * (4 / math.pi) / math.sqrt(1 + 4 * v)
    return 0.5 * (d - 3) * kappa_prime - 0.5 * (d - 1) * kappa


def _bisect(f, lo: float, hi: float) -> float:
    """The root of f on [lo, hi] with f(lo) < 0 < f(hi), by bisection."""
    assert f(lo) < 0 < f(hi)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return 0.5 * (lo + hi)


def _brackets_root(kernel: NoiseKernel, g: float, delta: float) -> bool:
    """Whether λ₁ has opposite signs at g − δ and g + δ (negative below, positive above)."""
    return gain_exponent(kernel, g - delta) < 0 < gain_exponent(kernel, g + delta)


@pytest.mark.parametrize("d", [4, 5, 8, 16, 64])
def test_critical_gain_of_erf_closed_form(d):
    """erf without biases: λ₁ depends on v = g²/d alone, so g_c = √(d v*) with v* the root of the
    closed-form λ₁(v) (bisection here, independent of the package); λ₁ changes sign there."""
    v_star = _bisect(lambda v: _erf_lambda_1(v, d), 1e-6, 1e6)
    gc = critical_gain(NoiseKernel("erf", d, scale=0.7))
    assert gc is not None and gc == pytest.approx(math.sqrt(d * v_star), rel=1e-9)
    kern = NoiseKernel("erf", d)
    assert _brackets_root(kern, gc, 1e-6 * gc)
    assert not _brackets_root(kern, 1.05 * gc, 1e-6 * gc) and not _brackets_root(kern, 0.95 * gc, 1e-6 * gc)


def test_lambda_1_of_linear_phi_by_hand():
    """Linear φ: κ(1) = s²(g²/d + σ_U² + σ_W²), κ'(1) = s² g²/d, so λ₁ = −s²(g²/d + (d−1)(σ_U² + σ_W²)/2)
    < 0 at every g: no critical gain. ReLU (κ'(1) = s² g²/(2d) ≤ κ(1)) and d ≤ 3 neither."""
    for d, g, su, sw, s in ((4, 0.3, 0.0, 0.0, 1.0), (7, 5.0, 0.4, 0.2, 1.5), (3, 2.0, 0.1, 0.0, 0.5)):
        k = NoiseKernel("linear", d, su, sw, s, gain=g)
        by_hand = -s * s * (g * g / d + 0.5 * (d - 1) * (su * su + sw * sw))
        assert lyapunov_exponent(k.kappa1, k.kappa1_prime, d) == pytest.approx(by_hand, rel=1e-13)
        assert gain_exponent(NoiseKernel("linear", d, su, sw, s), g) == pytest.approx(by_hand, rel=1e-13)
    for kern in (NoiseKernel("linear", 16), NoiseKernel("relu", 16), NoiseKernel("relu", 4, 0.5, 0.5),
                 NoiseKernel("erf", 3), NoiseKernel("erf", 2, 0.3)):
        assert critical_gain(kern) is None


@pytest.mark.parametrize("act, d", [("tanh", 4), ("tanh", 16), ("erf", 6)])
def test_critical_gain_brackets_a_sign_change(act, d):
    """For an odd φ without biases (d ≥ 4) λ₁ < 0 below g_c and > 0 above it; a value shifted by 2%
    fails that check."""
    kern = NoiseKernel(act, d)
    gc = critical_gain(kern)
    assert gc is not None and 0 < gc < G_MAX
    assert abs(gain_exponent(kern, gc)) < 1e-9
    assert _brackets_root(kern, gc, 1e-4 * gc)
    assert not _brackets_root(kern, 1.02 * gc, 1e-4 * gc) and not _brackets_root(kern, gc / 1.02, 1e-4 * gc)
    if act == "erf":  # σ_U adds to κ(1) but not to κ'(1)'s g²/d: the root moves up
        biased = critical_gain(NoiseKernel(act, d, 0.5))
        assert biased is not None and biased > gc


def test_critical_gain_none_up_to_g_max():
    """g_max bounds the search: below the root there is no sign change on (0, g_max]."""
    gc = critical_gain(NoiseKernel("erf", 4))
    assert gc is not None
    assert critical_gain(NoiseKernel("erf", 4), g_max=0.9 * gc) is None
    assert critical_gain(NoiseKernel("erf", 4), g_max=1.1 * gc) == pytest.approx(gc, rel=1e-10)
    with pytest.raises(ValueError, match="g_max"):
        critical_gain(NoiseKernel("erf", 4), g_max=0.0)


def test_rates_json_reports_g_c():
    """``stochformer rates --json``: ``g_c`` (null where λ₁ keeps its sign) and ``--set gain=...``
    changes the rates."""
    runner = CliRunner()
    out = json.loads(runner.invoke(main, ["rates", "--json", "--set", "activation=erf", "--set", "d=4"]).output)
    assert out["g_c"] == pytest.approx(critical_gain(NoiseKernel("erf", 4)), rel=1e-12)
    out_relu = json.loads(runner.invoke(main, ["rates", "--json", "--set", "d=4"]).output)
    assert out_relu["g_c"] is None
    two = json.loads(runner.invoke(main, ["rates", "--json", "--set", "activation=erf", "--set", "d=4",
                                          "--set", "gain=2"]).output)
    assert two["kappa_prime"] == pytest.approx(NoiseKernel("erf", 4, gain=2.0).kappa1_prime, rel=1e-14)
    assert two["g_c"] == pytest.approx(out["g_c"], rel=1e-12)  # g_c does not depend on the config's gain


def test_critical_gain_without_noise_is_none():
    """s = 0: λ₁ ≡ 0 keeps its (zero) sign: no critical gain."""
    assert critical_gain(NoiseKernel("erf", 4, scale=0.0)) is None


@pytest.mark.parametrize("g", [0.3, 2.5, 9.0, 40.0])
def test_moments_at_one_against_scipy(g):
    """``moments_at_one`` of the quadrature route (tanh at d = 4, σ_U = 0.1) against scipy's adaptive
    integration of E[tanh(V)²] and (g²/d) E[sech⁴(V)], to 1e-10 at every g; the kernel's own κ'(1)
    (2-D Gauss–Hermite at small v, Mehler's series above MEHLER_VARIANCE, v ≈ 1.6, 20, 400 here)
    agrees to 1e-10 too."""
    from scipy import integrate

    sv = math.hypot(g / 2.0, 0.1)
    dens = lambda x: math.exp(-0.5 * (x / sv) ** 2) / (sv * math.sqrt(2 * math.pi))  # noqa: E731
    k1 = integrate.quad(lambda x: math.tanh(x) ** 2 * dens(x), -14 * sv, 14 * sv, points=[0.0], limit=500,
                        epsabs=1e-14)[0]
    kp = integrate.quad(lambda x: math.cosh(x) ** -4 * dens(x), -14 * sv, 14 * sv, points=[0.0], limit=500,
                        epsabs=1e-14)[0] * g * g / 4
    kern = NoiseKernel("tanh", 4, 0.1, gain=g)
    got = kern.moments_at_one
    assert got[0] == pytest.approx(k1, rel=1e-10) and got[1] == pytest.approx(kp, rel=1e-10)
    assert kern.kappa1_prime == pytest.approx(kp, rel=1e-10) and kern.kappa1 == pytest.approx(k1, rel=1e-10)


def test_measured_top_exponent_changes_sign_across_g_c():
    """Benettin's method on the limit SDE (``run_spectrum``: erf without biases, d = 4, one token,
    2000 samples, T = 1 on L = 64, 32, 16 Heun steps on one Brownian path, seed 0) at g = g_c/2 and
    2 g_c: the measured λ₁ agrees with ((d−3)/2)κ'(1) − ((d−1)/2)κ(1) within 4.5 √(SE² + err²), is
    negative below g_c and positive above, each resolved from 0 by more than 4.5 √(SE² + err²)
    (measured −0.441 ± 0.032 and 1.133 ± 0.071 against −0.428 and 1.163); the kernel without the
    gain is rejected above g_c."""
    from stochformer.experiments.spectrum import SpectrumConfig, run_spectrum

    gc = critical_gain(NoiseKernel("erf", 4))
    assert gc is not None
    for g, sign in ((gc / 2, -1.0), (2 * gc, 1.0)):
        res = run_spectrum(SpectrumConfig(model={"dynamics": "sde", "batch": 2000, "L": 64, "T": 1.0, "d": 4,
                                                 "activation": "erf", "gain": g}))
        lam, scale = float(res.measured[0]), math.hypot(float(res.se[0]), float(res.err[0]))
        assert res.predicted[0] == pytest.approx(gain_exponent(NoiseKernel("erf", 4), g), rel=1e-12)
        assert abs(lam - res.predicted[0]) < Z_TOL * scale
        assert sign * lam > Z_TOL * scale
        if sign > 0:
            wrong = NoiseKernel("erf", 4)
            assert abs(lam - lyapunov_exponent(wrong.kappa1, wrong.kappa1_prime, 4)) > Z_TOL * scale


def test_gain_phase_zero_contour_is_g_c():
    """``gain_phase`` over (g, σ_U) for erf at d = 4: in every row λ₁ < 0 at the gains below g_c(σ_U)
    and > 0 above (the zero contour is g_c); each entry is the formula at its point; the figure draws
    into given axes. A grid of gains is refused with one error naming it."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from stochformer.model.kernel import gain_phase
    from stochformer.plotting.phase_gain import plot_gain_phase

    gains, sigmas = [1.0, 4.0, 7.0, 9.0, 12.0, 20.0], [0.0, 0.5, 1.0]
    ph = gain_phase(NoiseKernel("erf", 4), gains, sigmas)
    assert ph.lambda_1.shape == (3, 6) and ph.g_c.shape == (3,)
    for j, s in enumerate(sigmas):
        below = ph.gains < ph.g_c[j]
        assert below.any() and (~below).any()
        assert (ph.lambda_1[j, below] < 0).all() and (ph.lambda_1[j, ~below] > 0).all()
        assert ph.lambda_1[j, 2] == gain_exponent(NoiseKernel("erf", 4, s), 7.0)
    assert ph.g_c[0] < ph.g_c[1] < ph.g_c[2]
    fig, ax = plt.subplots()
    assert plot_gain_phase(ph, ax=ax) is fig
    plt.close(fig)
    with pytest.raises(ValueError, match="gains"):
        gain_phase(NoiseKernel("erf", 4), [1.0, -2.0], sigmas)
