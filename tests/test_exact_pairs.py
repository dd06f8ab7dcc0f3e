"""The pair diffusion's exact laws against simulated pairs extrapolated in Δt
(experiments.exact.extrapolated_pair_means; benchmarks/exact_pairs.py runs the same at 10⁵ pairs):
P(z_T < 0) across β*, the stationary law, the sync time (experiments.exact.sync_time_runs) and the energy
of a pair with attention (experiments.exact.extrapolated_energy), each beside a wrong prediction that is rejected."""

from __future__ import annotations

import pytest

from stochformer.config.build import make_kernel
from stochformer.experiments.exact import ExactConfig, extrapolated_energy, extrapolated_pair_means, sync_time_runs
from stochformer.theory import PairDiffusion, expected_energy, law

Z_MAX = 4.5  # |extrapolated − predicted| < Z_MAX SE


def _config(dynamics: str, pairs: int, **model) -> ExactConfig:
    extra = {"m": 64} if dynamics == "transformer" else {}
    return ExactConfig.model_validate({"model": {"dynamics": dynamics, "batch": pairs, **extra, **model}, "z0": 0.0})


def _below(z):
    return (z < 0).astype(float)


#: (dynamics, pairs, finest steps): the suite's size; benchmarks/exact_pairs.py runs the same checks at 10⁵ pairs on
#: the SDE and the transformer with twice the steps (docs/theory.md quotes its numbers; its smallest size is a smoke test)
SIZES = [("sde", 3000, 1)]


@pytest.mark.parametrize("dynamics, pairs, refine", SIZES)
def test_p_below_zero_across_beta_star_is_the_exact_law_at_t(dynamics, pairs, refine):
    """erf, d = 4, γ = 1 (β* = 1.066), β = 2 > β*, z0 = 0, T = 2: P(z_T < 0) from L = 40 and 20 steps (80 and 40 at 10⁵ pairs),
    extrapolated, against the exact law at T (0.2906); the pair without attention (½) and P(antipodal)
    (0.139, the T = ∞ limit) are rejected."""
    cfg = _config(dynamics, pairs, T=2.0, L=40 * refine)
    kern = make_kernel(cfg.model)
    m = extrapolated_pair_means(cfg, 2.0, {"below": _below}, seed=3)["below"]
    pair = PairDiffusion(kern, 2.0, 1.0)
    assert abs(m["value"] - law(pair, 0.0, 2.0).cdf(0.0)) < Z_MAX * m["se"], m
    for wrong in (law(PairDiffusion(kern, 1.0, 0.0), 0.0, 2.0).cdf(0.0), pair.p_antipodal(0.0)):
        assert abs(m["value"] - wrong) > Z_MAX * m["se"], (wrong, m)


@pytest.mark.parametrize("dynamics, pairs, refine", SIZES)
def test_stationary_law_of_a_repulsive_pair_with_biases(dynamics, pairs, refine):
    """ReLU, d = 4, σ_U = σ_W = 0.5, v = −2 (positive recurrent): E z_T and E z_T² at T = 4 from z0 = 0,
    extrapolated from L = 80 and 40 steps (160 and 80 at 10⁵ pairs), against the stationary law's moments; the stationary law at
    v = −1 is rejected."""
    cfg = _config(dynamics, pairs, T=4.0, L=80 * refine, activation="relu", sigma_U=0.5, sigma_W=0.5, gamma=-2.0)
    kern = make_kernel(cfg.model)
    m = extrapolated_pair_means(cfg, 1.0, {"mean": lambda z: z, "second": lambda z: z * z}, seed=4)
    for st, holds in ((PairDiffusion(kern, 1.0, -2.0).stationary(), True), (PairDiffusion(kern, 1.0, -1.0).stationary(), False)):
        for key, predicted in (("mean", st.mean), ("second", st.sd**2 + st.mean**2)):
            assert (abs(m[key]["value"] - predicted) < Z_MAX * m[key]["se"]) == holds, (key, predicted, m[key])


def _variance(r):
    a = r[:, 0].mean()
    return r[:, 1] - 2 * a * r[:, 0] + a * a  # mean: the sample variance; SE: the delta method's


@pytest.mark.parametrize("dynamics, pairs, refine", SIZES)
def test_sync_time_mean_and_sd_are_the_exact_moments(dynamics, pairs, refine):
    """ReLU, d = 4, σ_U = σ_W = 0.5, β = 1, v = 1: τ to z ≥ 0.9 from z0 = 0 (E τ = 0.974, sd 0.565) from
    L = 480 and 240 steps to the horizon T = 6, extrapolated (as benchmarks/exact_pairs.py at 10⁵ pairs); the pair
    without attention (1.733, 1.201) is rejected and the pairs still below the level at T are a negligible fraction."""
    cfg = _config(dynamics, pairs, T=6.0, L=480 * refine, activation="relu", sigma_U=0.5, sigma_W=0.5, gamma=1.0)
    kern = make_kernel(cfg.model)
    m = extrapolated_pair_means(cfg, 1.0, {"mean": lambda r: r[:, 0], "var": _variance, "alive": lambda r: r[:, 2]}, seed=7,
                                runs=lambda c, b, s: sync_time_runs(c, b, s, 0.1))
    exact, wrong = PairDiffusion(kern, 1.0, 1.0).sync_time(0.0, 0.1), PairDiffusion(kern, 1.0, 0.0).sync_time(0.0, 0.1)
    assert max(level[1] for level in m["alive"]["by_level"]) < 1e-3
    for key, ours, theirs in (("mean", exact.mean, wrong.mean), ("var", exact.sd**2, wrong.sd**2)):
        assert abs(m[key]["value"] - ours) < Z_MAX * m[key]["se"], (key, ours, m[key])
        assert abs(m[key]["value"] - theirs) > Z_MAX * m[key]["se"], (key, theirs, m[key])


def test_sync_time_runs_moments_are_consistent_and_the_level_is_checked():
    cfg = _config("sde", 200, T=1.0, L=20, activation="relu", sigma_U=0.5, sigma_W=0.5, gamma=1.0)
    r = sync_time_runs(cfg, 1.0, 0, 0.1)
    assert r.shape == (200, 3) and ((r[:, 2] >= 0) & (r[:, 2] <= 1)).all()
    assert ((r[:, 0] > 0) & (r[:, 0] <= 1.0 + 1e-12)).all()  # E[τ ∧ T | steps] ∈ (0, T]
    assert ((r[:, 1] >= 0) & (r[:, 1] <= 2 * 1.0 * r[:, 0] + 1e-12)).all()  # ∫ 2t q dt ∈ [0, 2T ∫ q dt]
    assert (r[:, 0] >= 1.0 * r[:, 2] - 1e-12).all()  # q is non-increasing: ∫_0^T q >= T q(T)
    with pytest.raises(ValueError, match="eps: must lie in"):
        sync_time_runs(cfg, 1.0, 0, 1.5)  # z0 = 0 above the level −0.5


@pytest.mark.parametrize("dynamics, pairs", [("sde", 3000)])
def test_energy_of_a_pair_with_attention_is_exact(dynamics, pairs):
    """ReLU, d = 4, σ_U = σ_W = 0.5, β = 1, v = 1, N = 2 from uniform tokens: E[E_β(μ_t)] at t = 1 and 2 from
    L = 80 and 40 steps to T = 2, extrapolated, against `expected_energy`; the pair without attention is rejected."""
    run = _config(dynamics, pairs, T=2.0, L=80, activation="relu", sigma_U=0.5, sigma_W=0.5, gamma=1.0).model.with_updates(N=2)
    times, mean, se, stats, values = extrapolated_energy(run, 40, 1.0, seed=8)
    assert len(stats) == 2 and values.shape == (pairs, 3)
    kern = make_kernel(run)
    exact = expected_energy(PairDiffusion(kern, 1.0, 1.0), times, 2, 1.0)
    wrong = expected_energy(PairDiffusion(kern, 1.0, 0.0), times, 2, 1.0)
    assert (abs(mean - exact) < Z_MAX * se).all(), (mean, exact, se)
    assert (abs(mean - wrong)[1:] > Z_MAX * se[1:]).all(), (mean, wrong, se)
    with pytest.raises(ValueError, match="levels: 1 or 2"):
        extrapolated_energy(run.with_updates(L=81), 40, 1.0, seed=0)


def test_levels_are_checked():
    with pytest.raises(ValueError, match="levels: 2 or 3"):
        extrapolated_pair_means(_config("sde", 10, L=6), 1.0, {"below": _below}, seed=0, levels=3)


@pytest.mark.slow
def test_chaotic_side_has_the_stationary_overlap_law_and_no_synchronisation():
    """erf, d = 4, no biases, gain g = 20 > g_c = 8.007, no attention: pairs started at z0 = 0.9 do not
    synchronise; E z_T² and P(|z_T| > 0.9) at T = 12 (1000 pairs, L = 960 and 480: near the ends the step
    needs κ'Δt small, κ' = 6.36) against the stationary law (0.6325, 0.4587; the exact law at T is within
    10⁻³ of it); the synchronising pair without the gain (g = 1: 0.9125, 0.8712) is rejected.
    benchmarks/exact_pairs.py --parts chaos runs it at 20 000 pairs (docs/theory.md)."""
    from scipy.integrate import quad

    from stochformer.model.kernel import NoiseKernel, critical_gain

    gc = critical_gain(NoiseKernel("erf", 4))
    assert gc is not None and 20.0 > 2 * gc
    cfg = ExactConfig.model_validate({"model": {"dynamics": "sde", "batch": 1000, "T": 12.0, "L": 960, "gain": 20.0,
                                                "gamma": 0.0}, "z0": 0.9})
    m = extrapolated_pair_means(cfg, 1.0, {"second": lambda z: z * z, "tails": lambda z: (abs(z) > 0.9).astype(float)}, seed=6)
    chaotic = PairDiffusion(make_kernel(cfg.model), 1.0, 0.0)
    st = chaotic.stationary()
    assert st.exists and chaotic.diagonal.kind == "repelling"
    tails = quad(st.pdf, 0.9, 1.0, limit=200)[0] + quad(st.pdf, -1.0, -0.9, limit=200)[0]
    tame = law(PairDiffusion(NoiseKernel("erf", 4), 1.0, 0.0), 0.9, 12.0)
    for key, predicted, wrong in (("second", st.sd**2 + st.mean**2, None), ("tails", tails, tame.cdf(-0.9) + 1 - tame.cdf(0.9))):
        assert abs(m[key]["value"] - predicted) < Z_MAX * m[key]["se"], (key, predicted, m[key])
        if wrong is not None:
            assert abs(m[key]["value"] - wrong) > Z_MAX * m[key]["se"]
    assert m["second"]["value"] < 0.8  # far from synchronised (E z² → 1 on the ordered side)
