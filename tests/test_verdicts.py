"""Every rule of the report fails on a wrong prediction or a wrong model: the row builders of
stochformer.report.sections fed measured numbers (from docs/meanfield.md and the quick report) or
synthetic curves, once with the right and once with a wrong prediction."""

import math

import numpy as np
import pytest

from stochformer.report.sections import SLOPE_TOL, _fit_row, _rate_row, scenario_row, w2_row
from stochformer.report.verdict import FAILS, HOLDS, decide

# measured W₂² exponent for d = 4 (docs/meanfield.md): 0.667 [0.609, 0.724]
W2_D4 = {"exponent": 0.667, "ci": [0.609, 0.724]}


def test_at_least_fails_when_the_whole_interval_is_below():
    assert decide("at_least", 1.0, 0.28, 0.87, SLOPE_TOL) == FAILS
    assert decide("at_least", 1.0, 0.6, 0.91, SLOPE_TOL) == HOLDS


def test_w2_row_is_two_sided_against_the_sharp_rate():
    sharp = {"exponent": 2 / 3, "law": "N^-2/3"}
    bound = {"exponent": 0.259, "law": "N^-1/2 log(1+N)"}
    assert w2_row(4, W2_D4, sharp, bound).verdict == HOLDS
    # the old prediction r_d(N), or a rate faster than measured, does not hold
    assert w2_row(4, W2_D4, bound, bound).verdict == FAILS
    assert w2_row(4, W2_D4, {"exponent": 1.0, "law": "N^-1"}, bound).verdict == FAILS


def test_rate_and_fit_rows_fail_on_a_wrong_prediction():
    assert _rate_row("λ₁", -1.0, -0.97, 0.02).verdict == HOLDS
    assert _rate_row("λ₁", -1.3, -0.97, 0.02).verdict == FAILS
    # measured decorrelation exponent of the quick report with the old fit: 0.53 [0.28, 0.87]
    fit = {"exponent": 0.53, "ci": [0.28, 0.87]}
    assert _fit_row("ρ exponent", 1.0, fit, "at_least", SLOPE_TOL, "").verdict == FAILS
    assert _fit_row("ρ exponent", 0.5, fit, "at_least", SLOPE_TOL, "").verdict == HOLDS


def _energy(rate: float, T: float = 5.0, n: int = 61, e0: float = 0.5, rel_se: float = 0.02):
    t = np.linspace(0, T, n)
    e = e0 * np.exp(rate * t)
    return e, rel_se * e


def _pred(lam1: float, lbar: float, lbar_prime: float) -> dict:
    return {"lambda_1_pred": lam1, "lambda_bar_noise": lbar, "lambda_bar_prime_pred": lbar_prime}


@pytest.mark.parametrize("gamma", [0.0, 1.0])
def test_scenario_row_tests_the_theorem_14_rate(gamma):
    coords = {"activation": "tanh", "d": 64, "sigma": 0.0, "gamma": gamma}
    e, se = _energy(-0.5)
    row = scenario_row(coords, e, se, 5.0, _pred(-1.0, -0.6, -0.3))
    assert row.rule == "at_most" and row.measured == pytest.approx(-0.5) and row.verdict == HOLDS
    # a wrong (too fast) predicted rate, or a wrong model whose energy decays too slowly, fails
    assert scenario_row(coords, e, se, 5.0, _pred(-1.0, -0.6, -0.8)).verdict == FAILS
    e_slow, se_slow = _energy(-0.1)
    assert scenario_row(coords, e_slow, se_slow, 5.0, _pred(-1.0, -0.6, -0.3)).verdict == FAILS


def test_scenario_row_without_a_rate_tests_the_decrease_and_skips_unclear_cases():
    coords = {"activation": "relu", "d": 5, "sigma": 0.0, "gamma": -1.0}  # repulsive: no ε, no rate
    e, se = _energy(-0.5)
    row = scenario_row(coords, e, se, 5.0, _pred(-1.0, -0.6, -0.3))
    assert row.rule == "below" and row.verdict == HOLDS
    e_up, se_up = _energy(+0.1)  # a wrong model: the energy grows
    assert scenario_row(coords, e_up, se_up, 5.0, _pred(-1.0, -0.6, -0.3)).verdict == FAILS
    assert scenario_row(coords, e, se, 5.0, _pred(-0.4, -0.6, -0.3)) is None  # (λ₁ − γ)T = −2 > −2.5
    assert math.isfinite(row.ci[0])


def test_cluster_count_row_tests_the_attractor_itself():
    from types import SimpleNamespace

    from stochformer.clusters import count_clusters
    from stochformer.report.sections import cluster_count_row

    # two antipodal clusters: two clusters on the sphere, one point of projective space
    e = np.eye(4)
    X = np.stack([e[0], e[0], -e[0], -e[0]])[None]
    assert count_clusters(X, 0.05)[0] == 2 and count_clusters(X, 0.05, up_to_sign=True)[0] == 1
    notes: list = []
    ok = SimpleNamespace(n_projective=np.array([1, 1, 1]), n_clusters=np.array([2, 2, 2]), tol=0.05)
    assert cluster_count_row("tanh", ok, 64, 20.0, notes).verdict == HOLDS
    assert "predicted by t ≈" in notes[0]
    # the paper-size measurement (2–5 clusters, mean 3.5) does not hold; nor two clusters for ReLU
    bad = SimpleNamespace(n_projective=np.array([2, 3, 4, 5]), n_clusters=np.array([2, 3, 4, 5]), tol=0.05)
    assert cluster_count_row("tanh", bad, 64, 20.0, notes).verdict == FAILS
    assert cluster_count_row("relu", ok, 64, 20.0, notes).verdict == FAILS
