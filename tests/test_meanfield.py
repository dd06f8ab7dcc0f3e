"""The many-token particle solver: memory-linear attention and field, shared fields, large-N
diagnostics, distances between empirical measures and the fitting helpers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from stochformer.config.build import make_field, make_particles
from stochformer.config import RunConfig
from stochformer.measure.diagnostics import cloud_summary, energy, mean_cosine, mean_token
from stochformer.measure.distances import rate_function, sphere_rate, w2_exact, w2_sliced
from stochformer.model.attention import SoftmaxAttention, query_chunk
from stochformer.integrate import SaveAt, solve
from stochformer.core.sphere import uniform
from stochformer.measure.stats import fit_power_law, tagged_correlation


def _cloud(batch, N, d, seed=0):
    return uniform(batch, N, d, generator=torch.Generator().manual_seed(seed))


def evolve_particles(X0, model, L, noise_seed, record_steps=()):
    """The final state and the states at ``record_steps`` of the particle system (T = 0.5)."""
    ds = solve(model, X0, 0.5, L, SaveAt(stats=(), tokens_at=record_steps or None), seed=noise_seed)
    saved = list(torch.from_numpy(ds["X"].values).unbind(1)) if record_steps else []
    return torch.from_numpy(ds["X_final"].values), saved


def _cfg(**kw) -> RunConfig:
    base = dict(dynamics="sde", noise="random_features", features=64, d=3, T=0.5, L=10)
    return RunConfig(**{**base, **kw})


@pytest.mark.parametrize("explicit", [False, True])
def test_chunked_and_sdpa_attention_equal_dense(explicit):
    g = torch.Generator().manual_seed(1)
    X, keys = _cloud(3, 37, 5), _cloud(3, 53, 5, seed=2)
    kw = dict(A=torch.randn(5, 5, generator=g, dtype=torch.float64), V=torch.randn(5, 5, generator=g, dtype=torch.float64)) if explicit else dict(beta=2.5, gamma=-0.7)
    dense = SoftmaxAttention(**kw)
    for other in (SoftmaxAttention(chunk=4, **kw), SoftmaxAttention(chunk=1, **kw), SoftmaxAttention(sdpa=True, **kw)):
        for k in (None, keys):
            ref, got = dense(X, keys=k), other(X, keys=k)
            assert got.shape == ref.shape
            assert torch.max(torch.abs(got - ref)).item() < 1e-12


@pytest.mark.parametrize("beta", [2.0, 500.0])
def test_chunked_attention_shift_and_row_max_paths(beta):
    """The chunked path shifts scores by the Cauchy–Schwarz bound |q_i| max|k_j| instead of the row
    maximum; at β = 500 (2β = 1000 > log(1/tiny)) it falls back to the row maximum. Both equal
    the dense softmax to 1e-12 (float64) and 1e-5 (float32), with chunks above and below the CPU
    row tile and a partial last chunk."""
    X = _cloud(2, 150, 4)
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
        Xd = X.to(dtype)
        ref = SoftmaxAttention(beta=beta)(Xd)
        for chunk in (100, 7):
            assert torch.max(torch.abs(SoftmaxAttention(beta=beta, chunk=chunk)(Xd) - ref)).item() < tol


def test_query_chunk_bounds_block():
    assert query_chunk(10, block=1 << 10) == 10
    assert query_chunk(4096, block=1 << 20) == 256
    assert query_chunk(10**7, block=1 << 20) == 1
    for N in (17, 1000, 12345):
        assert query_chunk(N, 4096) * N <= max(4096, N)


def test_large_N_uses_chunked_blocks(monkeypatch):
    """For N = 1000 and a 10⁵-entry block, no softmax sees more than one block per sample and
    the field evaluates features on at most token_chunk tokens at a time."""
    N, block = 1000, 100_000
    cfg = _cfg(features=32)
    fld = make_field(cfg, 1, torch.Generator().manual_seed(0), token_chunk=256)
    model = make_particles(cfg, fld, N, block=block, sdpa=False)
    assert model.attention.chunk == query_chunk(N, block) == 100
    softmax_shapes, feature_shapes = [], []
    real_softmax, real_features = torch.softmax, fld._features_t
    monkeypatch.setattr(torch, "softmax", lambda x, dim: softmax_shapes.append(tuple(x.shape)) or real_softmax(x, dim=dim))
    monkeypatch.setattr(fld, "_features_t", lambda X, fields, out=None: feature_shapes.append(tuple(X.shape))
                        or real_features(X, fields, out))
    X = _cloud(1, N, 3)
    model.step(X, cfg.dt, torch.Generator().manual_seed(1))
    # one step = one or more attention evaluations (integrator-dependent), each N/chunk blocks
    assert len(softmax_shapes) % (N // 100) == 0 and all(s[-2] * s[-1] <= block for s in softmax_shapes)
    assert len(feature_shapes) == -(-N // 256) and all(s[-2] <= 256 for s in feature_shapes)


def test_blocked_energy_and_summary_match_dense():
    X = _cloud(2, 301, 4)
    assert torch.allclose(energy(X, 1.5, chunk=7), energy(X, 1.5), rtol=1e-13, atol=1e-15)
    s = cloud_summary(X, beta=1.5, block=1024)
    assert torch.allclose(s["energy"], energy(X, 1.5), rtol=1e-13, atol=1e-15)
    # |mean token|² = (1/N²) Σ_ij ⟨x_i, x_j⟩ = (N(N−1) mean_cosine + N)/N²
    N = X.shape[1]
    assert torch.allclose(s["mean_token_norm"] ** 2, (N * (N - 1) * mean_cosine(X) + N) / N**2, rtol=1e-12)
    assert torch.equal(s["mean_token"], mean_token(X))


def test_shared_field_is_a_function_of_position():
    """Without attention the tokens do not interact: a subsystem of the first n tokens driven by
    the same field and seed follows the reference's first n tokens exactly."""
    cfg = _cfg(attention=False)
    fld = make_field(cfg, 1, torch.Generator().manual_seed(3))
    X0 = _cloud(1, 200, 3)
    ref, _ = evolve_particles(X0, make_particles(cfg, fld, 200), cfg.L, noise_seed=11)
    sub, _ = evolve_particles(X0[:, :30].clone(), make_particles(cfg, fld, 30), cfg.L, noise_seed=11)
    assert torch.max(torch.abs(sub - ref[:, :30])).item() < 1e-13
    other, _ = evolve_particles(X0[:, :30].clone(), make_particles(cfg, fld, 30), cfg.L, noise_seed=12)
    assert torch.max(torch.abs(other - ref[:, :30])).item() > 1e-3


def test_one_field_broadcasts_over_independent_clouds():
    """A field drawn once (batch 1) drives B clouds: cloud b sees the same increment as when run alone."""
    cfg = _cfg()
    fld = make_field(cfg, 1, torch.Generator().manual_seed(0))
    X = _cloud(4, 9, 3)
    both = fld.increment(X, 0.1, torch.Generator().manual_seed(5))
    alone = fld.increment(X[2:3], 0.1, torch.Generator().manual_seed(5))
    assert torch.max(torch.abs(both[2:3] - alone)).item() < 1e-14
    with pytest.raises(ValueError, match="batch"):
        make_field(cfg, 2, torch.Generator().manual_seed(0)).increment(X, 0.1, torch.Generator())


def test_particles_stay_on_sphere_and_reproducible():
    cfg = _cfg(features=16)
    runs = []
    for _ in range(2):
        fld = make_field(cfg, 2, torch.Generator().manual_seed(4))
        X, saved = evolve_particles(_cloud(2, 50, 3), make_particles(cfg, fld, 50, block=1024), cfg.L, 9, [0, 5, 10])
        runs.append(X)
    assert torch.equal(runs[0], runs[1]) and len(saved) == 3
    assert torch.allclose(torch.linalg.vector_norm(X, dim=-1), torch.ones(2, 50, dtype=X.dtype), atol=1e-14)


def test_w2_exact_translation_and_sliced():
    """W₂² between a cloud and its translate by v is |v|² (translation is optimal for the squared
    Euclidean cost); the sliced W₂² of a translate is E⟨θ, v⟩² = |v|²/d over uniform directions θ."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    v = np.array([0.3, -0.2, 0.1])
    r = w2_exact(X, X + v)
    assert r.method == "exact" and r.warning is None
    assert abs(r.value - v @ v) < 1e-10
    s = w2_sliced(X, X + v, projections=4000, seed=0)
    # each projection gives ⟨θ, v⟩² = |v|² c² exactly (c = cos of the angle to v, uniform in [−1, 1]
    # for d = 3): E c² = 1/3, Var c² = 1/5 − 1/9, so the SE of the mean over 4000 directions is:
    sd = np.sqrt((1 / 5 - 1 / 9) / 4000)
    assert abs(s.value / (v @ v) - 1 / 3) < 5 * sd
    capped = w2_exact(X, rng.normal(size=(300, 3)), max_iter=5)
    assert capped.warning is not None


def test_rate_function_regimes():
    N = np.array([10.0, 100.0])
    assert np.allclose(rate_function(3, N), N**-0.5)
    assert np.allclose(rate_function(4, N), N**-0.5 * np.log1p(N))
    assert np.allclose(rate_function(8, N), N**-0.25)
    assert np.allclose(sphere_rate(2, N), 1 / N)
    assert np.allclose(sphere_rate(3, N), np.log1p(N) / N)
    assert np.allclose(sphere_rate(6, N), N**-0.4)


def test_fit_power_law_recovers_exponent():
    """Samples y_s(N) = N^{-1} · exp(0.3 ξ_s(N)), ξ i.i.d. normal: the fitted exponent's 95%
    interval covers 1 (seeded; the interval width is ≈ 0.1 here)."""
    rng = np.random.default_rng(7)
    N = np.array([16, 32, 64, 128, 256.0])
    y = N**-1.0 * np.exp(0.3 * rng.standard_normal((40, 5)))
    fit = fit_power_law(N, y, n_boot=500, seed=1)
    assert fit.ci[0] < 1.0 < fit.ci[1]
    assert fit.ci[1] - fit.ci[0] < 0.3


def test_tagged_correlation_known_answer():
    """Pearson-type correlation of (A, ρA + √(1−ρ²)Z) is ρ; the estimate is within 4.5 SE (the
    delta-method SE is exact at ρ = 0, and is checked there)."""
    g = torch.Generator().manual_seed(0)
    A, Z = torch.randn(20000, 3, generator=g, dtype=torch.float64), torch.randn(20000, 3, generator=g, dtype=torch.float64)
    rho, se = tagged_correlation(A, Z)
    # independent standard normals in R³: Var⟨Ã, B̃⟩ = 3, denominator 3, so SE = 1/√(3R)
    assert abs(rho) < 4.5 * se and abs(se * np.sqrt(3 * 20000) - 1) < 0.05
    rho, se = tagged_correlation(A, 0.5 * A + np.sqrt(0.75) * Z)
    assert abs(rho - 0.5) < 4.5 * se


def test_particle_stepper_rejects_transformer():
    with pytest.raises(ValueError, match="dynamics"):
        make_particles(_cfg(dynamics="transformer"), None, 10)
