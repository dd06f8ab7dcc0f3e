"""The exact two-token theory (stochformer.theory, SPEC §8) against closed forms, against a refined
grid, against its own boundary value problems, and against Monte Carlo (fixed seeds; tolerances of
4.5 standard errors) of the scalar diffusion and of the token-level limit SDE."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, special

from stochformer.model.kernel import NoiseKernel, lambda_bar_prime
from stochformer.model.two_point import simulate_two_point, two_point_coefficients
from stochformer.theory import (
    TOLERANCE, PairChain, PairDiffusion, antipode_threshold, energy_decay_rate, energy_rate_table, expectation,
    expected_energy, law,
)

Z_MAX = 4.5  # Monte Carlo checks: |measured − predicted| < Z_MAX standard errors


# --------------------------------------------------------------------------- fixtures and reference implementations


@pytest.fixture(scope="module")
def linear():
    """κ(u) = u/d (linear activation, no biases, d = 4): S(z) = arcsin z, both ends attract."""
    return PairDiffusion(NoiseKernel("linear", 4), 1.0, 0.0)


@pytest.fixture(scope="module")
def relu():
    """ReLU, d = 4, σ_U = σ_W = 0.5 (SPEC §6 test case): z = 1 attracts, z = −1 an entrance."""
    return PairDiffusion(NoiseKernel("relu", 4, 0.5, 0.5), 1.0, 0.0)


@pytest.fixture(scope="module")
def odd():
    """tanh, d = 8, no biases, attractive attention v = 1 at β = 3 > β*: both ends attract."""
    return PairDiffusion(NoiseKernel("tanh", 8), 3.0, 1.0)


@pytest.fixture(scope="module")
def recurrent():
    """ReLU, d = 4, σ = 0.5, repulsive attention v = −2 (λ₁ − v > 0): positive recurrent."""
    return PairDiffusion(NoiseKernel("relu", 4, 0.5, 0.5), 1.0, -2.0)


def mu_and_s(kernel: NoiseKernel, beta: float, v: float, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """b + a and s written out directly (b, s from stochformer.model.two_point; a of SPEC §8)."""
    b, s = (t.numpy() for t in two_point_coefficients(kernel, torch.from_numpy(np.asarray(z, float))))
    a = 2 * v * np.exp(beta * z) * (1 - z * z) / (np.exp(beta) + np.exp(beta * z))
    return b + a, s


def simulate_z(kernel: NoiseKernel, beta: float, v: float, z0: float, dt: float, paths: int, seed: int,
               T: float = math.inf, lower: float = -2.0, upper: float = 2.0, max_steps: int = 200_000):
    """Euler–Maruyama for dz = (b + a) dt + √s dB (coefficients tabulated on 4001 points, clipped to
    [−1, 1]) up to T or until z leaves (lower, upper): (z at the end, exit time, exited at upper)."""
    nodes = np.linspace(-1.0, 1.0, 4001)
    mu, s = mu_and_s(kernel, beta, v, nodes)
    rng = np.random.default_rng(seed)
    z = np.full(paths, float(z0))
    tau = np.full(paths, np.inf)
    alive = np.ones(paths, bool)
    t, k = 0.0, 0
    while alive.any() and t < T - 1e-12 and k < max_steps:
        i = np.flatnonzero(alive)
        zi = z[i]
        z[i] = np.clip(zi + np.interp(zi, nodes, mu) * dt + np.sqrt(np.interp(zi, nodes, s) * dt) * rng.standard_normal(len(i)),
                       -1.0, 1.0)
        t, k = t + dt, k + 1
        out = (z[i] <= lower) | (z[i] >= upper)
        tau[i[out]] = t
        alive[i[out]] = False
    return z, tau, z >= upper


def z_score(sample: np.ndarray, predicted: float) -> float:
    return abs(sample.mean() - predicted) / (sample.std(ddof=1) / math.sqrt(len(sample)))


# --------------------------------------------------------------------------- closed forms


def test_linear_kernel_scale_is_arcsine_and_p_antipodal_is_the_angle_over_pi(linear):
    # κ(u) = u/d: b = −z(1 − z²)/d, s = 2(1 − z²)²/d, S'(z) = (1 − z²)^{−1/2}, S = arcsin; a random
    # linear flow sends two tokens to opposite points with probability θ/π (a random hyperplane).
    z = np.array([-1 + 1e-12, -0.999, -0.5, 0.0, 0.3, 0.9, 1 - 1e-9])
    np.testing.assert_allclose(linear.scale(z), np.arcsin(z), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(linear.p_antipodal(z), np.arccos(z) / np.pi, rtol=1e-11, atol=1e-15)
    assert linear.hit_probability(0.2, -0.5, 0.7) == pytest.approx(
        (np.arcsin(0.2) + np.arcsin(0.5)) / (np.arcsin(0.7) + np.arcsin(0.5)), rel=1e-12)
    assert linear.odd and linear.diagonal.kind == linear.antipode.kind == "attracting"
    assert linear.diagonal.exponent == pytest.approx(-1 / 4) and linear.antipode.exponent == pytest.approx(-1 / 4)
    assert linear.diagonal.scale_exponent == pytest.approx(-0.5)  # S' ~ (1 − z)^{−1/2}
    assert linear.beta_star is None  # no attention: the antipode attracts at every β


def test_end_exponents_and_the_antipodal_threshold_beta_star(odd):
    lam1 = odd.lambda_1
    assert odd.diagonal.exponent == pytest.approx(lam1 - 1.0)
    assert odd.antipode.exponent == pytest.approx(lam1 + 2.0 / (1 + math.exp(6.0)))
    b_star = 0.5 * math.log(2 / abs(lam1) - 1)
    assert odd.beta_star == pytest.approx(b_star) and antipode_threshold(lam1, 1.0) == pytest.approx(b_star)
    kernel = odd.kernel
    below, above = PairDiffusion(kernel, b_star - 0.01, 1.0), PairDiffusion(kernel, b_star + 0.01, 1.0)
    assert below.antipode.kind == "repelling" and above.antipode.kind == "attracting"
    assert below.p_antipodal(0.0) == 0.0 and 0 < above.p_antipodal(0.0) < 1
    assert antipode_threshold(lam1, 0.1 * abs(lam1)) is None  # 2v/|λ₁| − 1 < 0: attracts at every β
    assert PairDiffusion(NoiseKernel("tanh", 8, 0.1, 0.1), 3.0, 1.0).beta_star is None  # biases: κ not odd
    # the numerical log-integrands approach the analytic end slopes (exponents) at |x| = span
    assert odd.g[-1, -1] == pytest.approx(odd.g_plus, rel=1e-9) and odd.g[0, 0] == pytest.approx(odd.g_minus, rel=1e-9)


def test_the_coefficients_equal_the_two_point_motion_and_the_scale_solves_L_S_0(relu, odd):
    # d/dz log S' = −2(b + a)/s with b, s of stochformer.model.two_point and a of SPEC §8, in the interior
    for pair in (relu, odd):
        z = np.linspace(-0.95, 0.95, 41)
        h = 1e-5
        dlog = (pair.log_scale_density(z + h) - pair.log_scale_density(z - h)) / (2 * h)
        mu, s = mu_and_s(pair.kernel, pair.beta, pair.v, z)
        np.testing.assert_allclose(dlog, -2 * mu / s, rtol=1e-6, atol=1e-8)


# --------------------------------------------------------------------------- accuracy against a refined grid

CASES = {
    "relu-d3": ("relu", 3, 0.0, 1.0, 0.0), "relu-d64-biases": ("relu", 64, 0.1, 1.0, 0.0),
    "tanh-attention": ("tanh", 8, 0.0, 3.0, 1.0), "silu-repulsive": ("silu", 5, 0.1, 1.0, -1.0),
    "relu-d2": ("relu", 2, 0.0, 1.0, 0.0), "erf-weak-attention": ("erf", 6, 0.0, 2.0, 0.5),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_query_is_within_the_stated_tolerance_of_a_refined_grid(case):
    act, d, sigma, beta, v = CASES[case]
    k = NoiseKernel(act, d, sigma, sigma)
    p, fine = PairDiffusion(k, beta, v), PairDiffusion(k, beta, v, span=30.0, resolution=4.0, nodes=24)
    z = np.array([-0.999, -0.5, 0.0, 0.3, 0.9, 0.999999])

    def close(a, b):
        np.testing.assert_allclose(a, b, rtol=TOLERANCE, atol=0)

    if p.diagonal.attracting and p.antipode.attracting:
        close(p.p_antipodal(z), fine.p_antipodal(z))
    close(p.scale(z), fine.scale(z))
    for z0, eps in ((0.3, 1e-3), (-0.99, 1e-6)):
        a, b = p.sync_time(z0, eps), fine.sync_time(z0, eps)
        close([a.mean_given, a.sd_given, a.p_reach], [b.mean_given, b.sd_given, b.p_reach])
    sa, sb = p.stationary(), fine.stationary()
    assert sa.exists == sb.exists
    if sa.exists:
        close([sa.mean, sa.sd, *sa.pdf(z)], [sb.mean, sb.sd, *sb.pdf(z)])


# --------------------------------------------------------------------------- properties


@settings(max_examples=40, deadline=None)
@given(z0=st.floats(-0.9999, 0.9999), dz=st.floats(1e-4, 0.5))
def test_p_antipodal_is_a_probability_decreasing_in_z0_with_its_complement(odd, z0, dz):
    z1 = min(z0 + dz, 0.99999)
    p0, p1 = odd.p_antipodal(z0), odd.p_antipodal(z1)
    assert 0.0 <= p1 <= p0 <= 1.0
    assert p0 + odd.p_diagonal(z0) == pytest.approx(1.0, abs=1e-14)


def test_p_antipodal_limits_at_the_ends_and_where_one_end_attracts(odd, relu, recurrent):
    assert odd.p_antipodal(-1 + 1e-15) > 1 - 1e-6 and odd.p_antipodal(1 - 1e-15) < 1e-6
    assert relu.p_antipodal(-0.9999) == 0.0  # the antipode is an entrance: never approached
    assert math.isnan(recurrent.p_antipodal(0.0)) and recurrent.summary()["p_antipodal"] is None


@settings(max_examples=15, deadline=None)
@given(z0=st.floats(-0.999, 0.99), eps=st.floats(1e-6, 0.5))
def test_sync_time_is_nonnegative_decreasing_and_vanishes_at_the_level(relu, z0, eps):
    top = 1 - eps
    a = relu.sync_time(z0, eps)
    assert a.p_reach == 1.0 and a.mean >= 0 and a.sd >= 0
    if z0 >= top:
        assert a.mean == 0.0
        return
    closer = relu.sync_time(z0 + 0.5 * (top - z0), eps)
    assert closer.mean <= a.mean
    # T₁ vanishes linearly at the level: T₁(1 − ε − δ) ≈ δ |T₁'(1 − ε)|
    delta = 1e-4 * eps
    near, nearer = relu.sync_time(top - delta, eps).mean, relu.sync_time(top - delta / 10, eps).mean
    assert 0 < near < 1e-2 and nearer == pytest.approx(near / 10, rel=1e-3)


@settings(max_examples=12, deadline=None, derandomize=True)
@given(v=st.floats(-60.0, -1.0))
def test_a_sync_time_past_float64_is_inf_with_its_logarithm(v):
    """A repelling diagonal makes E τ grow like e^{c|v|/κ(1)}: past float64 from about |v| = 30 here.
    The mean is then inf (JSON null), never an overflow, and its log stays finite: log E τ where
    the mean is finite, increasing in |v| (a wrong log, or one taken of the clipped mean, fails)."""
    kernel = NoiseKernel("relu", 3)
    a, b = PairDiffusion(kernel, 1.0, v).sync_time(0.0, 1e-3), PairDiffusion(kernel, 1.0, v - 1.0).sync_time(0.0, 1e-3)
    assert math.isfinite(a.log_mean_given) and b.log_mean_given > a.log_mean_given
    if math.isfinite(a.mean_given):
        assert a.log_mean_given == pytest.approx(math.log(a.mean_given), rel=1e-12)
    else:
        assert a.log_mean_given > math.log(np.finfo(float).max) and math.isinf(a.sd_given)
    summary = PairDiffusion(kernel, 1.0, v).summary(0.0, 1e-3)
    assert json.loads(json.dumps(summary)) == summary  # JSON without Infinity or NaN
    assert summary["sync_time_log10_mean_given_reach"] == pytest.approx(a.log_mean_given / math.log(10), rel=1e-12)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(v=st.floats(1e6, 1e308).flatmap(lambda m: st.sampled_from([m, -m])), d=st.integers(2, 64))
def test_a_pair_past_the_grid_limit_is_refused_before_allocating_it(v, d):
    """|v|/κ(1) large needs panels in proportion (the drift over the diffusion): past `MAX_PANELS`
    the pair is refused naming v and the ratio, with less than 64 MB allocated (before the fix:
    37.6 GiB asked for at v = 10⁶)."""
    import tracemalloc

    from stochformer.theory.pair import MAX_PANELS

    kernel = NoiseKernel("relu", d)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=rf"^v: .* at most {MAX_PANELS} .*\|v\|/kappa\(1\)") as err:
            PairDiffusion(kernel, 1.0, v)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MB allocated before the refusal"
    assert "gamma" in str(err.value)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(log_scale=st.floats(-120.0, 120.0))
def test_kappa1_outside_its_range_is_refused_naming_the_fields_that_set_it(log_scale):
    """κ(1) = s²/(2d)-scaled for ReLU: inside `KAPPA1_RANGE` the pair is built, outside it is refused
    with the range and the config fields that set κ."""
    from stochformer.theory.pair import KAPPA1_RANGE

    try:
        kernel = NoiseKernel("relu", 3, scale=10.0**log_scale)
    except ValueError:
        return  # κ itself does not fit in float64: the kernel's own refusal (tested with the kernel)
    lo, hi = KAPPA1_RANGE
    if lo <= kernel.kappa1 <= hi:
        assert PairDiffusion(kernel).sync_time(0.0).mean > 0
    else:
        with pytest.raises(ValueError, match=r"kappa\(1\) in \[1e-100, 1e\+100\].*noise_scale, gain, sigma_U and sigma_W"):
            PairDiffusion(kernel)


def test_sync_time_moments_solve_their_boundary_value_problems(relu):
    # L T₁ = −1 and L V = −s T₁'² (V = Var τ) by central differences, both 0 at 1 − ε
    eps, h = 1e-3, 1e-3
    for z in (-0.6, 0.0, 0.5, 0.9):
        T = [relu.sync_time(z + k * h, eps) for k in (-1, 0, 1)]
        m = [t.mean for t in T]
        var = [t.sd ** 2 for t in T]
        mu, s = mu_and_s(relu.kernel, 1.0, 0.0, np.array(z))
        d1, d2 = (m[2] - m[0]) / (2 * h), (m[2] - 2 * m[1] + m[0]) / h ** 2
        assert 0.5 * s * d2 + mu * d1 == pytest.approx(-1.0, abs=1e-4)
        v1, v2 = (var[2] - var[0]) / (2 * h), (var[2] - 2 * var[1] + var[0]) / h ** 2
        assert 0.5 * s * v2 + mu * v1 == pytest.approx(-s * d1 ** 2, rel=1e-4)
    assert relu.sync_time(1 - eps, eps).mean == 0.0


def test_with_both_ends_attracting_the_mean_time_is_infinite_and_given_reach_finite(odd, linear):
    a = odd.sync_time(0.2, 1e-3)
    assert math.isinf(a.mean) and 0 < a.p_reach < 1 and math.isfinite(a.mean_given) and a.mean_given > 0
    b = linear.sync_time(0.3, 1e-3)  # P(τ < ∞) = (S(z0) − S(−1))/(S(1 − ε) − S(−1)), S = arcsin
    assert b.p_reach == pytest.approx((np.arcsin(0.3) + np.pi / 2) / (np.arcsin(0.999) + np.pi / 2), rel=1e-12)


def test_stationary_density_normalised_zero_flux_or_none_with_a_reason(recurrent, relu, odd):
    st_ = recurrent.stationary()
    assert st_.exists and "positive recurrent" in st_.reason
    total, _ = integrate.quad(lambda z: float(st_.pdf(z)), -1, 1, limit=200, epsabs=1e-13, epsrel=1e-11)
    assert total == pytest.approx(1.0, abs=1e-8)
    mean, _ = integrate.quad(lambda z: z * float(st_.pdf(z)), -1, 1, limit=200, epsabs=1e-13, epsrel=1e-11)
    assert mean == pytest.approx(st_.mean, abs=1e-8)
    # zero probability flux: (s π)' / 2 = (b + a) π
    z, h = np.linspace(-0.9, 0.9, 19), 1e-5
    mu, s = mu_and_s(recurrent.kernel, 1.0, -2.0, z)
    _, s_hi = mu_and_s(recurrent.kernel, 1.0, -2.0, z + h)
    _, s_lo = mu_and_s(recurrent.kernel, 1.0, -2.0, z - h)
    flux = ((s_hi * st_.pdf(z + h)) - (s_lo * st_.pdf(z - h))) / (4 * h) - mu * st_.pdf(z)
    np.testing.assert_allclose(flux, 0.0, atol=1e-6 * float(np.max(np.abs(mu * st_.pdf(z)))))
    np.testing.assert_allclose(recurrent.stationary_density(z), st_.pdf(z))
    for pair in (relu, odd):
        other = pair.stationary()
        assert not other.exists and "z = 1 attracts" in other.reason and pair.stationary_density(z) is None
        with pytest.raises(ValueError, match="no stationary law"):
            other.pdf(0.0)


# --------------------------------------------------------------------------- Monte Carlo


def test_hit_probability_and_sync_time_against_monte_carlo_and_a_wrong_sign_is_rejected(odd):
    # P(z reaches 0.8 before −0.8 | z0 = 0.1) for tanh with attention: 4000 Euler–Maruyama paths
    _, _, up = simulate_z(odd.kernel, 3.0, 1.0, 0.1, 4e-3, 3000, seed=11, lower=-0.8, upper=0.8)
    p = odd.hit_probability(0.1, -0.8, 0.8)
    assert z_score(up.astype(float), p) < Z_MAX
    wrong = PairDiffusion(odd.kernel, 3.0, -1.0).hit_probability(0.1, -0.8, 0.8)  # repulsive instead
    assert z_score(up.astype(float), wrong) > 3 * Z_MAX


def test_sync_time_mean_and_sd_against_monte_carlo(relu):
    # τ to z ≥ 0.9 from z0 = 0 (ReLU d = 4, σ = 0.5: the antipode an entrance, τ < ∞ a.s.)
    _, tau, _ = simulate_z(relu.kernel, 1.0, 0.0, 0.0, 1e-3, 3000, seed=5, upper=0.9)
    assert np.isfinite(tau).all()
    a = relu.sync_time(0.0, 0.1)
    assert z_score(tau, a.mean) < Z_MAX
    sd_se = tau.std(ddof=1) * math.sqrt((np.mean((tau - tau.mean()) ** 4) / tau.var() ** 2 - 1) / len(tau)) / 2
    assert abs(tau.std(ddof=1) - a.sd) < Z_MAX * sd_se
    wrong = PairDiffusion(NoiseKernel("relu", 5, 0.5, 0.5)).sync_time(0.0, 0.1)  # the wrong d
    assert z_score(tau, wrong.mean) > 3 * Z_MAX


def test_law_at_t_matches_the_two_point_monte_carlo_without_attention(relu):
    # the reference law of stochformer.model.two_point (200 steps, 10000 paths) at T = 1 from u0 = 0.5
    u = simulate_two_point(relu.kernel, 0.5, 1.0, 200, 10000, seed=0)
    m = expectation(relu, lambda z: z, [1.0], z0=0.5)[0]
    q = expectation(relu, lambda z: z * z, [1.0], z0=0.5)[0]
    assert z_score(u, m) < Z_MAX and z_score(u * u, q) < Z_MAX
    dist = law(relu, 0.5, 1.0)
    assert dist.mass.sum() == pytest.approx(1.0)
    assert z_score((u > 0.9).astype(float), 1 - dist.cdf(0.9)) < Z_MAX
    assert dist.mean() == pytest.approx(m, abs=2e-3)  # the forward equation (one chain) beside the backward


def test_generator_and_first_moment_near_synchronisation_agree_with_the_motions(relu, odd):
    # the chain's generator applied to z is the drift b + a; near z = 1, E(1 − z_t) = (1 − z0) e^{(λ̄ − 2v) t}
    for pair in (relu, odd):
        chains = [PairChain(pair, h) for h in (0.05, 0.025)]
        for c in chains:
            i = np.flatnonzero(np.abs(c.z) < 0.95)
            mu, _ = mu_and_s(pair.kernel, pair.beta, pair.v, c.z[i])
            np.testing.assert_allclose((c.Q @ c.z)[i], mu, rtol=2e-2 * (c.h / 0.05) ** 2, atol=1e-6)
        w0, t = 1e-8, 0.5
        gap = expectation(pair, lambda w, y: w, [t], z0=1 - w0, distances=True)[0]
        assert gap / w0 == pytest.approx(math.exp((pair.lambda_bar - 2 * pair.v) * t), rel=2e-3)


@pytest.mark.slow
def test_law_with_attention_matches_the_token_level_limit_sde_and_a_wrong_sign_is_rejected():
    from stochformer.config.build import initial_tokens, make_kernel, make_model
    from stochformer.config import InitConfig, build_config
    from stochformer.core.runtime import make_generator
    from stochformer.integrate import SaveAt, solve

    cfg = build_config({"d": 4, "activation": "tanh", "sigma_U": 0.3, "attention": True, "beta": 2.0, "gamma": 1.0,
                        "T": 0.5, "L": 100, "N": 2, "dynamics": "sde", "batch": 2000})
    g = make_generator(7)
    X0 = initial_tokens(InitConfig(kind="pair", cosine=0.3), cfg.batch, 2, cfg.d, g)
    X = torch.from_numpy(solve(make_model(cfg), X0, cfg.T, cfg.L, SaveAt(stats=()), generator=g)["X_final"].values)
    u = (X[:, 0] * X[:, 1]).sum(-1).numpy()
    pair = PairDiffusion(make_kernel(cfg), 2.0, 1.0)
    m = expectation(pair, lambda z: z, [0.5], z0=0.3)[0]
    assert z_score(u, m) < Z_MAX
    wrong_sign = PairDiffusion(make_kernel(cfg), 2.0, -1.0)
    assert z_score(u, expectation(wrong_sign, lambda z: z, [0.5], z0=0.3)[0]) > 3 * Z_MAX


# --------------------------------------------------------------------------- the energy


def test_energy_starts_at_the_direct_value(relu):
    d, beta, N = 4, 1.0, 8
    direct = math.exp(beta) - math.gamma(d / 2) * (2 / beta) ** (d / 2 - 1) * special.iv(d / 2 - 1, beta)  # E e^{βZ}, Z uniform
    assert expected_energy(relu, [0.0], N, beta)[0] == pytest.approx((N - 1) / (2 * N) * direct, rel=1e-7)
    assert expected_energy(relu, [0.0], 2, beta, z0=0.3)[0] == pytest.approx(0.25 * (math.e - math.exp(0.3)), rel=1e-7)
    with pytest.raises(ValueError, match="N: with attention"):
        expected_energy(PairDiffusion(relu.kernel, 1.0, 1.0), [1.0], 8, beta)


@pytest.mark.slow
def test_energy_of_n_tokens_matches_the_token_level_limit_sde(relu):
    # every pair of N = 8 uniform tokens follows the pair diffusion: E[E_β] at T = 0.5 against 300 runs
    d, beta, N = 4, 1.0, 8
    e = expected_energy(relu, [0.5], N, beta)[0]

    from stochformer.config.build import initial_tokens, make_model
    from stochformer.config import InitConfig, build_config
    from stochformer.core.runtime import make_generator
    from stochformer.integrate import SaveAt, solve

    cfg = build_config({"d": d, "activation": "relu", "sigma_U": 0.5, "sigma_W": 0.5, "attention": False, "T": 0.5, "L": 50,
                        "N": N, "dynamics": "sde", "batch": 300})
    g = make_generator(3)
    X0 = initial_tokens(InitConfig(kind="uniform"), cfg.batch, N, d, g)
    E = solve(make_model(cfg), X0, cfg.T, cfg.L, SaveAt(stats=("energy",), every=cfg.L, energy_beta=beta), generator=g)["energy"]
    assert z_score(E.values[:, -1], e) < Z_MAX
    wrong = expected_energy(PairDiffusion(NoiseKernel("relu", 4, 0.25, 0.25)), [0.5], N, beta)[0]  # σ halved
    assert z_score(E.values[:, -1], wrong) > 2 * Z_MAX


def test_energy_decays_at_the_stated_rate_below_theorem_1_4_bound():
    # ReLU d = 8, σ = 0.5: λ₁ ≤ −2c, the rate is λ̄ (the first moment near z = 1); with attention
    # v = 1 (d = 3): an isolated eigenvalue; without noise biases (d = 3): the edge −λ₁²/(2c)
    boundary = PairDiffusion(NoiseKernel("relu", 8, 0.5, 0.5))
    r = energy_decay_rate(boundary, 1.0)
    assert r.kind == "boundary" and r.rate == pytest.approx(boundary.lambda_bar)
    e = expected_energy(boundary, [10.0, 12.0], 16, 1.0)
    assert math.log(e[1] / e[0]) / 2 == pytest.approx(r.rate, rel=5e-3)
    assert r.rate <= r.lambda_bar_prime == pytest.approx(lambda_bar_prime(boundary.kernel, 1.0))
    eig = PairDiffusion(NoiseKernel("relu", 3), 1.0, 1.0)
    r = energy_decay_rate(eig, 1.0)
    assert r.kind == "eigenvalue"
    e = expected_energy(eig, [8.0, 10.0], 2, 1.0)
    assert math.log(e[1] / e[0]) / 2 == pytest.approx(r.rate, rel=1e-3)
    edge = energy_decay_rate(PairDiffusion(NoiseKernel("relu", 3)), 1.0)
    assert edge.kind == "edge" and edge.rate == pytest.approx(-(1 / 6) ** 2 / (2 / 3))


def test_energy_rate_table_rows_sit_below_the_bound():
    rows = energy_rate_table(("relu", "tanh"), (5,), sigma=0.1)
    assert len(rows) == 2 and {r["activation"] for r in rows} == {"relu", "tanh"}
    for row in rows:
        assert row["rate"] <= row["lambda_bar_prime"] + 1e-9 and row["gap"] >= -1e-9
        assert row["kind"] in ("eigenvalue", "edge", "boundary")


# --------------------------------------------------------------------------- the command and the boundary


def test_pair_command_prints_json_and_names_bad_fields():
    from stochformer.cli import main

    runner = CliRunner()
    res = runner.invoke(main, ["pair", "--json", "--set", "activation=tanh", "--set", "d=8", "--set", "gamma=1",
                               "--set", "beta=3", "--set", "z0=0.2", "--set", "t=0.5"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    for key in ("p_antipodal", "beta_star", "sync_time_mean", "sync_time_sd", "exponent_diagonal", "exponent_antipode",
                "stationary", "stationary_reason", "mean_z_t", "energy_t", "energy_rate"):
        assert key in out
    assert 0 < out["p_antipodal"] < 1 and out["sync_time_mean"] is None and out["beta_star"] > 0
    for field, value, valid in (("z0", "1.5", "> -1 and < 1"), ("eps", "0", ">= 1e-12 and < 2"), ("eps", "2.5", ">= 1e-12 and < 2"),
                                ("t", "-1", ">= 0")):
        res = runner.invoke(main, ["pair", "--set", f"{field}={value}"])
        assert res.exit_code == 2
        line = [x for x in res.output.splitlines() if x.startswith("Error")]
        assert len(line) == 1 and f"{field}: must be" in line[0] and valid in line[0], res.output
    res = runner.invoke(main, ["pair", "--set", "attention_kind=usa"])
    assert res.exit_code == 2 and "softmax" in res.output


def test_bad_arguments_name_themselves(relu):
    with pytest.raises(ValueError, match="z0"):
        relu.p_antipodal(1.0)
    with pytest.raises(ValueError, match="eps"):
        relu.sync_time(0.0, 0.0)
    with pytest.raises(ValueError, match="kappa"):
        PairDiffusion(NoiseKernel("relu", 4, scale=0.0))
    with pytest.raises(ValueError, match="beta"):
        PairDiffusion(relu.kernel, float("nan"))


def test_theory_imports_only_the_model_validation_and_numerics():
    root = Path(__file__).resolve().parents[1] / "stochformer" / "theory"
    allowed = {"numpy", "scipy", "torch", "stochformer.model", "stochformer.core.validation", "stochformer.theory"}
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                target = "stochformer.theory" if node.level == 1 else "stochformer." + (node.module or "")
                names = [target if node.level == 1 else target]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                ok = top in {"numpy", "scipy", "torch", "__future__", "math", "dataclasses", "functools", "typing"} or any(
                    name == a or name.startswith(a + ".") for a in allowed)
                assert ok, f"{path.name}: imports {name}"
