"""The fits of stochformer.stats on synthetic data with a known exponent."""

import numpy as np

from stochformer.stats import fit_power_law_se


def test_weighted_power_fit_uses_every_size_and_recovers_the_exponent():
    # ρ = 0.9/N with SE 0.008 at N = 4…64 (seeded noise): the last sizes are below 3 SE, even
    # negative, and still enter the fit; the exponent is 1 within 4 of its bootstrap SDs (the 95%
    # interval's half-width / 1.96), and the interval excludes 0.5.
    N = np.array([4, 8, 16, 32, 64])
    se = np.full(5, 0.008)
    y = 0.9 / N + se * np.random.default_rng(3).standard_normal(5)
    assert (y < 3 * se).sum() >= 2
    fit = fit_power_law_se(N, y, se, n_boot=400)
    lo, hi = fit.ci
    assert abs(fit.exponent - 1.0) < 4 * (hi - lo) / (2 * 1.96) and lo > 0.5
    # a wrong model, ρ = 0.5/√N, is told apart: its interval excludes 1
    y = 0.5 / np.sqrt(N) + se * np.random.default_rng(4).standard_normal(5)
    assert fit_power_law_se(N, y, se, n_boot=400).ci[1] < 1.0
