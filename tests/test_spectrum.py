"""The Lyapunov spectrum of one token's tangent flow (SPEC §8): the closed form and its identities,
the tangent map of one step (closed form against automatic differentiation and finite differences,
the MLP's jet against the layer itself), Benettin's renormalisation, and the measured spectrum of
the limit SDE and the transformer against the formula, with wrong predictions rejected."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from hypothesis import example, given, settings
from hypothesis import strategies as st

from stochformer.core.brownian import BrownianPath, Draws
from stochformer.cli import main
from stochformer.config import ConfigError, build_config
from stochformer.experiments.spectrum import (
    SpectrumConfig, initial_state, predicted_spectrum, run_spectrum, spectrum_flow, tangent_growth,
)
from stochformer.model.activations import ACTIVATIONS
from stochformer.model.kernel import (
    NoiseKernel, first_moment_rate, lyapunov_exponent, lyapunov_spectrum, moment_exponent, rates, stability_index,
)
from stochformer.model.noise import RandomMLP
from stochformer.model.sde import LimitSDE
from stochformer.model.tangent import (
    ExactJet, MLPJet, affine_field, autodiff_tangent, closed_form_tangent, frame_state, reorthonormalise,
    step_map, tangent_frame,
)
from stochformer.model.transformer import Transformer
from stochformer.experiments.preflight import SizeError, check_size
from stochformer.core.runtime import make_generator
from stochformer.core.sphere import normalize

# --------------------------------------------------------------------------- the closed form

_rate = st.floats(0.0, 10.0, allow_nan=False)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(kappa=_rate, kappa_prime=_rate, d=st.integers(2, 400))
def test_spectrum_spacing_sum_rule_and_top_exponent(kappa: float, kappa_prime: float, d: int) -> None:
    """d − 1 exponents spaced by κ' (decreasing), λ₁ = lyapunov_exponent, Σ λ_i = −(d−1)κ'/2 − (d−1)²κ/2;
    g(0) = 0, g(2) = λ̄ = first_moment_rate, g(p*) = 0 at the stability index."""
    lam = lyapunov_spectrum(kappa, kappa_prime, d)
    tol = 1e-12 * (1 + d * d * (kappa + kappa_prime))
    assert len(lam) == d - 1
    assert lam[0] == pytest.approx(lyapunov_exponent(kappa, kappa_prime, d), abs=tol)
    assert all(a - b == pytest.approx(kappa_prime, abs=tol) for a, b in zip(lam, lam[1:]))
    assert math.fsum(lam) == pytest.approx(-0.5 * (d - 1) * kappa_prime - 0.5 * (d - 1) ** 2 * kappa, abs=tol * d)
    assert moment_exponent(0.0, kappa, kappa_prime, d) == 0.0
    assert moment_exponent(2.0, kappa, kappa_prime, d) == pytest.approx(first_moment_rate(kappa, kappa_prime, d), abs=tol)
    p_star = stability_index(kappa, kappa_prime, d)
    if kappa + kappa_prime == 0:
        assert math.isnan(p_star)
    else:
        assert moment_exponent(p_star, kappa, kappa_prime, d) == pytest.approx(0.0, abs=tol * (1 + p_star * p_star))


@settings(max_examples=30, deadline=None, derandomize=True)
@given(activation=st.sampled_from(sorted(ACTIVATIONS)), d=st.integers(2, 128),
       sigma_U=st.floats(0.0, 2.0), sigma_W=st.floats(0.0, 2.0))
def test_spectrum_of_every_kernel_starts_at_lambda_1_and_is_spaced_by_kappa_prime(activation, d, sigma_U, sigma_W) -> None:
    """Through NoiseKernel: the top exponent is SPEC §5's λ₁, the spacing κ'(1) and g(2) = λ̄, for
    every activation, dimension and bias scale (``rates`` once, for ReLU: the same numbers)."""
    kern = NoiseKernel(activation, d, sigma_U, sigma_W)
    k, kp = kern.kappa1, kern.kappa1_prime
    lam = lyapunov_spectrum(k, kp, d)
    assert lam[0] == pytest.approx(lyapunov_exponent(k, kp, d), rel=1e-12, abs=1e-14)
    assert np.allclose(-np.diff(lam), kp, rtol=1e-9, atol=1e-14)
    assert moment_exponent(2.0, k, kp, d) == pytest.approx(first_moment_rate(k, kp, d), rel=1e-12, abs=1e-13)


def test_spectrum_top_is_the_rates_lambda_1():
    r = rates(NoiseKernel("relu", 7, 0.3, 0.1))
    assert lyapunov_spectrum(r.kappa, r.kappa_prime, 7)[0] == pytest.approx(r.lambda_1, rel=1e-14)
    assert moment_exponent(2.0, r.kappa, r.kappa_prime, 7) == pytest.approx(r.lambda_bar, rel=1e-14)


def test_rates_json_carries_the_spectrum_and_the_finite_time_law():
    res = CliRunner().invoke(main, ["rates", "--set", "activation=relu", "--set", "d=5", "--set", "sigma_U=0.1",
                                    "--set", "sigma_W=0.1", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    # κ = 0.115, κ' = 0.1: λ_i = ((4 − 2i)/2)·0.1 − 2·0.115
    assert out["lyapunov_spectrum"] == pytest.approx([-0.13, -0.23, -0.33, -0.43], rel=1e-12)
    assert out["lyapunov_spectrum"][0] == pytest.approx(out["lambda_1"], rel=1e-12)
    assert out["lyapunov_sum"] == pytest.approx(-1.12, rel=1e-12)
    assert out["log_norm_variance_rate"] == pytest.approx(0.215, rel=1e-12)
    assert out["moment_exponent_2"] == pytest.approx(out["lambda_bar"], rel=1e-12)
    assert out["stability_index"] == pytest.approx(0.26 / 0.215, rel=1e-12)
    quiet = CliRunner().invoke(main, ["rates", "--set", "noise_scale=0", "--json"])
    assert quiet.exit_code == 0 and json.loads(quiet.output)["stability_index"] is None
    text = CliRunner().invoke(main, ["rates", "--set", "d=5"])
    assert "Lyapunov spectrum" in text.output


# --------------------------------------------------------------------------- one step's tangent map


def _state(B: int, d: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = normalize(torch.randn(B, 1, d, generator=g, dtype=torch.float64))
    return x, tangent_frame(x, generator=g)


def _finite_difference(f, x: torch.Tensor, V: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Central differences of f along each column of V: (B, d, k)."""
    cols = [(f(x + eps * V[:, :, i].unsqueeze(1)) - f(x - eps * V[:, :, i].unsqueeze(1)))[:, 0] / (2 * eps)
            for i in range(V.shape[-1])]
    return torch.stack(cols, dim=-1)


KERNEL = NoiseKernel("tanh", 5, 0.3, 0.2)
MODELS = {
    "layer": Transformer(),
    "parallel": Transformer(order="parallel"),
    "euler": LimitSDE(None, ExactJet(KERNEL), "euler", KERNEL.kappa1),
    "heun": LimitSDE(None, ExactJet(KERNEL), "heun", KERNEL.kappa1),
}
JETS = {
    "exact": ExactJet(KERNEL),
    "gaussian": MLPJet(RandomMLP(24, "tanh", 0.3, 0.2, 1.5, "gaussian")),
    "weights": MLPJet(RandomMLP(24, "tanh", 0.3, 0.2, 1.5, "weights")),
    "rademacher": MLPJet(RandomMLP(24, "silu", 0.3, 0.2, 1.0, "weights", law="rademacher")),
}


@pytest.mark.parametrize("jet", sorted(JETS))
@pytest.mark.parametrize("model", sorted(MODELS))
def test_closed_form_tangent_map_is_the_autodiff_and_finite_difference_jacobian(model: str, jet: str) -> None:
    """For every step (layer, Euler, Heun) and jet: the closed-form map equals ``torch.func.jvp`` of
    the model's own step with the step's randomness fixed (to 1e-13) and a central finite difference
    (to 1e-7); with explicit weights the field differentiated is the MLP itself, not its jet. The
    propagated vectors are tangent at the new token."""
    x, V = _state(6, 5)
    dt = 0.05
    noise = JETS[jet].jet(x, V, dt, Draws(torch.Generator().manual_seed(3)))
    xn, JV = closed_form_tangent(MODELS[model], x, V, noise.value, dt)
    f = step_map(MODELS[model], dt, noise.field or affine_field(x, V, noise.value))
    xa, JVa = autodiff_tangent(f, x, V)
    assert (jet in ("weights", "rademacher")) == (noise.field is not None)
    assert torch.allclose(xn, xa, rtol=0, atol=1e-14)
    assert torch.allclose(JV, JVa, rtol=0, atol=1e-13)
    assert torch.allclose(JVa, _finite_difference(f, x, V), rtol=0, atol=1e-7)
    assert float((xn @ JV).abs().max()) < 1e-14
    assert float((xn.norm(dim=-1) - 1).abs().max()) < 1e-14


def test_weights_jet_is_the_layer_of_the_random_mlp(replay):
    """The explicit-weights jet draws the weights in RandomMLP's order: its value row is the MLP's
    increment at the token, so the step is the transformer's own layer (SPEC §1)."""
    x, V = _state(4, 6)
    gen = torch.Generator().manual_seed(11)
    mlp = RandomMLP(width=16, activation="gelu", sigma_U=0.4, sigma_W=0.3, scale=1.2, mode="weights")
    layer = Transformer(None, mlp).step(x, 0.1, replay(gen))
    noise = MLPJet(RandomMLP(16, "gelu", 0.4, 0.3, 1.2, "weights")).jet(x, V, 0.1, Draws(gen))
    assert torch.allclose(normalize(x + noise.value[:, :1]), layer, rtol=0, atol=1e-14)


def test_gaussian_jet_is_the_weights_jet_with_whitened_normals(replay):
    """Given the same U, b_U, the Gaussian jet C Ξ (C Cᵀ = FFᵀ/m + σ_W² e₀e₀ᵀ) driven by the normals
    Ξ = C⁻¹ J_w (J_w the explicit-weights jet) is J_w itself: the same conditional law, pathwise;
    F is computed here directly (φ' by autograd)."""
    x, V = _state(5, 4)
    m, dt, s = 12, 0.2, 1.3
    gen = torch.Generator().manual_seed(5)
    g_weights, g_gauss, g_direct = replay(gen), replay(gen), replay(gen)
    J_w = MLPJet(RandomMLP(m, "tanh", 0.5, 0.4, s, "weights")).jet(x, V, dt, Draws(g_weights)).value / (s * math.sqrt(dt))
    U = torch.randn(5, m, 4, generator=g_direct, dtype=torch.float64)
    b = 0.5 * torch.randn(5, 1, m, generator=g_direct, dtype=torch.float64)
    pre = (x @ U.mT / 2.0 + b).requires_grad_(True)
    (slope,) = torch.autograd.grad(torch.tanh(pre).sum(), pre)
    F = torch.cat([torch.tanh(pre.detach()), slope * (V.mT @ U.mT) / 2.0], dim=1)
    K = F @ F.mT / m
    K[:, 0, 0] += 0.4**2
    C = torch.linalg.cholesky(K)
    xi = torch.linalg.solve_triangular(C, J_w, upper=False)
    path = BrownianPath.from_normals(xi.unsqueeze(0))
    J_g = MLPJet(RandomMLP(m, "tanh", 0.5, 0.4, s, "gaussian")).jet(x, V, dt, Draws(g_gauss, path, 0, 1)).value
    assert torch.allclose(J_g / (s * math.sqrt(dt)), J_w, rtol=0, atol=1e-12)


def test_exact_jet_has_the_field_s_covariance():
    """Rows of the exact jet: variance κ(1) Δt for the value, κ'(1) Δt for each derivative, uncorrelated
    (SPEC §3 kernel differentiated at ρ = 1), within 5 SE over 20000 samples."""
    x, V = _state(20000, 4, seed=2)
    kern = NoiseKernel("relu", 4, 0.5, 0.5)
    J = ExactJet(kern).jet(x, V, 0.5, Draws(torch.Generator().manual_seed(1))).value.numpy()
    cov = np.einsum("bid,bjd->ij", J, J) / (J.shape[0] * 4 * 0.5)
    expected = np.diag([kern.kappa1] + [kern.kappa1_prime] * 3)
    assert np.abs(cov - expected).max() < 5 * math.sqrt(2 / (J.shape[0] * 4)) * kern.kappa1


# --------------------------------------------------------------------------- Benettin's renormalisation


def test_reorthonormalise_is_a_qr_factorisation_with_positive_diagonal():
    """W = Q R with Q orthonormal and tangent, R upper triangular with R_ii = e^{log r_i} > 0, by
    Cholesky QR and, for a nearly rank-deficient frame, by the Householder fallback."""
    x, V = _state(8, 5, seed=4)
    g = torch.Generator().manual_seed(9)
    W = V @ (torch.eye(4, dtype=torch.float64) + 0.3 * torch.randn(8, 4, 4, generator=g, dtype=torch.float64))
    W[-1, :, 1] = W[-1, :, 0] + 1e-7 * W[-1, :, 1]  # one sample's frame nearly degenerate: Householder
    S, log_r = reorthonormalise(frame_state(x, W))
    Q = S[:, 1:].mT
    R = Q.mT @ W
    assert torch.allclose(Q.mT @ Q, torch.eye(4, dtype=torch.float64).expand(8, 4, 4), atol=1e-9)
    assert float((x @ Q).abs().max()) < 1e-12
    assert torch.allclose(torch.tril(R, -1), torch.zeros_like(R), atol=1e-9)
    assert torch.allclose(R.diagonal(dim1=-2, dim2=-1).log(), log_r, atol=1e-6)
    assert torch.equal(S[:, :1], x)


def _small(dynamics: str = "sde", **model) -> SpectrumConfig:
    return SpectrumConfig(model={"dynamics": dynamics, "batch": 64, "L": 16, **model})


def test_frames_stay_orthonormal_and_the_token_on_the_sphere():
    """After 120 steps the frame is orthonormal and tangent to rounding, the token a unit vector."""
    cfg = _small(L=120, d=6, activation="silu", sigma_U=0.5, sigma_W=0.5, rng="torch").model
    S0 = initial_state(32, 6, 0)
    for dynamics in ("sde", "transformer"):
        flow = spectrum_flow(cfg.with_updates(dynamics=dynamics))
        growth = tangent_growth(flow, S0, cfg.T, 120, make_generator(1))
        x, V = growth.final[:, :1], growth.final[:, 1:].mT
        assert float((V.mT @ V - torch.eye(5, dtype=torch.float64)).abs().max()) < 1e-12
        assert float((x @ V).abs().max()) < 1e-12
        assert float((x.norm(dim=-1) - 1).abs().max()) < 1e-12
        assert growth.rates.shape == (32, 5) and growth.log_norm.shape == (32, 121)
        assert np.allclose(growth.log_norm[:, -1], growth.rates[:, 0] * cfg.T, rtol=0, atol=1e-12)


def test_autodiff_jacobian_gives_the_closed_form_run():
    """``jacobian = "autodiff"`` (torch.func.jvp of the model's own step every step) reproduces the
    closed-form run to rounding, for the SDE (Heun) and the transformer with explicit weights."""
    for dynamics, extra in (("sde", {}), ("transformer", {"noise": "mlp", "m": 16})):
        base = {"model": {"dynamics": dynamics, "batch": 16, "L": 8, "d": 4, **extra}, "extrapolate": False,
                "bootstrap": 10}
        if dynamics == "transformer":
            base["extrapolate_width"] = False
        a = run_spectrum(SpectrumConfig(**base))
        b = run_spectrum(SpectrumConfig(**base, jacobian="autodiff"))
        assert np.allclose(a.measured, b.measured, rtol=0, atol=1e-12)


def test_same_seed_same_numbers():
    a, b = (run_spectrum(_small(seed=3)).to_dict() for _ in range(2))
    assert a == b
    assert run_spectrum(_small(seed=4)).to_dict()["measured"] != a["measured"]


# --------------------------------------------------------------------------- measured against the formula


def _agrees(z: np.ndarray, tol: float = 4.0) -> bool:
    return bool(np.all(np.abs(z) < tol))


def _z(measured, se, err, predicted) -> np.ndarray:
    return (np.asarray(measured) - np.asarray(predicted)) / np.hypot(se, err)


def _wrong(pred: dict, d: int) -> dict[str, np.ndarray]:
    """Wrong spectra: spacing 2κ' (from the right λ₁), the whole spectrum shifted by κ'/2, and a
    spectrum with the spacing but without the Itô term's share, λ_i − λ₁ = −(i−1)κ'·½."""
    k = np.arange(d - 1)
    lam = np.asarray(pred["spectrum"])
    return {"spacing 2κ'": lam[0] - 2 * k * pred["spacing"], "shifted by κ'/2": lam + 0.5 * pred["spacing"],
            "spacing κ'/2": lam[0] - 0.5 * k * pred["spacing"]}


@pytest.mark.parametrize("case", [
    {"d": 4, "T": 4.0, "integrator": "heun"},  # ReLU, no biases: κ = κ' = 1/8
    {"d": 6, "T": 2.0, "integrator": "euler", "activation": "tanh", "sigma_U": 0.25, "sigma_W": 0.25},
], ids=["relu-d4-heun", "tanh-d6-euler"])
def test_sde_spectrum_matches_the_formula_and_wrong_ones_are_rejected(case: dict) -> None:
    """The limit SDE, 2000 samples, L = 64, 32, 16 steps on one Brownian path (seed 0): every
    z_i = (λ̂_i − λ_i)/√(SE_i² + err_i²) (SE over samples of the per-sample Richardson combination,
    err its extrapolation error) is below 4 in size, and so are those of the sum rule, the mean
    spacing (κ'), the variance rate of log|v_t| (κ + κ') and g(2) (λ̄); each wrong spectrum has an
    exponent with |z| > 4."""
    res = run_spectrum(SpectrumConfig(model={"dynamics": "sde", "batch": 2000, "L": 64, **case}))
    assert _agrees(res.z), res.z
    for row in res.table()[len(res.measured):]:
        assert abs(row["z"]) < 4, row
    pred = predicted_spectrum(res.predictions["kappa"], res.predictions["kappa_prime"], case["d"])
    assert np.allclose(res.predicted, pred["spectrum"])
    for name, wrong in _wrong(pred, case["d"]).items():
        assert not _agrees(_z(res.measured, res.se, res.err, wrong)), name
    assert res.law["variance_rate"]["predicted"] == pytest.approx(pred["kappa"] + pred["kappa_prime"])
    assert res.law["moment_exponent_2"]["predicted"] == pytest.approx(pred["lambda_bar"])


def test_transformer_spectrum_matches_the_formula():
    """The transformer (Gaussian jet of the random MLP, m = 32), d = 3, 2000 samples, L = 32, 16, 8
    layers on one path: |z_i| < 4 for both exponents and the law; the wrong spectra are rejected."""
    res = run_spectrum(SpectrumConfig(model={"d": 3, "m": 32, "L": 32, "T": 3.0, "batch": 2000}, extrapolate_width=False))
    assert _agrees(res.z), res.z
    for row in res.table()[len(res.measured):]:
        assert abs(row["z"]) < 4, row
    pred = res.predictions
    for name, wrong in _wrong(pred, 3).items():
        assert not _agrees(_z(res.measured, res.se, res.err, wrong)), name


@pytest.mark.slow
def test_transformer_spectrum_extrapolated_in_width_matches_the_formula():
    """Widths 128, 64, 32 (nested) and L = 64, 32, 16 layers, d = 4, 2000 samples: |z_i| < 4."""
    res = run_spectrum(SpectrumConfig(model={"d": 4, "m": 128, "L": 64, "batch": 2000}))
    assert res.config.width_levels and len(res.levels) == 9
    assert _agrees(res.z), res.z
    for row in res.table()[len(res.measured):]:
        assert abs(row["z"]) < 4, row


# --------------------------------------------------------------------------- config, command line, size


@pytest.mark.parametrize("overrides,message", [
    (["model.dynamics=\"sde\"", "extrapolate_width=true"], "extrapolate_width: the SDE has no width"),
    (["model.L=30"], "model.L: must be a multiple of 4"),
    (["model.m=30"], "model.m: must be a multiple of 4"),
    (["model.dynamics=\"sde\"", "model.noise=\"random_features\""], "model.noise: the spectrum of the sde needs"),
    (["model.N=4"], "model.N: has no effect in spectrum"),
    (["model.attention=true"], "model.attention: spectrum needs False"),
    (["model.d=2"], "model.d: must be >= 3"),
    (["moment_horizon=10"], "moment_horizon: must be at most model.T"),
    (["model.noise_scale=0"], "needs the MLP noise"),
])
def test_config_refuses_what_cannot_be_measured(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config(None, overrides, model=SpectrumConfig)


@settings(max_examples=60, deadline=None)
# tanh at v = 10⁴: κ(1) of the kernel (which the predictions use) and of moments_at_one differ by 1%
@example(dynamics="sde", activation="tanh", d=3, log_scale=2.0, scaled="sigma_U", log_T=1.0, L=4, extrapolate=False)
@given(dynamics=st.sampled_from(["sde", "transformer"]), activation=st.sampled_from(["relu", "tanh", "erf", "gelu"]),
       d=st.integers(3, 64), log_scale=st.floats(-3.0, 200.0), scaled=st.sampled_from(["sigma_U", "sigma_W", "noise_scale"]),
       log_T=st.floats(-3.0, 6.0), L=st.integers(1, 64).map(lambda k: 4 * k), extrapolate=st.booleans())
def test_a_run_is_refused_exactly_where_its_coarsest_step_is_not_small(dynamics, activation, d, log_scale, scaled,
                                                                        log_T, L, extrapolate) -> None:
    """The spectrum is the Δt → 0 law (SPEC §8): a config is refused iff the coarsest step run
    (T/(L/4), or T/L without extrapolation) times the fastest predicted rate exceeds
    ``SMALL_STEP``, in one line naming model.L with that product; the L it asks for is accepted, and
    a noise past float64's reach is refused too. ``fastest_rate`` is the largest of |λ_i| over the
    listed spectrum and κ + κ'."""
    from stochformer.config.build import make_kernel
    from stochformer.experiments.sync import SMALL_STEP
    from stochformer.model.kernel import fastest_rate

    model = {"dynamics": dynamics, "activation": activation, "d": d, scaled: 10.0**log_scale, "T": 10.0**log_T, "L": L,
             "sigma_W": 0.3 if scaled != "sigma_W" else 10.0**log_scale}
    run = SpectrumConfig.model_fields["model"].annotation.model_validate(model)
    try:
        kern = make_kernel(run)
        k1, kp = kern.kappa1, kern.kappa1_prime
    except ValueError:  # a kernel past float64 is refused by its own check, naming the field
        with pytest.raises(ConfigError, match=scaled):
            build_config(None, [f"model.{k}={v!r}" if isinstance(v, str) else f"model.{k}={v}" for k, v in model.items()]
                         + [f"extrapolate={str(extrapolate).lower()}"], model=SpectrumConfig)
        return
    rate = fastest_rate(k1, kp, d)
    if d <= 16:
        listed = [abs(x) for x in lyapunov_spectrum(k1, kp, d)] + [k1 + kp]
        assert rate == pytest.approx(max(listed), rel=1e-12)
    product = rate * (run.T / (L // 4 if extrapolate else L))
    try:
        SpectrumConfig(model=model, extrapolate=extrapolate)
    except ValueError as err:
        text = str(err)
        assert product > SMALL_STEP and "model.L: the coarsest step" in text and f"= {product:.3g} > {SMALL_STEP:g}" in text, text
        asked = re.search(r"raise model.L to at least (\d+)", text)
        if asked:
            SpectrumConfig(model={**model, "L": int(asked.group(1))}, extrapolate=extrapolate)
        else:  # the L it would take is past 2**62, or the rate past float64
            assert not rate * run.T < 2**58, text
    else:
        assert product <= SMALL_STEP


@settings(max_examples=25, deadline=None)
@given(activation=st.sampled_from(["relu", "erf", "tanh"]), points=st.lists(
    st.tuples(st.floats(0.0, 30.0), st.floats(0.0, 5.0)), max_size=3), spectrum_T=st.floats(0.1, 20.0))
def test_the_exact_experiments_spectra_take_small_steps_by_default(activation, points, spectrum_T) -> None:
    """``ExactConfig`` without ``spectrum_L`` gives every spectrum run (the model's noise, each phase
    point) the least multiple of 4 that is >= 64 and a small step there; the spectrum configs it
    builds are valid, and one step fewer (4 fewer) would not be small unless 64 already was."""
    from stochformer.experiments.exact import SPECTRUM_L, ExactConfig, _spectrum_config
    from stochformer.experiments.sync import check_small_step

    cfg = ExactConfig(model={"activation": activation}, phase_points=[list(p) for p in points], spectrum_T=spectrum_T)
    for updates in cfg.spectrum_points:
        L = cfg.spectrum_steps(**updates)
        spec = _spectrum_config(cfg, 0, **updates)
        assert spec.model.L == L and L % 4 == 0 and L >= SPECTRUM_L
        if L > SPECTRUM_L:
            with pytest.raises(ValueError, match="not a small step"):
                check_small_step(spec.model.with_updates(L=L - 4), True)


def test_preflight_refuses_a_huge_run():
    with pytest.raises(SizeError, match="model.batch"):
        check_size(SpectrumConfig(model={"batch": 10**9}), max_memory=8 << 30)


def test_spectrum_command_writes_the_lists(tmp_path):
    out = tmp_path / "run"
    args = ["spectrum", "--set", "model.dynamics=sde", "--set", "model.batch=32", "--set", "model.L=16", "--set",
            "bootstrap=10", "--out", str(out), "--quiet"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "lambda_3" in res.output
    data = json.loads((out / "spectrum.json").read_text())
    assert len(data["measured"]) == len(data["se"]) == len(data["predicted"]) == 3
    assert data["predicted"] == pytest.approx([-0.125, -0.25, -0.375])
    assert {p.name for p in out.iterdir()} >= {"config.json", "dataset.nc", "spectrum.json", "spectrum.png"}
    again = CliRunner().invoke(main, args)  # a folder stochformer wrote is not replaced without --force
    assert again.exit_code != 0
    js = CliRunner().invoke(main, [*args[:-3], "--out", str(tmp_path / "json"), "--json", "--quiet"])  # stdout alone: click 8.1 mixes stderr in
    assert js.exit_code == 0, js.output
    assert json.loads(js.output)["measured"] == data["measured"]


def test_the_command_module_loads_only_click():
    code = "import sys, stochformer.cli.spectrum; print(sorted({'torch', 'numpy', 'xarray'} & set(sys.modules)))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"
