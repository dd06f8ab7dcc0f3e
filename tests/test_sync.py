"""Synchronisation rates (SPEC §5): estimators, measured λ₁ and energy rates against the closed
forms, the attention terms, the ``sync`` command, and the cluster diagnostics.

Statistical tests fix their seed and compare with a tolerance of 4 standard errors of the
estimate (the SE is computed by the estimator from the samples)."""

from __future__ import annotations

import json
import math
import re
import sys

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from hypothesis import event, given, settings
from hypothesis import strategies as st

from stochformer.cli import main
from stochformer.measure.clusters import antipodal_pairs, count_clusters, summarise_clusters
from stochformer.config import ConfigError, InitConfig, RunConfig, build_config
from stochformer.experiments.sync import (
    SyncConfig, energy_levels, energy_paths, extrapolated_moment_rate, fit_window, measure_lyapunov, moment_rate, near_sync_horizon,
    near_sync_spread, predicted_rates, richardson, run_sync,
)
from stochformer.core.sphere import normalize


def _cfg(*overrides: str, model=RunConfig):
    return build_config({}, list(overrides), model=model)


@settings(max_examples=100, deadline=None, database=None, derandomize=True)
@given(L=st.integers(1, 16), fit_from=st.one_of(st.floats(0.0, 0.999), st.floats(0.7, 0.99), st.sampled_from([0.5, 2 / 3, 0.75, 0.9])),
       extrapolate=st.booleans(), uniform_start=st.booleans())
def test_a_sync_config_is_refused_exactly_when_a_rate_window_holds_one_time(L, fit_from, extrapolate, uniform_start):
    """A rate is a slope: every level's fit window t >= fit_from·T must hold 2 times. The config is
    accepted exactly then (else one error naming fit_from with the smallest L that works, which is
    accepted, and one step less refused), and an accepted config's fits on those windows give a
    finite rate with no warning. (T = 1/4: every L here is a small step, ``check_small_step``.)"""
    import warnings

    L = 4 * L if extrapolate else L  # L, L/2, L/4 steps
    fields = {"model": {"L": L, "T": 0.25}, "fit_from": fit_from, "extrapolate": extrapolate, "uniform_start": uniform_start}
    levels = [L, L // 2, L // 4] if extrapolate else [L]
    ok = not uniform_start or all(fit_window(n, 0.25, fit_from).sum() >= 2 for n in levels)
    try:
        build_config(fields, [], model=SyncConfig)
    except ConfigError as err:
        assert not ok and "fit_from: the rate from uniform tokens is a slope" in str(err)
        need = int(str(err).split("model.L >= ")[1].split(",")[0])
        build_config({**fields, "model": {"L": need, "T": 0.25}}, [], model=SyncConfig)
        step = 4 if extrapolate else 1
        if need > step:
            with pytest.raises(ConfigError, match="fit_from"):
                build_config({**fields, "model": {"L": need - step, "T": 0.25}}, [], model=SyncConfig)
        event("refused")
        return
    assert ok
    event("accepted")
    if uniform_start:
        rng = np.random.default_rng(0)
        paths = {n: np.exp(rng.normal(size=(6, n + 1))) for n in levels}
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fit = extrapolated_moment_rate(0.25, paths, fit_from, n_boot=20, seed=1)
        assert math.isfinite(fit["rate"]) and math.isfinite(fit["se"])


def test_a_slope_of_one_time_is_refused_not_a_number():
    t = np.array([0.0, 0.5, 1.0])
    with pytest.raises(ValueError, match="mask: a slope needs at least 2 distinct times in the fit window \\(got 1\\)"):
        moment_rate(t, np.ones((4, 3)), np.array([False, False, True]), n_boot=10)


def test_moment_rate_recovers_a_geometric_brownian_motion():
    # Y_t = exp((a − b²/2) t + b B_t) has E Y_t = e^{a t}; the fitted rate must be a within 4 SE.
    rng = np.random.default_rng(3)
    a, b, n = -0.7, 0.8, 4000
    t = np.linspace(0, 1.5, 31)
    B = np.concatenate([np.zeros((n, 1)), np.cumsum(rng.normal(0, math.sqrt(t[1]), (n, 30)), axis=1)], axis=1)
    rate, se = moment_rate(t, np.exp((a - b * b / 2) * t + b * B), n_boot=300, seed=1)
    assert 0 < se < 0.1
    assert abs(rate - a) < 4 * se


def test_moment_rate_bootstrap_resamples_whole_paths():
    """Each bootstrap slope is the slope of log(mean of the paths drawn with replacement), the
    indices from default_rng(seed).integers(0, n, (n_boot, n)): written out with the gathered paths."""
    from stochformer.experiments.sync import moment_rate_bootstrap

    rng = np.random.default_rng(0)
    t = np.linspace(0.0, 2.0, 9)
    v = np.exp(rng.standard_normal((50, 1)) - t + 0.3 * rng.standard_normal((50, 9)))
    mask = t >= 0.5
    rate, boot = moment_rate_bootstrap(t, v, mask, n_boot=7, seed=3)
    idx = np.random.default_rng(3).integers(0, 50, size=(7, 50))
    expected = [np.polyfit(t[mask], np.log(v[i][:, mask].mean(axis=0)), 1)[0] for i in idx]
    assert np.allclose(boot, expected, rtol=0, atol=1e-12)
    assert rate == pytest.approx(np.polyfit(t[mask], np.log(v[:, mask].mean(axis=0)), 1)[0], abs=1e-12)


def test_predicted_rates_add_the_attention_terms():
    p = predicted_rates(_cfg("d=8", "sigma_U=0.5", "sigma_W=0.5", "gamma=-0.7"), with_bound=False)
    # Proposition 1.5: λ₁ = −1/(2d) − (σ_U² + 2σ_W²)(d−1)/4, λ̄ = 1/d − (σ_U² + 2σ_W²)(d−3)/2
    assert p["lambda_1_noise"] == pytest.approx(-1 / 16 - 0.75 * 7 / 4)
    assert p["lambda_bar_noise"] == pytest.approx(1 / 8 - 0.75 * 5 / 2)
    assert p["lambda_1_pred"] == pytest.approx(p["lambda_1_noise"] + 0.7)
    assert p["lambda_bar_pred"] == pytest.approx(p["lambda_bar_noise"] + 1.4)
    none = predicted_rates(_cfg("d=8", "attention=false", "noise_scale=2"), with_bound=False)
    assert none["gamma"] == 0.0 and none["kappa"] == pytest.approx(4 * 1 / 16)  # κ → s²κ


@pytest.mark.parametrize("dynamics", ["sde", "transformer"])
def test_lyapunov_exponent_matches_proposition_15(dynamics):
    # ReLU with biases, d = 4: λ₁ = −0.6875 per unit time t = layer·T/L; pair estimator, 4 SE.
    cfg = _cfg("d=4", "sigma_U=0.5", "sigma_W=0.5", "attention=false", f"dynamics={dynamics}", "T=4", "L=120", "m=16")
    out = measure_lyapunov(cfg, pairs=256, eps=1e-4, seed=11)
    pred = predicted_rates(cfg, with_bound=False)["lambda_1_pred"]
    assert 0 < out["lambda_1_se"] < 0.06 * abs(pred)
    assert abs(out["lambda_1"] - pred) < 4 * out["lambda_1_se"]


def test_energy_rate_near_synchronisation_matches_lambda_bar():
    # Coercive noise (λ̄ = −1.75 < 0): E[E_β] of a near-synchronised pair decays at rate λ̄ (4 SE).
    cfg = _cfg("d=8", "sigma_U=0.5", "sigma_W=0.5", "attention=false", "dynamics=sde", "N=2", "batch=1000", "L=40")
    p = predicted_rates(cfg, with_bound=False)
    T = near_sync_horizon(p["kappa"], p["kappa_prime"])
    cfg = cfg.with_updates(T=T)
    paths = energy_paths(cfg, InitConfig(kind="cluster", spread=1e-3), seed=5)
    rate, se = moment_rate(np.arange(cfg.L + 1) * cfg.dt, paths, seed=5)
    assert rate < 0 and se < 0.1 * abs(p["lambda_bar_pred"])
    assert abs(rate - p["lambda_bar_pred"]) < 4 * se


def test_extrapolated_moment_rate_removes_a_step_bias_of_synthetic_paths():
    # Paths whose rate at n steps of [0, T] is a + c·Δt + c₂·Δt² (a step bias), the same lognormal
    # fluctuation at every n (common random numbers): Richardson recovers a to O(Δt³), within its
    # stated error and 4 SE, while the plain rate at L steps is off by c·Δt ≫ 4 SE.
    rng = np.random.default_rng(0)
    a, c, c2, T, L, n_paths = -0.7, 1.5, 2.0, 2.0, 16, 2000
    z = rng.standard_normal(n_paths)[:, None]
    levels = {}
    for n in (L, L // 2, L // 4):
        t = np.linspace(0, T, n + 1)
        dt = T / n
        levels[n] = np.exp((a + c * dt + c2 * dt * dt - 0.02) * t + 0.2 * np.sqrt(t) * z)
    out = extrapolated_moment_rate(T, levels, n_boot=200, seed=1)
    plain = extrapolated_moment_rate(T, {L: levels[L]}, n_boot=200, seed=1)
    assert plain["err"] == 0.0 and abs(plain["rate"] - (a + c * T / L)) < 0.05
    assert abs(plain["rate"] - a) > 4 * plain["se"] + 0.1
    assert 0 < out["se"] < 0.05 and out["err"] > 0
    assert abs(out["rate"] - a) < 4 * out["se"] + out["err"]
    assert set(out["steps"]) == {"16", "8", "4"}


@pytest.mark.parametrize("dynamics", ["sde", "transformer"])
def test_energy_rate_extrapolated_to_zero_step_agrees_where_the_plain_one_does_not(dynamics):
    # tanh, d = 16, σ = 0.3, γ = −0.5 (the case of docs/synchronisation.md whose energy rate was 3.8 SE
    # off at the default step): a near-synchronised pair, 1000 samples, at L = 16 steps of the
    # near-synchronisation horizon. λ̄ − 2γ = −0.6925. At L steps the rate is more than 20% and 4 SE
    # off (the time-step bias); extrapolated over L, L/2, L/4 on one Brownian path it agrees within
    # 4 combined SE √(SE² + err²).
    cfg = _cfg("activation=tanh", "d=16", "sigma_U=0.3", "sigma_W=0.3", "gamma=-0.5", f"dynamics={dynamics}", "N=2",
               "batch=1000", "L=16", "m=64")
    p = predicted_rates(cfg, with_bound=False)
    cfg = cfg.with_updates(T=near_sync_horizon(p["kappa"], p["kappa_prime"]))
    levels = energy_levels(cfg, InitConfig(kind="cluster", spread=near_sync_spread("tanh", 16)), seed=5)
    out = extrapolated_moment_rate(cfg.T, levels, n_boot=300, seed=5)
    pred = p["lambda_bar_pred"]
    at_L = extrapolated_moment_rate(cfg.T, {16: levels[16]}, n_boot=300, seed=5)
    assert abs(at_L["rate"] - pred) > max(0.2 * abs(pred), 4 * at_L["se"])
    assert out["se"] < 0.1 * abs(pred)
    assert abs(out["rate"] - pred) < 4 * math.hypot(out["se"], out["err"])


def test_near_sync_spread_from_the_kernel_regularity_removes_the_relu_bias():
    # ReLU (a kink: K has a (1 − u)^{3/2} term at u = 1), d = 5, σ = 0, λ̄ = 0.2, on the SDE. The same
    # seed at every spread (common random numbers), so rate differences have a small paired SE
    # (bootstrap over pairs). The old spread 1e-2 lowers the rate measurably (by more than 5 SE);
    # the spread chosen from the regularity (1e-4/√d) is within 1e-3·|λ̄| + 4 SE of a 10 times
    # smaller one, i.e. its remaining bias is negligible.
    assert near_sync_spread("tanh", 5) == 1e-3 and near_sync_spread("relu", 5) == pytest.approx(1e-4 / math.sqrt(5))
    cfg = _cfg("d=5", "sigma_U=0", "sigma_W=0", "attention=false", "dynamics=sde", "N=2", "batch=1024", "L=25")
    p = predicted_rates(cfg, with_bound=False)
    cfg = cfg.with_updates(T=near_sync_horizon(p["kappa"], p["kappa_prime"]))
    t = np.arange(cfg.L + 1) * cfg.dt
    tt = t - t.mean()
    idx = np.random.default_rng(0).integers(0, cfg.batch, size=(300, cfg.batch))

    def rate_and_boot(spread):
        v = energy_paths(cfg, InitConfig(kind="cluster", spread=spread), seed=7)
        y = np.log(v[idx].mean(axis=1))
        return np.polyfit(t, np.log(v.mean(0)), 1)[0], ((y - y.mean(1, keepdims=True)) @ tt) / (tt @ tt)

    auto = near_sync_spread("relu", 5)
    (r_auto, b_auto), (r_old, b_old), (r_fine, b_fine) = (rate_and_boot(s) for s in (auto, 1e-2, auto / 10))
    old_bias, old_se = r_old - r_auto, (b_old - b_auto).std(ddof=1)
    assert old_bias < -5 * old_se
    left, left_se = r_auto - r_fine, (b_auto - b_fine).std(ddof=1)
    assert abs(left) < 1e-3 * abs(p["lambda_bar_pred"]) + 4 * left_se


@pytest.mark.parametrize("gamma", [0.5, -0.7])
def test_noiseless_attention_pair_exponent_is_the_discrete_minus_gamma(gamma):
    # Without noise a near-synchronised pair of the transformer obeys δ' = δ/(1 + γΔt) exactly to
    # first order in δ (post-LN attention step), so the exponent is −log(1 + γΔt)/Δt → −γ.
    # The Δt → 0 extrapolation over L, L/2, L/4 steps removes that bias up to its stated error.
    cfg = _cfg("d=5", "mlp=false", f"gamma={gamma}", "T=2", "L=100")
    out = measure_lyapunov(cfg, pairs=4, eps=1e-5, seed=0, extrapolate=False)
    assert out["lambda_1"] == pytest.approx(-math.log1p(gamma * cfg.dt) / cfg.dt, rel=1e-4)
    assert out["lambda_1"] == pytest.approx(-gamma, rel=0.02)
    ext = measure_lyapunov(cfg, pairs=4, eps=1e-5, seed=0)
    exact = {n: -math.log1p(gamma * cfg.T / n) / (cfg.T / n) for n in (100, 50, 25)}
    assert ext["lambda_1"] == pytest.approx(richardson(exact)[0], rel=1e-4)
    assert abs(ext["lambda_1"] + gamma) < ext["lambda_1_extrap_err"] < 0.1 * abs(out["lambda_1"] + gamma)


def test_default_sync_lyapunov_agrees_after_extrapolation():
    # A case nothing was tuned on: tanh, d = 16, σ = 0.3, repulsive γ = −0.5, the transformer at the
    # default step (T = 5, L = 100; m = 64 and 64 pairs for speed). λ₁ − γ = −0.7465. At L layers the
    # estimate is more than 10% low (the time-step bias); extrapolated to Δt → 0 it agrees within 3%
    # or 3 combined SE √(SE² + err²).
    cfg = build_config({}, ["model.activation=tanh", "model.d=16", "model.sigma_U=0.3", "model.sigma_W=0.3",
                            "model.gamma=-0.5", "model.m=64"], model=SyncConfig)
    run = cfg.model
    assert (run.T, run.L, run.dynamics, cfg.extrapolate) == (5.0, 100, "transformer", True)
    pred = predicted_rates(run, with_bound=False)["lambda_1_pred"]
    out = measure_lyapunov(run, 64, cfg.eps, seed=1)
    assert abs(out["lambda_1_steps"]["100"] - pred) > 0.1 * abs(pred)
    tol = max(0.03 * abs(pred), 3 * math.hypot(out["lambda_1_se"], out["lambda_1_extrap_err"]))
    assert abs(out["lambda_1"] - pred) < tol and out["lambda_1_se"] < 0.1 * abs(pred)


def test_repulsive_attention_is_overcome_by_coercive_noise_on_one_side_of_gamma_equals_lambda_1():
    # ReLU d = 8, σ_U = σ_W = 0.5: λ₁ = −1.375, λ̄ = −1.75 (coercive). Pair exponent λ₁ − γ:
    # γ = −0.6 (> λ₁) synchronises (−0.775), γ = −2.2 (< λ₁) does not (+0.825); without noise both repel.
    for gamma, sign in ((-0.6, -1), (-2.2, +1)):
        cfg = _cfg("d=8", "sigma_U=0.5", "sigma_W=0.5", f"gamma={gamma}", "T=4", "L=100", "m=16")
        out = measure_lyapunov(cfg, pairs=96, eps=1e-4, seed=2)
        assert sign * out["lambda_1"] > 4 * out["lambda_1_se"]
        quiet = measure_lyapunov(cfg.with_updates(mlp=False), pairs=2, eps=1e-4, seed=2)
        assert quiet["lambda_1"] > 0


def test_run_sync_and_cli_write_sync_json(tmp_path):
    overrides = ["model.d=4", "model.sigma_U=0.5", "model.sigma_W=0.5", "model.dynamics=sde", "model.N=3", "model.batch=64",
                 "pairs=32", "model.L=40", "model.T=2",
                 "bootstrap=50"]
    res = run_sync(_cfg(*overrides, model=SyncConfig))
    d = res.to_dict()
    for key in ("lambda_1", "lambda_1_se", "energy_rate", "energy_rate_se", "energy_rate_extrap_err", "lambda_1_pred",
                "lambda_bar_pred", "lambda_bar_prime_pred", "energy_rate_uniform", "energy_rate_uniform_extrap_err",
                "energy_rate_uniform_at_40_steps", "energy_rate_uniform_at_10_steps"):
        assert d[key] is not None and math.isfinite(d[key])
    assert len([k for k in d if k.startswith("energy_rate_at_")]) == 3  # near sync: L_near, L_near/2, L_near/4
    assert d["lambda_bar_prime_pred"] >= d["lambda_bar_noise"] - 1e-12  # λ̄' = −inf F ≥ −F(1⁻) = λ̄
    out = tmp_path / "run"
    args = ["sync", "--quiet", "--out", str(out)] + [a for o in overrides for a in ("--set", o)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    saved = json.loads((out / "sync.json").read_text())
    assert saved["lambda_1"] == pytest.approx(d["lambda_1"])  # same seed ⇒ same numbers
    assert (out / "sync.png").exists() and (out / "config.json").exists()


def test_sync_cli_rejects_bad_input_before_any_work(tmp_path):
    out = tmp_path / "bad"
    r = CliRunner().invoke(main, ["sync", "--out", str(out), "--set", "eps=0.5"])
    assert r.exit_code != 0 and "eps" in r.output
    assert not out.exists()
    with pytest.raises(ConfigError, match="pairs"):
        _cfg("pairs=1", model=SyncConfig)


def test_cluster_diagnostics_on_constructed_clouds():
    gen = torch.Generator().manual_seed(0)
    e = torch.eye(5, dtype=torch.float64)
    # sample 0: two antipodal clusters; sample 1: three clusters along e1, e2, e3 (none antipodal)
    jitter = 1e-3 * torch.randn(2, 12, 5, generator=gen, dtype=torch.float64)
    a = torch.cat([e[0].expand(6, 5), -e[0].expand(6, 5)])
    b = torch.cat([e[0].expand(4, 5), e[1].expand(4, 5), e[2].expand(4, 5)])
    X = normalize(torch.stack([a, b]) + jitter)
    assert count_clusters(X, 1e-2).tolist() == [2, 3]
    assert antipodal_pairs(X, 1e-2).tolist() == [1, 0]
    s = summarise_clusters(X, 1e-2)
    n_pairs = 12 * 11 / 2
    assert s.frac_near_plus[0] == pytest.approx(2 * 15 / n_pairs) and s.frac_near_minus[0] == pytest.approx(36 / n_pairs)
    assert s.histogram.sum() == 2 * n_pairs


# ----------------------------------------------------------------- λ₁ in float32


@pytest.mark.parametrize("precision", [{"dtype": "float32"}, {"draw_precision": "float32"},
                                       {"dtype": "float32", "dynamics": "sde"}])
def test_lyapunov_exponent_in_float32(precision, float32_reference):
    """λ̂₁ (Benettin, 256 pairs at separation 1e-4) within 5 SE of λ₁ = ((d−3)/2)κ' − ((d−1)/2)κ, for
    the transformer and for the limit SDE (exact field: κ(X) and its root in float64), with float32
    tokens or float32 draws (the measured comparison at larger sizes: docs/benchmarks.md, "Precision")."""
    cfg = float32_reference.with_updates(**precision)
    r = measure_lyapunov(cfg, pairs=256, eps=1e-4)
    assert abs(r["lambda_1"] - predicted_rates(cfg)["lambda_1_pred"]) < 5 * r["lambda_1_se"]


def test_lyapunov_fails_in_float32_through_a_gram_root(monkeypatch, float32_reference):
    """The same test fails when float32 draws through Gram roots (their rounding floor √(m·ε) ≈ 6e-3
    swamps a pair at 1e-4): the reason the float32 sampler takes the explicit routes."""
    import stochformer.model.noise as noise_module

    monkeypatch.setattr(noise_module, "_gram_roots_resolve", lambda dtype: True)
    cfg = float32_reference.with_updates(dtype="float32")
    r = measure_lyapunov(cfg, pairs=256, eps=1e-4)
    assert abs(r["lambda_1"] - predicted_rates(cfg)["lambda_1_pred"]) > 10 * r["lambda_1_se"]


@settings(max_examples=60, deadline=None)
@given(T=st.floats(1e-6, 2.0), L=st.integers(2, 64).map(lambda k: 4 * k), horizon=st.floats(1e-6, 1e4),
       extrapolate=st.booleans())
def test_a_near_horizon_is_refused_exactly_when_its_run_is_too_long(T, L, horizon, extrapolate):
    """The near-synchronisation run takes steps of the model's T/L: a ``near_horizon`` whose run
    would take more than ``NEAR_STEPS_MAX`` steps is refused naming it, any other accepted. (T <= 2
    with L >= 8 and γ = 1: every step here is small, ``check_small_step``.)"""
    from stochformer.experiments.sync import NEAR_STEPS_MAX, SyncConfig, near_steps

    steps = near_steps(L, T, horizon, extrapolate)
    assert steps >= L * horizon / T - 1e-9 * steps and steps % (4 if extrapolate else 1) == 0
    fields = {"model": {"T": T, "L": L, "batch": 2}, "near_horizon": horizon, "extrapolate": extrapolate}
    if steps <= NEAR_STEPS_MAX:
        assert SyncConfig(**fields).near_horizon == horizon
    else:
        with pytest.raises(ValueError, match=r"near_horizon: the near-synchronisation run takes steps of model\.T / model\.L"):
            SyncConfig(**fields)


@settings(max_examples=60, deadline=None)
@given(gamma=st.floats(-1e6, 1e6), sigma_U=st.sampled_from([0.0, 0.5, 3.0, 1e5]), d=st.integers(3, 40),
       T=st.floats(1e-3, 1e3), L=st.integers(1, 100).map(lambda k: 4 * k), extrapolate=st.booleans())
def test_a_sync_config_is_refused_exactly_where_its_coarsest_step_is_not_small(gamma, sigma_U, d, T, L, extrapolate):
    """λ₁ = λ₁(noise) − γ and the energy rates are Δt → 0 limits: a config is refused iff the coarsest
    step (T/(L/4), or T/L) times max(the noise's ``fastest_rate``, |γ|) exceeds ``SMALL_STEP``, in one
    error naming model.L and gamma; the L it asks for is accepted."""
    from stochformer.experiments.sync import SMALL_STEP, SyncConfig
    from stochformer.model.kernel import NoiseKernel, fastest_rate

    model = {"gamma": gamma, "sigma_U": sigma_U, "d": d, "T": T, "L": L, "batch": 2}
    kern = NoiseKernel("relu", d, sigma_U, 0.0)
    rate = max(fastest_rate(kern.kappa1, kern.kappa1_prime, d), abs(gamma))
    product = rate * (T / (L // 4 if extrapolate else L))
    try:
        SyncConfig(model=model, extrapolate=extrapolate)
    except ValueError as err:
        text = str(err)
        if "model.L: the coarsest step" not in text:  # another check of the config came first
            assert product <= SMALL_STEP or "fit_from" in text or "near" in text, text
            return
        assert product > SMALL_STEP and f"= {product:.3g} > {SMALL_STEP:g}" in text and "gamma" in text, text
        need = int(re.search(r"raise model.L to at least (\d+)", text).group(1))
        try:
            SyncConfig(model={**model, "L": need}, extrapolate=extrapolate)
        except ValueError as again:
            assert "model.L: the coarsest step" not in str(again), str(again)
    else:
        assert product <= SMALL_STEP


@pytest.mark.parametrize("beta", [sys.float_info.min, 1e-300, 1e-100, 1e-12])  # SyncConfig refuses a subnormal β
@pytest.mark.parametrize("N", [2, 3, 64])
def test_energy_max_is_exact_as_beta_vanishes(beta, N):
    """½(1 − 1/N)(e^β − e^{−β/(N−1)}) = ½(1 − 1/N) β N/(N − 1) (1 + O(β)): positive and exact to
    rounding however small a normal β is (e^β − e^{−b} as differences of expm1), so the rate bound it sets exists."""
    from stochformer.experiments.sync import energy_max

    expected = 0.5 * (1 - 1 / N) * (beta + beta / (N - 1))
    assert energy_max(N, beta) > 0 and math.isclose(energy_max(N, beta), expected, rel_tol=1e-9)
