"""The statistics of the experiments against direct implementations: the power-law fits with their
bootstrap intervals (same seed, same resamples), the tagged-token correlation and its standard
error, the rate functions and the choice between exact and sliced W₂²; exactly: mean and SE along any
axis, exact W₂ against the best matching and POT's iteration cap, the weighted power fit against
its construction, and every statistic computed in float64 whatever its input's dtype."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stochformer.measure.distances import rate_function, sphere_rate, w2_exact, w2_sliced, w2_squared
from stochformer.measure.stats import (
    PowerFit, bootstrap, fit_power_law, fit_power_law_weighted, interval, loglog_slope, tagged_correlation,
)
from stochformer.core.extras import MissingExtraError
from stochformer.measure.stats import mean_and_se

from conftest import TOL, close

N = np.array([8, 16, 32, 64])


def slope(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares line through (x, log y): slope and intercept."""
    ly = np.log(y)
    b = float(np.sum((x - x.mean()) * (ly - ly.mean())) / np.sum((x - x.mean()) ** 2))
    return b, float(ly.mean() - b * x.mean())


def _row_fit(samples: np.ndarray, n_boot: int, seed: int) -> tuple[float, float, float]:
    """By hand: the exponent and the interval p ± t·SE, SE = the spread of −slope over rows
    resampled with replacement (numpy's generator with the seed; resamples with a non-positive
    mean dropped) times √(S/(S − 1)), t Student's with S − 1 degrees of freedom."""
    from scipy.stats import t

    S = samples.shape[0]
    x = np.log(N.astype(float))
    idx = np.random.default_rng(seed).integers(0, S, size=(n_boot, S))
    boots = [-slope(x, samples[i].mean(0))[0] for i in idx if np.all(samples[i].mean(0) > 0)]
    p = -slope(x, samples.mean(0))[0]
    half = t.ppf(0.975, S - 1) * np.std(boots, ddof=1) * math.sqrt(S / (S - 1))
    return p, p - half, p + half


def test_fit_power_law_is_the_row_bootstrap_of_the_log_log_slope():
    """exponent = −slope of log(mean over rows) on log N; the interval is Student's t around it with
    the row bootstrap's SE (:func:`_row_fit`)."""
    rng = np.random.default_rng(3)
    samples = N ** -0.7 * rng.exponential(size=(6, 4))
    samples[0, 1] = -50.0  # some resampled means are negative
    for n_boot, seed in ((300, 0), (200, 5)):
        fit = fit_power_law(list(N), samples, n_boot=n_boot, seed=seed)
        assert math.isnan(fit.exponent) and fit.n == 6  # the mean itself is negative: no power law
    clean = N**-0.7 * np.exp(0.1 * rng.standard_normal((5, 4)))
    for n_boot, seed in ((50, 0), (300, 5)):
        fit = fit_power_law(N, clean, n_boot=n_boot, seed=seed)
        b, a = slope(np.log(N), clean.mean(0))
        assert (fit.exponent, fit.prefactor) == (pytest.approx(-b, abs=1e-12), pytest.approx(math.exp(a), rel=1e-12))
        p, lo, hi = _row_fit(clean, n_boot, seed)
        assert fit.ci == pytest.approx((lo, hi), abs=1e-12) and fit.exponent == pytest.approx(p, abs=1e-12)
    assert fit.to_dict() == {"exponent": fit.exponent, "ci": list(fit.ci), "prefactor": fit.prefactor, "n": 5}
    none = fit_power_law(N, -clean, n_boot=20)
    assert math.isnan(none.ci[0]) and math.isnan(none.ci[1])
    few = fit_power_law(N, clean[:2], n_boot=20)
    assert math.isnan(few.ci[0]) and math.isnan(few.ci[1]) and math.isnan(few.se) and few.n == 2  # no resampling


def test_fit_power_law_default_bootstrap():
    samples = N**-0.5 * np.random.default_rng(4).exponential(size=(5, 4))
    _, lo, hi = _row_fit(samples, 2000, 0)
    assert fit_power_law(N, samples).ci == pytest.approx((lo, hi), abs=1e-12)


def test_fit_power_law_interval_covers_at_three_samples():
    """Quantity: the coverage of the 95% interval of the exponent from S = 3 samples, over R = 300
    seeded replicates of samples C·x^{−1}·(common factor)·(own noise) whose mean curve decays with
    exponent exactly 1 (both factors log-normal: skewed, correlated across x). Expected 0.95;
    tolerance 4.5 binomial SEs of 300 trials (±0.057). A percentile interval of the same bootstrap
    covers about 0.73 here, and fails."""
    rng = np.random.default_rng(11)
    x = np.array([4.0, 8.0, 16.0])
    R, hits = 300, 0
    for r in range(R):
        samples = x**-1.0 * rng.lognormal(0, 0.6, size=(3, 1)) * rng.lognormal(0, 0.5, size=(3, 3))
        fit = fit_power_law(x, samples, n_boot=200, seed=r)
        hits += fit.ci[0] <= 1.0 <= fit.ci[1]
    tol = 4.5 * math.sqrt(0.95 * 0.05 / R)
    assert abs(hits / R - 0.95) <= tol, hits / R


def test_fit_power_law_se_is_a_parametric_bootstrap():
    """exponent from the means; interval from y + se·ξ (ξ standard normal from the seeded generator),
    draws with a non-positive entry dropped."""
    y = N**-1.2 * np.array([1.0, 1.1, 0.9, 1.05])
    se = 0.4 * y
    se[-1] = 2.0 * y[-1]  # some draws go negative
    x = np.log(N.astype(float))
    for kw, (n_boot, seed) in (({}, (2000, 0)), ({"n_boot": 300, "seed": 9}, (300, 9))):
        fit = fit_power_law(list(N), list(y), se=list(se), **kw)
        b, a = slope(x, y)
        draws = y + se * np.random.default_rng(seed).standard_normal((n_boot, 4))
        boots = [-slope(x, row)[0] for row in draws if np.all(row > 0)]
        assert 0 < len(boots) < n_boot
        assert fit.exponent == pytest.approx(-b, abs=1e-12) and fit.prefactor == pytest.approx(math.exp(a), rel=1e-12)
        assert fit.ci == pytest.approx(tuple(np.quantile(boots, [0.025, 0.975])), abs=1e-12)
    fit = fit_power_law(N, y, se=1e3 * y, n_boot=5)  # every draw has a negative entry
    assert isinstance(fit, PowerFit) and math.isnan(fit.ci[0]) and math.isnan(fit.ci[1])


@pytest.mark.parametrize("n", [1, 2, 3, 4, 30])
def test_fit_power_law_se_of_means_of_n_samples_draws_student_t(n):
    """Each mean of n samples: the parametric draws are y + se·ξ with ξ Student's t with n − 1
    degrees of freedom (the same seeded generator); the fit keeps n and the draws' SD (ddof 1) as
    its SE; fewer than 3 samples per mean give no interval, with n kept."""
    y = N**-0.8 * np.array([1.0, 0.95, 1.1, 1.0])
    se = 0.3 * y
    x = np.log(N.astype(float))
    fit = fit_power_law(N, y, se=se, n=n, n_boot=400, seed=5)
    assert fit.n == n and fit.exponent == pytest.approx(-slope(x, y)[0], abs=1e-12)
    if n < 3:
        assert math.isnan(fit.ci[0]) and math.isnan(fit.ci[1]) and math.isnan(fit.se)
        return
    draws = y + se * np.random.default_rng(5).standard_t(n - 1, (400, 4))
    boots = [-slope(x, row)[0] for row in draws if np.all(row > 0)]
    assert fit.ci == pytest.approx(tuple(np.quantile(boots, [0.025, 0.975])), abs=1e-12)
    assert fit.se == pytest.approx(float(np.std(boots, ddof=1)), rel=1e-12)
    normal = fit_power_law(N, y, se=se, n_boot=400, seed=5)
    assert normal.n is None and normal.ci != fit.ci


def test_fit_power_law_drops_resamples_with_a_zero_mean():
    """A resampled mean of 0 has no logarithm: like a negative one, its resample is dropped (here
    column 2 is 0 in two of three rows, so about (2/3)³ of the row resamples have a zero mean there)
    and the interval stays finite."""
    samples = np.array([[1.0, 0.0, 1.0, 1.0], [1.0, 0.0, 1.0, 1.0], [1.0, 3.0, 1.0, 1.0]]) / N
    fit = fit_power_law(N, samples, n_boot=200, seed=0)
    assert np.isfinite(fit.exponent) and np.all(np.isfinite(fit.ci)) and np.isfinite(fit.se)


def test_fit_power_law_refuses_shapes_naming_the_field():
    """Without se: samples (S, n) at the n abscissae; with se: n means and n SEs. Each error
    names its field and the shapes it got."""
    with pytest.raises(ValueError, match=r"^samples: must be \(S, n\) samples at the n = 4 values of x \(got shape \(4,\)\)$"):
        fit_power_law(N, np.ones(4))
    with pytest.raises(ValueError, match=r"^samples: must be \(S, n\) samples at the n = 4 values of x \(got shape \(3, 3\)\)$"):
        fit_power_law(N, np.ones((3, 3)))
    for means, ses in ((np.ones(4), np.ones(3)), (np.ones(3), np.ones(4)), (np.ones((3, 4)), np.ones(4))):
        with pytest.raises(ValueError, match=r"^se: with se, samples and se must be the n = 4 means and their SEs \(got "):
            fit_power_law(N, means, se=ses)


def test_tagged_correlation_formula():
    """ρ = mean⟨Ã, B̃⟩ / √(mean|Ã|² mean|B̃|²) (centred), SE = sd(⟨Ã_r, B̃_r⟩, ddof 1)/√R/denominator."""
    rng = np.random.default_rng(5)
    A = rng.standard_normal((50, 3)) + np.array([1.0, -2.0, 0.5])
    B = 0.3 * A + rng.standard_normal((50, 3)) + np.array([0.0, 3.0, 1.0])
    Ac, Bc = A - A.mean(0), B - B.mean(0)
    prod = np.einsum("rd,rd->r", Ac, Bc)
    den = math.sqrt(np.mean(np.sum(Ac**2, 1)) * np.mean(np.sum(Bc**2, 1)))
    rho, se = tagged_correlation(torch.from_numpy(A).float(), torch.from_numpy(B))
    assert rho == pytest.approx(prod.mean() / den, abs=1e-6)
    rho, se = tagged_correlation(torch.from_numpy(A), torch.from_numpy(B))
    assert rho == pytest.approx(prod.mean() / den, abs=1e-12)
    assert se == pytest.approx(prod.std(ddof=1) / math.sqrt(50) / den, abs=1e-12)


def test_rate_functions_for_integer_sizes():
    """r_d(N) and the sphere rates for a list of integer sizes."""
    n = [10, 1000]
    Nf = np.array(n, dtype=float)
    assert rate_function(3, n) == pytest.approx(Nf**-0.5, rel=1e-14)
    assert rate_function(4, n) == pytest.approx(Nf**-0.5 * np.log1p(Nf), rel=1e-14)
    assert rate_function(5, n) == pytest.approx(Nf**-0.4, rel=1e-14)
    assert sphere_rate(2, n) == pytest.approx(1.0 / Nf, rel=1e-14)
    assert sphere_rate(3, n) == pytest.approx(np.log1p(Nf) / Nf, rel=1e-14)
    assert sphere_rate(5, n) == pytest.approx(Nf**-0.5, rel=1e-14)


def test_w2_squared_is_exact_up_to_exact_max_then_sliced():
    rng = np.random.default_rng(6)
    X, Y = rng.standard_normal((20, 3)), rng.standard_normal((15, 3)) + 0.5
    exact = w2_squared(X, Y, exact_max=20)
    assert exact.method == "exact" and exact.value == pytest.approx(w2_exact(X, Y).value, abs=1e-14)
    for kw in ({}, {"projections": 37, "seed": 4}):
        sliced = w2_squared(X, Y, exact_max=19, **kw)
        ref = w2_sliced(X, Y, **({"projections": 200, "seed": 0} | kw))
        assert sliced.method == "sliced" and sliced.value == pytest.approx(ref.value, abs=1e-14)
    assert w2_squared(X, Y, exact_max=19, seed=1).value != pytest.approx(w2_sliced(X, Y).value, abs=1e-14)


def test_weighted_power_fit_uses_every_size_and_recovers_the_exponent():
    # ρ = 0.9/N with SE 0.008 at N = 4…64 (seeded noise): the last sizes are below 3 SE, even
    # negative, and still enter the fit; the exponent is 1 within 4 SEs (the 95% profile interval's
    # half-width / 1.96), and the interval excludes 0.5.
    N = np.array([4, 8, 16, 32, 64])
    se = np.full(5, 0.008)
    y = 0.9 / N + se * np.random.default_rng(3).standard_normal(5)
    assert (y < 3 * se).sum() >= 2
    fit = fit_power_law_weighted(N, y, se)
    lo, hi = fit.ci
    assert abs(fit.exponent - 1.0) < 4 * (hi - lo) / (2 * 1.96) and lo > 0.5
    # a wrong model, ρ = 0.5/√N, is told apart: its interval excludes 1
    y = 0.5 / np.sqrt(N) + se * np.random.default_rng(4).standard_normal(5)
    assert fit_power_law_weighted(N, y, se).ci[1] < 1.0


def test_bootstrap_resamples_whole_samples_along_an_axis_from_the_seed():
    """stats.bootstrap draws each resample's samples with replacement from ``seed`` alone (so fits
    given one seed resample the same samples), jointly for every other coordinate, along any axis;
    interval gives the SE and the 95% percentile interval of the resampled values."""
    from stochformer.measure.stats import bootstrap, interval

    x = np.random.default_rng(0).standard_normal((6, 3))
    rows = np.random.default_rng(9).integers(0, 6, size=(4, 6))
    along_0 = bootstrap(lambda s: s.mean(0), x, 4, seed=9)
    along_last = bootstrap(lambda s: s.mean(-1), x.T.copy(), 4, seed=9, axis=-1)
    for k in range(4):
        np.testing.assert_array_equal(along_0[k], x[rows[k]].mean(0))
        np.testing.assert_allclose(along_last[k], along_0[k], rtol=1e-15)
    se, (lo, hi) = interval([1.0, 2.0, 3.0, 4.0])
    assert se == pytest.approx(np.std([1, 2, 3, 4], ddof=1)) and (lo, hi) == pytest.approx((1.075, 3.925))


# ----------------------------------------------------------------- fit_power_law_weighted: construction


def test_weighted_power_fit_is_float64_whatever_the_input_dtype():
    """Sizes, means and standard errors given in float32 give exactly the fit of the same values
    widened to float64 (the law and its weights are evaluated in float64)."""
    N = np.array([3.0, 10.0, 30.0, 100.0], dtype=np.float32)
    y = (2.0 * N**-0.6 + np.array([0.01, -0.02, 0.004, 0.003])).astype(np.float32)
    se = np.array([0.03, 0.02, 0.015, 0.01], dtype=np.float32)
    f32 = fit_power_law_weighted(N, y, se)
    f64 = fit_power_law_weighted(N.astype(np.float64), y.astype(np.float64), se.astype(np.float64))
    close(np.array([f32.exponent, *f32.ci, f32.prefactor, f32.se]), np.array([f64.exponent, *f64.ci, f64.prefactor, f64.se]))


def test_weighted_power_fit_interval_covers_where_the_means_are_unresolved():
    """Quantity: the coverage of the 95% interval of the exponent over R = 300 seeded replicates of
    two means ρ = 0.4/N at N = 4, 8 with Gaussian errors of SE 0.06 (the larger mean 1.7 SEs from 0:
    the tiny chaos section's regime). Expected 0.95; tolerance 4.5 binomial SEs (±0.057)."""
    rng = np.random.default_rng(21)
    N, se, R = np.array([4.0, 8.0]), np.array([0.06, 0.06]), 300
    hits = sum(lo <= 1.0 <= hi for lo, hi in (fit_power_law_weighted(N, 0.4 / N + se * rng.standard_normal(2), se).ci
                                              for _ in range(R)))
    assert abs(hits / R - 0.95) <= 4.5 * math.sqrt(0.95 * 0.05 / R), hits / R


# ----------------------------------------------------------------- w2_exact: POT's iteration cap


def test_w2_exact_returns_every_message_of_the_iteration_cap():
    """With POT's iteration cap reached, the warning returned is every message POT gives, in order:
    the warnings it emits, then the one in its log, joined by '; '; the value is POT's cost."""
    ot = pytest.importorskip("ot")
    r = np.random.default_rng(183)
    X, Y = r.standard_normal((30, 3)), r.standard_normal((30, 3))
    a = np.full(30, 1.0 / 30)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cost, log = ot.emd2(a, a, ot.dist(X, Y), numItermax=3, log=True)
    assert log["warning"]
    res = w2_exact(X, Y, max_iter=3)
    assert res.warning == "; ".join([str(w.message) for w in caught] + [log["warning"]])
    assert abs(res.value - float(cost)) < TOL


# ----------------------------------------------------------------- statistics in float64


def _pair(rng: np.random.Generator, *shape: int) -> tuple[np.ndarray, np.ndarray]:
    """Positive float32 values and the same values in float64 (exactly)."""
    x32 = rng.uniform(0.5, 2.0, size=shape).astype(np.float32)
    return x32, x32.astype(np.float64)


def test_statistics_are_computed_in_float64_whatever_the_input_dtype():
    """float32 inputs give exactly the results of the same values in float64: the statistics cast
    first (a float32 log, mean or quantile would differ in the eighth digit)."""
    rng = np.random.default_rng(0)
    x32, x64 = _pair(rng, 6)
    y32, y64 = _pair(rng, 6)
    assert loglog_slope(x32, y64) == loglog_slope(x64, y64)
    assert loglog_slope(x64, y32) == loglog_slope(x64, y64)
    b32, b64 = _pair(rng, 50)
    assert interval(b32) == interval(b64)
    s32, s64 = _pair(rng, 40, 3)
    for u, v in zip(bootstrap(lambda r: r.mean(0), s32, 5, 1), bootstrap(lambda r: r.mean(0), s64, 5, 1)):
        assert np.array_equal(u, v)
    N = [4, 8, 16, 32, 64]
    S32, S64 = _pair(rng, 30, 5)
    for samples in (S32, torch.from_numpy(S32)):  # a float32 tensor stays a tensor through validation
        a, b = fit_power_law(N, samples, 200, 3), fit_power_law(N, S64, 200, 3)
        assert (a.exponent, a.ci, a.prefactor, a.se) == (b.exponent, b.ci, b.prefactor, b.se)
    m32, m64 = _pair(rng, 5)
    a = fit_power_law(N, torch.from_numpy(m32), se=torch.from_numpy(0.2 * m32), n=8, n_boot=200, seed=3)
    b = fit_power_law(N, m64, se=(0.2 * m32).astype(np.float64), n=8, n_boot=200, seed=3)
    assert (a.exponent, a.ci, a.prefactor, a.se) == (b.exponent, b.ci, b.prefactor, b.se)
    N32 = np.asarray([3, 7, 11, 19, 37], np.float32)
    y = 2.0 * (N32.astype(float) / 3) ** -0.8
    a = fit_power_law_weighted(N32, y, 0.05 * y)
    b = fit_power_law_weighted(N32.astype(float), y, 0.05 * y)
    assert (a.exponent, a.ci, a.prefactor, a.se) == (b.exponent, b.ci, b.prefactor, b.se)


def test_power_law_fit_defaults_to_2000_resamples_and_reports_their_se():
    """The default bootstrap has 2000 resamples, and ``se`` is the std (ddof 1) of the resampled
    exponents times √(S/(S − 1)) for S samples, finite."""
    N = np.array([4.0, 8, 16, 32])
    samples = np.random.default_rng(1).uniform(0.5, 1.5, size=(25, 4)) / N
    default, explicit = fit_power_law(N, samples, seed=2), fit_power_law(N, samples, 2000, 2)
    assert default == explicit and np.isfinite(default.se)
    boots = [-loglog_slope(N, r)[0] for r in bootstrap(lambda r: r.mean(0), samples, 2000, 2)]
    assert default.se == pytest.approx(float(np.std(boots, ddof=1)) * (25 / 24) ** 0.5, rel=1e-14)
    assert fit_power_law(N, samples, 1999, 2) != default


# ----------------------------------------------------------------- mean and SE, exact W2, the weighted power fit against its construction


def test_mean_and_se_numpy_and_torch_along_any_axis():
    """Mean and SE = s/√n (s with n − 1) along ``axis``, for numpy (any axis, integer input) and torch;
    SE = 0 for one sample, a proper SE from two on."""
    v = np.array([[1, 2, 4], [2, 5, 4]])  # n = 2 along axis 0, n = 3 along axis 1
    for values in (v, torch.from_numpy(v.astype(float))):
        m, se = mean_and_se(values)
        close(m, np.array([1.5, 3.5, 4.0]))
        close(se, np.array([0.5, 1.5, 0.0]))
        m, se = mean_and_se(values, axis=1)
        close(m, np.array([7 / 3, 11 / 3]))
        close(se, np.sqrt(np.array([7 / 3, 7 / 3]) / 3))
        m, se = mean_and_se(values[:1])
        close(se, np.zeros(3))
        assert type(se) is type(m)


def test_w2_exact_is_the_best_matching_and_reports_the_cap():
    """Exact W₂² between two clouds of 4 points with uniform weights is the smallest mean squared
    distance over the 4! matchings; the iteration cap's warning is returned, each message once per
    occurrence joined by '; '; sliced W₂² is POT's sliced distance with 200 projections, squared."""
    import itertools

    ot = pytest.importorskip("ot")
    r = np.random.default_rng(47)
    X, Y = r.standard_normal((4, 3)), r.standard_normal((4, 3))
    best = min(np.mean([np.sum((X[i] - Y[p[i]]) ** 2) for i in range(4)]) for p in itertools.permutations(range(4)))
    res = w2_exact(X, Y)
    assert (res.method, res.warning) == ("exact", None) and abs(res.value - best) < TOL
    X, Y = r.standard_normal((30, 3)), r.standard_normal((30, 3))
    capped = w2_exact(X, Y, max_iter=3)
    parts = capped.warning.split("; ")
    assert len(parts) >= 2 and all(p.startswith("numItermax reached before optimality") for p in parts)
    sliced = w2_sliced(X, Y)
    assert sliced.method == "sliced"
    assert abs(sliced.value - float(ot.sliced_wasserstein_distance(X, Y, n_projections=200, p=2, seed=0)) ** 2) < TOL


def weighted_fit_reference(N, y, se):
    """By brute force: RSS(p) = min over C of Σ (y − C (N/N₀)^{−p})²/se² on a grid of spacing 10⁻⁴
    over [−20, 20]; (p̂ the grid's minimiser, the hull of {p : RSS(p) − RSS(p̂) ≤ 3.8415} (χ²₁'s
    95% quantile), C(p̂) · N₀^p̂)."""
    x, w = N / N[0], 1.0 / se**2
    p = np.linspace(-20.0, 20.0, 400001)
    X = x[None, :] ** -p[:, None]
    C = (w * y * X).sum(1) / (w * X * X).sum(1)
    rss = (w * (y - C[:, None] * X) ** 2).sum(1)
    k = int(np.argmin(rss))
    inside = p[rss - rss[k] <= 3.841458820694124]
    return p[k], (inside.min(), inside.max()), C[k] * N[0] ** p[k]


def test_weighted_power_fit_against_its_construction():
    """fit_power_law_weighted is the profiled weighted fit and profile-likelihood interval of its
    docstring (to the brute-force grid's 10⁻⁴); on exact data y = 3 N^{−0.7} it returns p = 0.7 and
    C = 3 with an interval around 0.7; unresolved means give an interval that reaches the search
    range's ends; se is the interval's half-width over 1.96."""
    N = np.array([8.0, 16.0, 32.0, 64.0])
    for y, se in ((np.array([0.02, 0.3, 0.2, 0.12]), np.array([0.05, 0.04, 0.03, 0.02])),
                  (3.0 * N**-0.6 + np.array([0.01, -0.02, 0.005, 0.0]), np.array([0.05, 0.04, 0.03, 0.02]))):
        fit = fit_power_law_weighted(N, y, se)
        p, (lo, hi), C = weighted_fit_reference(N, y, se)
        assert abs(fit.exponent - p) < 2e-4 and abs(fit.ci[0] - lo) < 2e-4 and abs(fit.ci[1] - hi) < 2e-4
        assert abs(fit.prefactor / C - 1) < 1e-3 and fit.se == pytest.approx((fit.ci[1] - fit.ci[0]) / 3.919927969, rel=1e-9)
    exact = fit_power_law_weighted(N, 3.0 * N**-0.7, 1e-3 * N**-0.7)
    assert abs(exact.exponent - 0.7) < 1e-9 and abs(exact.prefactor - 3.0) < 1e-9 and exact.ci[0] < 0.7 < exact.ci[1]
    noise = fit_power_law_weighted(np.array([4.0, 8.0]), np.array([0.1, 0.05]), np.array([0.18, 0.18]))
    assert noise.ci == (-20.0, 20.0)


def test_w2_names_the_missing_extra(monkeypatch):
    """Without POT, W₂ refuses with the feature's name and the extra to install."""
    import sys

    monkeypatch.setitem(sys.modules, "ot", None)  # import ot raises ImportError
    X = np.zeros((2, 3))
    for f, feature in ((w2_exact, "exact W₂"), (w2_sliced, "sliced W₂")):
        with pytest.raises(MissingExtraError, match=rf"^{feature} needs POT, which is not installed: "
                           r"install the extra stochformer\[ot\] \(or stochformer\[all\]\): "
                           r"python -m pip install '\.\[ot\]' in the source tree$"):
            f(X, X)


def test_offset_fit_recovers_a_growth_law_above_an_offset():
    """Exact means E₀ + C x^p (no noise) give back p, C and E₀; an interval that contains p; fewer
    than 3 points are refused naming y."""
    from stochformer.measure.stats import fit_power_law_offset

    x = np.array([0.04, 0.08, 0.16, 0.32, 0.64])
    for p, C, E0 in ((1.0, 0.05, 0.3), (2.0, -0.1, -0.2), (0.5, 0.02, 0.0)):
        fit = fit_power_law_offset(x, E0 + C * x**p, np.full(5, 1e-3))
        assert abs(fit.exponent - p) < 1e-5 and abs(fit.prefactor - C) < 1e-6 and abs(fit.offset - E0) < 1e-6
        assert fit.ci[0] <= p <= fit.ci[1] and fit.to_dict()["offset"] == fit.offset
    with pytest.raises(ValueError, match="y"):
        fit_power_law_offset(x[:2], x[:2], np.full(2, 1e-3))


@pytest.mark.parametrize("n", [3, 5])
def test_offset_fit_is_the_weighted_profile_likelihood_written_out(n):
    """Noisy means with unequal SEs: p̂ minimises RSS(p) = min over (E₀, C) of Σ (y − E₀ − C x^p)²/se²
    (written here with NumPy's least squares), the 95% interval is {p : RSS(p) − RSS(p̂) ≤ χ²₁(0.95)}
    (its ends by root finding, or the search range's ends where the data do not bound p: with three
    points an exact fit exists), se its half-width / 1.96; three points are enough."""
    from scipy.optimize import brentq, minimize_scalar

    from stochformer.measure.stats import CHI2_1_95, OFFSET_RANGE, fit_power_law_offset

    x = np.array([0.1, 0.25, 0.5, 0.9, 1.6])[:n]
    se = np.array([0.004, 0.03, 0.01, 0.06, 0.02])[:n]
    y = 0.1 + 0.3 * x**1.5 + se * np.random.default_rng(7).standard_normal(n)

    def rss(p: float) -> float:
        A = np.stack([np.ones(n), x**p], 1) / se[:, None]
        coef = np.linalg.lstsq(A, y / se, rcond=None)[0]
        return float(((A @ coef - y / se) ** 2).sum())

    grid = np.linspace(*OFFSET_RANGE, 4001)
    k = int(np.argmin([rss(p) for p in grid]))
    best = minimize_scalar(rss, bounds=(grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]), method="bounded",
                           options={"xatol": 1e-10})
    p_hat, floor = best.x, best.fun

    def end(edge: float) -> float:  # the range's end where the data do not bound p on that side
        excess = lambda p: rss(p) - floor - CHI2_1_95  # noqa: E731
        return edge if excess(edge) <= 0 else brentq(excess, *sorted((p_hat, edge)), xtol=1e-12)

    lo, hi = end(OFFSET_RANGE[0]), end(OFFSET_RANGE[1])
    fit = fit_power_law_offset(x, y, se)
    assert fit.exponent == pytest.approx(p_hat, abs=1e-6)
    assert fit.ci == pytest.approx((lo, hi), abs=1e-6)
    assert fit.se == pytest.approx((hi - lo) / (2 * 1.959963984540054), rel=1e-12)


@given(c=st.floats(-10, 10), a=st.floats(-10, 10), b=st.floats(-10, 10), h=st.floats(1e-3, 1.0),
       ses=st.lists(st.just(0.0) | st.floats(1e-100, 5), min_size=3, max_size=3))  # squares of SEs below 1e-154 underflow
@settings(max_examples=200, deadline=None)
def test_richardson_steps_remove_the_step_bias_and_combine_the_ses(c, a, b, h, ses):
    """Values c + a·Δt + b·Δt² at Δt = h, 2h, 4h (n, n/2, n/4 steps): three levels give c, two levels
    give c when b = 0; the SE is √(Σ w_i² SE_i²) with the weights (8, −6, 1)/3 and (2, −1)."""
    from stochformer.measure.stats import richardson_steps

    levels = [c + a * h * 2**i + b * (h * 2**i) ** 2 for i in range(3)]
    scale = 1 + abs(c) + abs(a) + abs(b)
    assert abs(richardson_steps(levels) - c) <= 1e-12 * scale * 20
    assert abs(richardson_steps([c + a * h, c + 2 * a * h]) - c) <= 1e-12 * scale * 20
    value, se = richardson_steps(levels, ses)
    assert value == richardson_steps(levels)
    assert se == pytest.approx(math.sqrt((8 / 3 * ses[0]) ** 2 + (2 * ses[1]) ** 2 + (ses[2] / 3) ** 2), rel=1e-12, abs=1e-300)
    assert richardson_steps(levels[:2], ses[:2])[1] == pytest.approx(math.hypot(2 * ses[0], ses[1]), rel=1e-12, abs=1e-300)
    for bad in ([c], levels + [c]):
        with pytest.raises(ValueError, match="values: 2 or 3 levels"):
            richardson_steps(bad)
    with pytest.raises(ValueError, match="as many ses"):
        richardson_steps(levels, ses[:2])


@settings(max_examples=120, deadline=None)
@given(shape=st.lists(st.integers(1, 3), min_size=0, max_size=3), axis=st.integers(-5, 5),
       use_torch=st.booleans())
def test_axis_is_checked_against_the_array_it_indexes(shape, axis, use_torch):
    """``axis`` of mean_and_se and bootstrap: any axis of the array (−ndim … ndim − 1) works on that
    axis; any other, and every axis of a 0-d array, is refused by one ValueError naming ``axis``
    and its valid range."""
    from stochformer.measure.stats import bootstrap
    x = np.arange(float(np.prod(shape, dtype=int))).reshape(shape) + 1.0
    nd = len(shape)
    valid = nd > 0 and -nd <= axis <= nd - 1
    expect = f"axis: must be an integer >= {-nd} and <= {nd - 1} (got {axis})"
    if valid:
        m, _ = mean_and_se(torch.as_tensor(x) if use_torch else x, axis=axis)
        assert tuple(m.shape) == tuple(np.delete(np.array(shape), axis))
        boots = bootstrap(lambda s: s.shape, x, 2, seed=0, axis=axis)
        assert boots == [x.shape, x.shape]
        return
    if nd:
        with pytest.raises(ValueError) as err:
            mean_and_se(torch.as_tensor(x) if use_torch else x, axis=axis)
        assert str(err.value) == expect
    with pytest.raises(ValueError) as err:
        bootstrap(lambda s: 0.0, x, 2, seed=0, axis=axis)
    assert str(err.value) == (expect if nd else "samples: expected at least one axes, got shape ()")


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 40), frac=st.floats(0, 1), level=st.sampled_from([0.5, 0.8, 0.95, 0.99]))
def test_fraction_intervals_equal_scipys_at_every_count_and_level(n, frac, level):
    """Clopper–Pearson and Wilson intervals equal scipy's (binomtest(...).proportion_ci, 'exact' and
    'wilson') at any count, 0 and n included, and any level; NaN below MIN_SAMPLES trials; Newcombe's difference interval is d ∓ the hypot of the two Wilson half-widths facing
    each other (Newcombe 1998, method 10)."""
    from scipy.stats import binomtest
    from stochformer.measure.stats import MIN_SAMPLES, clopper_pearson_interval, newcombe_interval, wilson_interval
    k = round(frac * n)
    exact, score = (binomtest(k, n).proportion_ci(level, method) for method in ("exact", "wilson"))
    cp, wl = clopper_pearson_interval(k, n, level), wilson_interval(k, n, level)
    if n < MIN_SAMPLES:
        assert all(math.isnan(v) for v in (*cp, *wl))
        return
    assert cp == pytest.approx((exact.low, exact.high), rel=1e-9, abs=1e-12)
    assert wl == pytest.approx((score.low, score.high), rel=1e-9, abs=1e-12)
    k2, n2 = max(0, n - k - 1), n + 3  # a second, different fraction
    s2 = binomtest(k2, n2).proportion_ci(level, "wilson")
    p1, p2 = k / n, k2 / n2
    want = (p1 - p2 - math.hypot(p1 - score.low, s2.high - p2), p1 - p2 + math.hypot(score.high - p1, p2 - s2.low))
    assert newcombe_interval(k, n, k2, n2, level) == pytest.approx(want, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("args, message", [
    ((1, 0), "trials: must be an integer >= 1 (got 0)"),
    ((-1, 5), "successes: must be an integer >= 0 and <= 5 (got -1)"),
    ((6, 5), "successes: must be an integer >= 0 and <= 5 (got 6)"),
])
def test_fraction_intervals_refuse_impossible_counts_naming_the_field(args, message):
    from stochformer.measure.stats import clopper_pearson_interval, wilson_interval
    for f in (clopper_pearson_interval, wilson_interval):
        with pytest.raises(ValueError) as err:
            f(*args)
        assert str(err.value) == message
    assert all(math.isnan(v) for v in clopper_pearson_interval(1, 1))  # one trial: a valid count, no interval


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(-1.0, 1.0), min_size=2, max_size=12), power=st.integers(0, 1000),
       as_tensor=st.booleans())
def test_the_standard_error_of_huge_samples_is_finite_and_scales(values, power, as_tensor):
    """SE(2^k x) = 2^k SE(x) to rounding and finite for samples from below 1e-150 (values the float
    strategy draws near 0) up to 1e301: the squares of such numbers underflow or overflow, so the
    spread is taken in units of the largest, numpy and torch alike."""
    x = np.asarray(values, float)
    big = x * 2.0**power
    if as_tensor:
        mean, se = (v.numpy() for v in mean_and_se(torch.from_numpy(big)))
    else:
        mean, se = mean_and_se(big)
    top = float(np.abs(x).max()) or 1.0  # the reference in units of the largest too: NumPy's squares of |x| < 1e-154 underflow
    ref = top * (x / top).std(ddof=1) / math.sqrt(len(x))
    rounding = 1e-15 * float(np.abs(x).max()) * 2.0**power  # equal values: an SE of 0 or of rounding, either way
    assert np.isfinite(se) and math.isclose(float(se), ref * 2.0**power, rel_tol=1e-12, abs_tol=rounding + 1e-300 * 2.0**power)
    # the mean of values that cancel carries the rounding of the largest, not of the result
    assert math.isclose(float(mean), x.mean() * 2.0**power, rel_tol=1e-12, abs_tol=rounding + 1e-300 * 2.0**power)
