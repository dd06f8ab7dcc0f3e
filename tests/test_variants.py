"""Attention variants, weight laws and per-layer random attention (SPEC §7)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import solve_ivp

from stochformer.config.build import make_model, make_variant
from stochformer.config import ConfigError, build_config
from stochformer.experiments.simulate import run_simulate as simulate
from stochformer.model.attention import SoftmaxAttention as Attention
from stochformer.model.attention_variants import (
    AveragedAttention, L2Attention, MultiHeadAttention, ResampledAttention, SinkhornAttention,
    UnnormalisedAttention,
)
from stochformer.experiments.variants import (
    ResampledConfig, attention_flow, equiangular_rhs, equiangular_tokens, fit_line, mlp_covariance, run_resampled,
)
from stochformer.model.kernel import NoiseKernel
from stochformer.model.noise import draw_weights
from stochformer.core.runtime import cpu_threads_for, make_generator
from stochformer.core.sphere import normalize

F64 = torch.float64


@pytest.fixture(autouse=True)
def _one_thread():
    """Every tensor here is tiny: one CPU thread (parallel regions cost more than the work)."""
    with cpu_threads_for(0):
        yield


def _tokens(batch=2, N=5, d=4, seed=0):
    g = make_generator(seed)
    return normalize(torch.randn(batch, N, d, generator=g, dtype=F64)), g


def _mats(d, g, k=3):
    return [torch.randn(d, d, generator=g, dtype=F64) / math.sqrt(d) for _ in range(k)]


# --- each variant against a direct, slow computation ------------------------------------------


def _slow(X, weight, value):
    """Σ_j w(i, j) value(x_j) with explicit loops over samples, queries and keys."""
    B, N, d = X.shape
    out = torch.zeros_like(X)
    for b in range(B):
        for i in range(N):
            w = [weight(X[b], i, j) for j in range(N)]
            out[b, i] = sum(w[j] * value(X[b, j]) for j in range(N))
    return out


def test_multihead_against_direct_sum():
    X, g = _tokens(d=6)
    H, dh = 3, 2
    Qs, Ks, Vs = (torch.randn(H, dh, 6, generator=g, dtype=F64) for _ in range(3))
    Os = torch.randn(H, 6, dh, generator=g, dtype=F64)
    got = MultiHeadAttention(Qs, Ks, Vs, Os)(X)
    want = torch.zeros_like(X)
    for h in range(H):
        def w(x, i, j, h=h):
            s = torch.stack([(Qs[h] @ x[i]) @ (Ks[h] @ x[k]) for k in range(x.shape[0])])
            return torch.softmax(s, 0)[j]
        want += _slow(X, w, lambda y, h=h: Os[h] @ (Vs[h] @ y))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_one_head_equals_single_head_model():
    """H = 1, d_h = d, O = I: the softmax attention to 1e-12, directly and through whole runs."""
    X, g = _tokens()
    Q, K, V = _mats(4, g)
    one = MultiHeadAttention.split(Q, K, V, heads=1)
    torch.testing.assert_close(one(X), Attention(A=Q.T @ K, V=V)(X), rtol=0, atol=1e-12)
    base = dict(N=5, d=4, L=8, T=2.0, m=16, batch=3, Q=Q.tolist(), K=K.tolist(), V=V.tolist(), path_stride=1)
    a = simulate(build_config(base)).data["X"].values
    b = simulate(build_config({**base, "attention_kind": "multihead", "heads": 1})).data["X"].values
    assert np.abs(a - b).max() < 1e-12


def test_usa_and_l2_against_direct_sums():
    X, g = _tokens()
    Q, K, V = _mats(4, g)
    usa = UnnormalisedAttention(Q.T @ K, V)(X)
    want = _slow(X, lambda x, i, j: torch.exp((Q @ x[i]) @ (K @ x[j])) / x.shape[0], lambda y: V @ y)
    torch.testing.assert_close(usa, want, rtol=0, atol=1e-12)

    def l2w(x, i, j):
        s = torch.stack([-((Q @ x[i] - K @ x[k]) ** 2).sum() for k in range(x.shape[0])])
        return torch.softmax(s, 0)[j]
    torch.testing.assert_close(L2Attention(Q, K, V)(X), _slow(X, l2w, lambda y: V @ y), rtol=0, atol=1e-12)


def test_l2_default_is_softmax_on_the_sphere():
    X, _ = _tokens()
    cfg = build_config({"d": 4, "beta": 1.7, "gamma": 0.5, "attention_kind": "l2"})
    torch.testing.assert_close(make_variant(cfg)(X), Attention(beta=1.7, gamma=0.5)(X), rtol=0, atol=1e-12)


def test_sinkhorn_doubly_stochastic_and_against_direct_iteration():
    X, g = _tokens(N=6)
    Q, K, V = _mats(4, g)
    A = 3 * Q.T @ K  # sharp scores: many rounds needed
    S = SinkhornAttention(A, V, iters=2000, tol=1e-13).weights(X)
    torch.testing.assert_close(S.sum(-1), torch.ones(2, 6, dtype=F64), rtol=0, atol=1e-12)
    torch.testing.assert_close(S.sum(-2), torch.ones(2, 6, dtype=F64), rtol=0, atol=1e-12)
    # a fixed number of plain (not log-space) alternating normalisations
    S5 = SinkhornAttention(A, V, iters=5).weights(X)
    P = torch.exp(X @ A @ X.transpose(-1, -2))
    for _ in range(5):
        P = P / P.sum(-1, keepdim=True)
        P = P / P.sum(-2, keepdim=True)
    torch.testing.assert_close(S5, P, rtol=0, atol=1e-12)
    out = SinkhornAttention(A, V, iters=5)(X)
    torch.testing.assert_close(out, P @ (X @ V.T), rtol=0, atol=1e-12)


def test_resampled_draws_and_averaged_drift():
    """σ = 0: the resampled attention is the softmax one; a bank of one draw equals that draw."""
    X, _ = _tokens()
    r = ResampledAttention(4, beta=1.5, gamma=-1.0, std=0.0, seed=0)
    torch.testing.assert_close(r(X), Attention(beta=1.5, gamma=-1.0)(X), rtol=0, atol=1e-12)
    r = ResampledAttention(4, beta=1.0, gamma=1.0, std=1.0, seed=3)
    Q, K, V = ResampledAttention(4, 1.0, 1.0, 1.0, seed=3).draw(2, F64, "cpu")
    got = r(X)
    want = torch.stack([Attention(A=Q[b].T @ K[b], V=V[b])(X[b : b + 1])[0] for b in range(2)])
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    avg = AveragedAttention(Q[:1], K[:1], gamma=2.0)
    torch.testing.assert_close(avg(X), 2.0 * Attention(A=Q[0].T @ K[0])(X), rtol=0, atol=1e-12)


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), attn_seed=st.none() | st.integers(0, 2**31 - 1), sde=st.booleans(),
       L=st.integers(1, 6))
def test_a_model_with_resampled_attention_reused_for_a_run_gives_that_runs_numbers(seed, attn_seed, sde, L):
    """The same seed on the same model object gives the same numbers, run after run, and those of a
    fresh model: the resampled attention's draws start again at every run (its ``reset``, from the
    run's attention stream or from a fixed seed); the transformer and the SDE, with their MLP noise."""
    from stochformer.model.noise import ExactField, RandomMLP
    from stochformer.model.sde import LimitSDE
    from stochformer.model.transformer import Transformer
    from stochformer.integrate import SaveAt, solve

    def model():
        attn = ResampledAttention(3, beta=1.0, gamma=0.5, std=1.0, seed=attn_seed)
        if sde:
            return LimitSDE(attn, ExactField(NoiseKernel("relu", 3, 0.0, 0.0)))
        return Transformer(attn, RandomMLP(width=8, sigma_W=0.1))

    X0 = normalize(torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(seed), dtype=F64))
    reused = model()
    runs = [solve(m, X0, 1.0, L, SaveAt(stats=(), final=True), seed=seed)["X_final"].values for m in (reused, reused, model())]
    np.testing.assert_array_equal(runs[0], runs[1])
    np.testing.assert_array_equal(runs[0], runs[2])


def test_random_attentions_are_reset_by_their_protocol_and_keep_the_noise_draws():
    """The attentions that draw are `RandomAttention`s (reset at every run), the deterministic
    ones are not; a resampled attention leaves the run's generator to the noise: the MLP's draws of
    a run with it are those of a run with the averaged drift (the resampled experiment's coupling),
    so with σ = 0 (no randomness left in Q, K, V) the two runs agree to rounding."""
    from stochformer.model.attention import RandomAttention, RandomBatchAttention
    from stochformer.model.noise import RandomMLP
    from stochformer.model.transformer import Transformer
    from stochformer.integrate import SaveAt, solve

    assert isinstance(ResampledAttention(3, 1.0, 1.0, 1.0), RandomAttention)
    assert isinstance(RandomBatchAttention(Attention(beta=1.0, gamma=1.0), 2), RandomAttention)
    assert not isinstance(Attention(beta=1.0, gamma=1.0), RandomAttention)
    assert not isinstance(AveragedAttention.from_law(3, 1.0, 1.0, 1.0, 2, 0), RandomAttention)
    X0 = normalize(torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(1), dtype=F64))
    runs = [solve(Transformer(att, RandomMLP(width=8)), X0, 1.0, 4, SaveAt(stats=()), seed=2)["X_final"].values
            for att in (ResampledAttention(3, 1.0, 0.5, 0.0), Attention(beta=1.0, gamma=0.5))]
    np.testing.assert_allclose(runs[0], runs[1], rtol=0, atol=1e-12)


@settings(max_examples=10, deadline=None)
@given(seeds=st.lists(st.integers(0, 2**63 - 1), min_size=2, max_size=2, unique=True), std=st.floats(0.0, 2.0),
       sde=st.booleans(), L=st.integers(1, 4))
def test_a_resampled_attention_leaves_the_runs_generator_to_the_noise(seeds, std, sde, L):
    """Whatever σ, a run with the resampled attention draws from the run's generator exactly what
    the same run with the averaged drift draws (the generator ends in the same state), so the
    noise's draws (MLP weights, field normals) of the two are the same: the resampled experiment's
    path-by-path coupling. Its Q, K, V come from the run's attention stream."""
    from stochformer.model.noise import ExactField, RandomMLP
    from stochformer.model.sde import LimitSDE
    from stochformer.model.transformer import Transformer
    from stochformer.integrate import SaveAt, solve

    X0 = normalize(torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(seeds[1] % 2**32), dtype=F64))
    ends = []
    for att in (ResampledAttention(3, 1.0, 0.5, std), AveragedAttention.from_law(3, 1.0, 0.5, std, 2, 0)):
        model = LimitSDE(att, ExactField(NoiseKernel("relu", 3, 0.0, 0.0))) if sde else Transformer(att, RandomMLP(width=8))
        g = make_generator(seeds[0])
        solve(model, X0, 1.0, L, SaveAt(stats=(), final=True), generator=g)
        ends.append(g.get_state())
    assert torch.equal(ends[0], ends[1])


@settings(max_examples=10, deadline=None)
@given(seeds=st.lists(st.integers(0, 2**63 - 1), min_size=2, max_size=2, unique=True), L=st.integers(1, 4))
def test_runs_of_one_resampled_model_with_other_seeds_draw_other_attention(seeds, L):
    """One model object run with two seeds draws two different sequences of Q, K, V (the run's
    attention stream): a Monte Carlo over run seeds is over independent attention draws. Without
    noise the final tokens depend on the seed only through the attention, so they differ; with a
    fixed ``seed`` on the attention they are equal."""
    from stochformer.model.transformer import Transformer
    from stochformer.integrate import SaveAt, solve

    X0 = normalize(torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(L), dtype=F64))
    from stochformer.experiments.variants import AttentionFlow

    for fixed in (None, 5):
        for model in (Transformer(ResampledAttention(3, 1.0, 1.0, 1.0, seed=fixed), None),
                      AttentionFlow(ResampledAttention(3, 1.0, 1.0, 1.0, seed=fixed))):
            runs = [solve(model, X0, 1.0, L, SaveAt(stats=(), final=True), seed=s)["X_final"].values for s in seeds]
            assert np.array_equal(runs[0], runs[1]) == (fixed is not None), type(model).__name__
            # a run given a generator in place of the seed: the stream of the seed it was started with
            given = solve(model, X0, 1.0, L, SaveAt(stats=(), final=True), generator=make_generator(seeds[0]))
            np.testing.assert_array_equal(given["X_final"].values, runs[0])


def test_a_resampled_attention_outside_a_run_needs_a_seed():
    """Called without a run (no ``reset``) and without a fixed seed it has no draws: one error."""
    X, _ = _tokens()
    with pytest.raises(RuntimeError, match="ResampledAttention: no draws"):
        ResampledAttention(4, 1.0, 1.0, 1.0)(X)


@pytest.mark.parametrize("kind", ["multihead", "usa", "l2", "sinkhorn", "averaged"])
def test_every_variant_runs_in_transformer_and_sde(kind):
    for dyn in ("transformer", "sde"):
        cfg = build_config({"N": 4, "d": 4, "L": 5, "T": 1.0, "m": 8, "batch": 2, "attention_kind": kind,
                            "heads": 2, "dynamics": dyn, "attention_draws": 4})
        res = simulate(cfg)
        assert np.all(np.isfinite(res.data["X_final"].values))
        assert np.abs(np.linalg.norm(res.data["X_final"].values, axis=-1) - 1).max() < 1e-12
    # the many-token particle solver takes the variant too
    from stochformer.config.build import make_field, make_particles

    stepper = make_particles(cfg, make_field(cfg, 1, make_generator(0)), cfg.N)
    assert type(stepper.attention) is type(make_variant(cfg))


def test_variant_config_errors():
    with pytest.raises(ConfigError, match="heads"):
        build_config({"d": 4, "attention_kind": "multihead", "heads": 3})
    with pytest.raises(ConfigError, match="attention_kind"):
        build_config({"attention_kind": "resampled", "dynamics": "sde"})
    with pytest.raises(ConfigError, match="student_nu"):
        build_config({"weight_law": "student_t", "student_nu": 4.0})
    with pytest.raises(ConfigError, match="weight_law"):
        build_config({"weight_law": "rademacher", "noise": "mlp_gaussian"})


# --- deterministic flows (SPEC §7) -------------------------------------------------------------


@pytest.mark.parametrize("kind", ["softmax", "usa"])
def test_equiangular_tokens_follow_the_ode(kind):
    """n = 4 ≤ d = 5 tokens at ρ₀ = 0.1, β = 1, Q = K = V = I: the noiseless Heun integrator
    (second order) keeps them equiangular and on the ODE's ρ(t) to 1e-5 with Δt = 0.005."""
    n, d, beta, T, L = 4, 5, 1.0, 2.0, 400
    cfg = build_config({"N": n, "d": d, "L": L, "T": T, "beta": beta, "mlp": False, "dynamics": "sde",
                        "attention_kind": kind})
    stepper = make_model(cfg)
    X = equiangular_tokens(n, d, 0.1)
    sol = solve_ivp(lambda t, r: [equiangular_rhs(kind, beta, n)(r[0])], (0, T), [0.1], rtol=1e-12, atol=1e-14,
                    t_eval=np.linspace(0, T, L + 1))
    iu = torch.triu_indices(n, n, 1)
    worst_spread = worst_err = 0.0
    for s in range(1, L + 1):
        X = stepper.step(X, cfg.dt, None)
        c = (X @ X.transpose(-1, -2))[0, iu[0], iu[1]]
        worst_spread = max(worst_spread, float(c.max() - c.min()))
        worst_err = max(worst_err, abs(float(c.mean()) - sol.y[0, s]))
    assert worst_spread < 1e-12
    assert worst_err < 1e-5
    # a wrong ODE (USA's for softmax and conversely) is far off
    other = "usa" if kind == "softmax" else "softmax"
    wrong = solve_ivp(lambda t, r: [equiangular_rhs(other, beta, n)(r[0])], (0, T), [0.1], rtol=1e-10)
    assert abs(wrong.y[0, -1] - sol.y[0, -1]) > 1e-2


def test_post_ln_exponential_pre_ln_power_law():
    """Softmax, β = 1, 3 tokens in d = 3 from ρ₀ = 0: post-LN log(1 − ρ) has slope −2 in t (fit on
    t ∈ [3, 8]); pre-LN log(1 − ρ) has slope −2 in log t (fit on t ∈ [50, 200]); intervals from the
    least-squares residuals, allowances 0.05 for the steps (Δt = 0.01, 0.1) and the finite t."""
    X0 = equiangular_tokens(3, 3, 0.0)
    att = Attention(beta=1.0)
    t, c, spread = attention_flow(X0, att, 0.01, 800, "post", every=10)
    sel = (t >= 3) & (t <= 8)
    post = fit_line(t[sel], np.log(1 - c[0, sel]))
    assert post.ci[0] - 0.05 <= -2.0 <= post.ci[1] + 0.05 and spread.max() < 1e-12
    t, c, _ = attention_flow(X0, att, 0.1, 2000, "pre", every=50)
    sel = t >= 50
    pre = fit_line(np.log(t[sel]), np.log(1 - c[0, sel]))
    assert pre.ci[0] - 0.05 <= -2.0 <= pre.ci[1] + 0.05
    # the two laws are told apart: pre-LN is not exponential at rate 2 over the same window
    assert fit_line(t[sel], np.log(1 - c[0, sel])).slope > -0.1


# --- weight laws --------------------------------------------------------------------------------


@pytest.mark.parametrize("law", ["gaussian", "rademacher", "uniform", "student_t"])
def test_weight_laws_unit_variance(law):
    g = make_generator(1)
    w = draw_weights((200_000,), g, torch.zeros(1, dtype=F64), law, 6.0)
    fourth = {"gaussian": 3.0, "rademacher": 1.0, "uniform": 1.8, "student_t": 3 * 4 / 2}[law]
    se = math.sqrt((fourth - 1) / w.numel())
    assert abs(float(w.mean())) < 5 / math.sqrt(w.numel())
    assert abs(float((w * w).mean()) - 1) <= 5 * se  # exact for Rademacher (w² = 1)


@pytest.mark.parametrize("law", ["gaussian", "rademacher", "uniform", "student_t"])
def test_mlp_covariance_is_kappa_for_every_law(law):
    """ReLU, d = 64, σ_U = σ_W = 0.3, m = 1024: E⟨G(x), G(y)⟩/d at a delocalised pair (cosine 0.5,
    every coordinate ±1/√d-sized) matches κ(0.5) within 4.5 SE (the departure of the inner weights'
    pre-activation from Gaussian is O(1/d) and below the SE here)."""
    d = 64
    g = make_generator(2)
    x = normalize(torch.sign(torch.randn(d, generator=g, dtype=F64)))
    z = normalize(torch.sign(torch.randn(d, generator=g, dtype=F64)))
    z = normalize(z - (z @ x) * x)
    y = 0.5 * x + math.sqrt(0.75) * z
    mean, se = mlp_covariance(x, y, law, "relu", m=1024, draws=32, sigma_U=0.3, sigma_W=0.3, seed=3)
    kappa = float(NoiseKernel("relu", d, 0.3, 0.3).kappa(float(x @ y)))
    assert abs(mean - kappa) < 4.5 * se, (mean, kappa, se)


def test_rademacher_inner_weights_change_the_kernel_at_small_d():
    """d = 2, x = e₁, y = (e₁ + e₂)/√2, ReLU, no biases: Rademacher inner weights give
    E relu(u₁/√2) relu((u₁ + u₂)/2) = 1/(4√2) exactly (four sign patterns), not κ(1/√2) ≈ 0.1888:
    the measured covariance (mean over the outer weights taken exactly) matches the first within
    4.5 SE and is > 5 SE from κ."""
    x = torch.tensor([1.0, 0.0], dtype=F64)
    y = torch.tensor([1.0, 1.0], dtype=F64) / math.sqrt(2)
    mean, se = mlp_covariance(x, y, "rademacher", "relu", m=4096, draws=64, seed=4, conditional=True)
    exact = 1 / (4 * math.sqrt(2))
    kappa = float(NoiseKernel("relu", 2).kappa(1 / math.sqrt(2)))
    assert abs(mean - exact) < 4.5 * se
    assert abs(mean - kappa) > 5 * se


# --- per-layer random attention -----------------------------------------------------------------


def test_resampled_attention_approaches_averaged_drift():
    """No MLP, d = 4, N = 6, β = γ = σ = 1, T = 2: the paired difference of the final mean cosine
    between per-layer random attention at depth L and the averaged-drift model shrinks with L;
    at L = 64 it is within 4.5 SE (+ 0.01 for the Monte Carlo bank of 128 draws) of 0."""
    cfg = ResampledConfig(model=dict(N=5, d=4, T=2.0, mlp=False, batch=32, attention_draws=128, seed=5), depths=[4, 64])
    res = run_resampled(cfg)
    rows = {r["L"]: r for r in res.differences()}
    assert rows[64]["sq_error"] < rows[4]["sq_error"] / 4
    assert abs(rows[64]["diff"]) < 4.5 * rows[64]["diff_se"] + 0.01


# --- the report's verdict rules fail on wrong models ------------------------------------------------


def test_variants_rows_hold_and_fail_on_wrong_numbers():
    """The variants section's rows hold on a tiny run (except possibly the statistical ones at this
    size) and each kind of rule fails when the measured number is that of a wrong model."""
    import copy

    from stochformer.experiments.variants import VariantsConfig, run_variants
    from stochformer.report.sections.variants import variants_rows
    from stochformer.measure.verdict import FAILS, HOLDS

    cfg = VariantsConfig(flow_steps=40, law_d=16, law_m=64, law_draws=8, depths=[2, 8], samples=8, attention_draws=16)
    numbers = run_variants(cfg).to_dict()
    rows = {r.quantity.split(":")[0]: r for r in variants_rows(numbers, cfg.beta, cfg.flow_steps)}
    for key in ("multi-head, H = 1, d_h = d, O = I", "Sinkhorn", "softmax post-LN", "softmax pre-LN"):
        assert rows[key].verdict == HOLDS, rows[key]
    wrong = copy.deepcopy(numbers)
    wrong["one_head_max_diff"] = 1e-6                                  # heads not summed correctly
    wrong["sinkhorn_max_sum_error"] = 1e-3                             # stopped early
    wrong["equiangular"]["softmax"]["max_error"] = 1e-2                # wrong ODE
    wrong["normalisation"]["pre"]["slope"] = {"value": -1.0, "ci": [-1.01, -0.99]}  # 1/t instead of 1/t²
    wrong["weight_laws"]["laws"]["rademacher"] = [wrong["weight_laws"]["kappa"] * 1.5, 1e-4]
    wrong["resampled"]["rows"][-1].update(diff=0.3, diff_se=0.01)     # not the averaged drift
    bad = {r.quantity.split(":")[0]: r for r in variants_rows(wrong, cfg.beta, cfg.flow_steps)}
    for key in ("multi-head, H = 1, d_h = d, O = I", "Sinkhorn", "equiangular tokens (softmax)", "softmax pre-LN",
                "MLP covariance, rademacher weights, d = 16, cosine 0.50",
                "per-layer random attention, L = 8"):
        assert bad[key].verdict == FAILS, bad[key]
