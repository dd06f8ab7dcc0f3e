"""The verdict rules at their boundaries (each rule holds exactly up to its stated inequality and
fails just past it, the tolerance enters with its sign, and missing or non-finite numbers give
"not measured" / "undetermined", never a verdict), and the report's row builders failing on a wrong
prediction or a wrong model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stochformer.report.sections import SLOPE_TOL, _fit_row, _rate_row, coupling_row, scenario_row, w2_row
from stochformer.report.verdict import FAILS, HOLDS, NOT_MEASURED, RULES, UNDETERMINED, Z95, Comparison, decide

EPS = 1e-9
TOL = 0.5


@pytest.mark.parametrize(
    "rule,p,lo,hi,expected",
    [
        # matches: lo − tol ≤ p ≤ hi + tol
        ("matches", 1.0 - TOL, 1.0, 2.0, HOLDS),
        ("matches", 1.0 - TOL - EPS, 1.0, 2.0, FAILS),
        ("matches", 2.0 + TOL, 1.0, 2.0, HOLDS),
        ("matches", 2.0 + TOL + EPS, 1.0, 2.0, FAILS),
        # at_most: lo ≤ p + tol
        ("at_most", 1.0 - TOL, 1.0, 2.0, HOLDS),
        ("at_most", 1.0 - TOL - EPS, 1.0, 2.0, FAILS),
        # at_least: hi ≥ p − tol
        ("at_least", 2.0 + TOL, 1.0, 2.0, HOLDS),
        ("at_least", 2.0 + TOL + EPS, 1.0, 2.0, FAILS),
        # below: hi < p (no tolerance)
        ("below", 2.0 + EPS, 1.0, 2.0, HOLDS),
        ("below", 2.0, 1.0, 2.0, FAILS),
        # above: lo > p (no tolerance)
        ("above", 1.0 - EPS, 1.0, 2.0, HOLDS),
        ("above", 1.0, 1.0, 2.0, FAILS),
    ],
)
def test_each_rule_holds_up_to_its_boundary_and_fails_past_it(rule, p, lo, hi, expected):
    assert decide(rule, p, lo, hi, TOL) == expected
    assert Comparison("q", p, ci=(lo, hi), rule=rule, tol=TOL).verdict == expected


def test_default_tolerance_is_zero():
    assert decide("matches", 0.9, 1.0, 2.0) == FAILS
    assert decide("at_most", 0.9, 1.0, 2.0) == FAILS
    assert decide("at_least", 2.1, 1.0, 2.0) == FAILS
    assert Comparison("q", 0.9, ci=(1.0, 2.0)).verdict == FAILS


@pytest.mark.parametrize("p,lo,hi", [(math.nan, 1.0, 2.0), (1.5, math.nan, 2.0), (1.5, 1.0, math.inf), (None, 1.0, 2.0), (1.5, None, 2.0), (1.5, 1.0, None)])
def test_non_finite_or_half_missing_is_undetermined(p, lo, hi):
    assert decide("matches", p, lo, hi, 10.0) == UNDETERMINED


def test_missing_measurement_is_not_measured_and_unknown_rule_is_an_error():
    assert decide("matches", 1.0, None, None) == NOT_MEASURED
    assert Comparison("q", 1.0).verdict == NOT_MEASURED
    with pytest.raises(ValueError, match=r"^rule: unknown rule 'roughly'; valid: " + ", ".join(RULES) + "$"):
        decide("roughly", 1.0, 0.0, 2.0)


def test_comparison_cleans_numbers_and_uses_an_exact_measurement_as_its_interval():
    row = Comparison("count", 3, measured=3)
    assert (row.ci, row.verdict) == ((3.0, 3.0), HOLDS)
    assert Comparison("count", 3, measured=4).verdict == FAILS
    assert Comparison("count", 3, measured=4, tol=1.0).verdict == HOLDS
    row = Comparison("x", math.inf, measured=math.nan)
    assert (row.predicted, row.measured, row.ci, row.verdict) == (None, None, None, UNDETERMINED)
    row = Comparison("x", 1.0, measured=1.0, ci=(math.nan, 2.0))
    assert (row.ci, row.verdict) == ((None, 2.0), UNDETERMINED)
    row = Comparison("x", 1.0, ci=(0.5, 2.0))
    assert (row.measured, row.verdict) == (None, HOLDS)


def test_from_mean_se_and_round_trip():
    row = Comparison.from_mean_se("λ", -1.0, 0.2, 0.5, rule="below", tol=0.1, note="n")
    assert row.quantity == "λ" and row.measured == 0.2
    assert row.ci == (0.2 - Z95 * 0.5, 0.2 + Z95 * 0.5)
    assert (row.rule, row.tol, row.note, row.verdict) == ("below", 0.1, "n", FAILS)
    d = row.to_dict()
    assert d == {"quantity": "λ", "predicted": -1.0, "measured": 0.2, "ci": row.ci, "rule": "below", "tol": 0.1, "note": "n", "verdict": FAILS}
    back = Comparison.from_dict({**d, "ci": list(d["ci"]), "verdict": "ignored"})
    assert back == row and back.ci == row.ci and back.verdict == FAILS
    assert Comparison.from_dict({"quantity": "κ", "predicted": 0.5}).verdict == NOT_MEASURED


# --------------------------------------------------------------------------- the report's row builders
# Every rule of the report fails on a wrong prediction or a wrong model: the row builders of
# stochformer.report.sections fed measured numbers (docs/meanfield.md, the quick report) or
# synthetic curves, once with the right and once with a wrong prediction.

# measured W₂² exponent for d = 4 (docs/meanfield.md): 0.667 [0.609, 0.724]
W2_D4 = {"exponent": 0.667, "ci": [0.609, 0.724]}


def test_w2_row_is_two_sided_against_the_sharp_rate():
    sharp = {"exponent": 2 / 3, "law": "N^-2/3"}
    bound = {"exponent": 0.259, "law": "N^-1/2 log(1+N)"}
    assert w2_row(4, W2_D4, sharp, bound).verdict == HOLDS
    # the old prediction r_d(N), or a rate faster than measured, does not hold
    assert w2_row(4, W2_D4, bound, bound).verdict == FAILS
    assert w2_row(4, W2_D4, {"exponent": 1.0, "law": "N^-1"}, bound).verdict == FAILS


def test_coupling_row_fails_on_a_wrong_prediction():
    # the exact-field coupling of the quick profile: 0.795 [0.608, 1.008] (docs/meanfield.md)
    fit = {"exponent": 0.795, "ci": [0.608, 1.008]}
    assert coupling_row(3, fit, "exact").verdict == HOLDS
    assert "exact field" in coupling_row(3, fit, "exact").quantity
    # Proposition 1.2's r_3(N) = N^{-1/2}, or an error decaying like 1/N², does not hold
    assert coupling_row(3, fit, "exact", predicted=0.5).verdict == FAILS
    assert coupling_row(3, fit, "exact", predicted=2.0).verdict == FAILS
    # nor does a coupling whose error does not decay
    assert coupling_row(3, {"exponent": 0.02, "ci": [-0.1, 0.15]}, "exact").verdict == FAILS


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


def test_scenario_rate_stops_where_the_energy_reaches_float64s_floor():
    """E_β decaying at −20 until it reaches 1.5e-13·E_β(0), then flat (rounding): the rate is that
    of the resolved part, −20, within the bound −10; the average over the whole run (−5.9) would
    fail it. A bound faster than −20 still fails."""
    coords = {"activation": "sigmoid", "d": 128, "sigma": 0.0, "gamma": 0.0}
    t = np.linspace(0, 5.0, 151)
    e = np.maximum(0.84 * np.exp(-20 * t), 0.84 * 1.5e-13)
    row = scenario_row(coords, e, 0.01 * e, 5.0, _pred(-1.0, -31.0, -10.0))
    assert row.measured == pytest.approx(-20, rel=1e-9) and row.verdict == HOLDS and "float64" in row.note
    assert scenario_row(coords, e, 0.01 * e, 5.0, _pred(-1.0, -31.0, -25.0)).verdict == FAILS
    e_slow = 0.84 * np.exp(-5.9 * t)  # a wrong model: the slower decay, resolved throughout
    assert scenario_row(coords, e_slow, 0.01 * e_slow, 5.0, _pred(-1.0, -31.0, -10.0)).verdict == FAILS


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


def test_sync_rows_judge_extrapolated_energy_rates_with_their_error_and_fail_on_a_wrong_prediction():
    from stochformer.report.sections import sync_rows

    # the tanh case of docs/synchronisation.md, extrapolated to Δt → 0 (rates measured there)
    table = [
        {"quantity": "lambda_1 (pair log-distance, Δt → 0)", "measured": -0.770, "se": 0.016, "err": 0.010,
         "predicted": -0.7465},
        {"quantity": "energy rate near sync, Δt → 0", "measured": -0.95, "se": 0.04, "err": 0.03, "predicted": -0.975},
        {"quantity": "energy rate from uniform (bound, Δt → 0)", "measured": -0.5, "se": 0.02, "err": 0.01,
         "predicted": -0.45},
    ]
    rows = sync_rows(table, extrapolated=True)
    assert [r.rule for r in rows] == ["matches", "matches", "at_most"]
    assert all(r.verdict == HOLDS for r in rows)
    half = Z95 * 0.04 + 0.03  # the interval includes the extrapolation error
    assert rows[1].ci == pytest.approx((-0.95 - half, -0.95 + half))
    # a wrong prediction (the rate at the old step, −0.820, taken as the truth) or a bound that is
    # faster than the measured decay does not hold
    wrong = [dict(r, predicted=p) for r, p in zip(table, (-0.90, -0.75, -0.60))]
    assert [r.verdict for r in sync_rows(wrong, extrapolated=True)] == [FAILS, FAILS, FAILS]
    # without extrapolation the rows are the plain rate rows (10% allowance) and the bound
    plain = sync_rows([dict(r, err=0.0) for r in wrong], extrapolated=False)
    assert [r.rule for r in plain] == ["matches", "matches", "at_most"] and plain[2].verdict == FAILS


def test_attractor_row_tests_the_cluster_count_at_the_predicted_horizon():
    from stochformer.report.sections import attractor_row

    course = {"up_to_sign": True, "horizon": 117.2, "lambda_1": -0.1706, "long_times": [0.0, 60.0, 120.0],
              "long_counts": [[30, 2, 1], [28, 1, 1], [29, 3, 1], [27, 1, 1]]}
    row = attractor_row("tanh", course)
    assert row.verdict == HOLDS and row.measured == 1.0 and "120" in row.note
    # counted on the sphere instead of projective space (two antipodal clusters), or a wrong model
    # that keeps the tokens apart (no noise: about N clusters), does not hold
    assert attractor_row("tanh", dict(course, long_counts=[[30, 2, 2]] * 4)).verdict == FAILS
    assert attractor_row("relu", dict(course, up_to_sign=False, long_counts=[[30, 29, 28], [28, 27, 29]])).verdict == FAILS
    # one stray sample at this sample size: the interval decides
    assert attractor_row("tanh", dict(course, long_counts=[[30, 1, 1]] * 7 + [[29, 4, 3]])).verdict == HOLDS
    assert attractor_row("tanh", dict(course, long_counts=[])).verdict == NOT_MEASURED


def test_motion_rows_fail_on_a_wrong_law():
    from stochformer.report.sections import motion_rows

    # measured in docs/synchronisation.md (ReLU d = 4, σ = 0.5, κ(1) = 0.5, T = 1, 2000 pairs from u0 = 0.5)
    measured = {"sde": {"one_point_rate": -0.755, "one_point_rate_se": 0.017, "one_point_T": 0.4707,
                        "one_point_T_se": 0.0078, "u_mean": 0.7147, "u_mean_se": 0.0080, "tail": 0.411, "tail_se": 0.011}}
    reference = {"u_mean": 0.7222, "u_mean_se": 0.0024, "tail": 0.405, "tail_se": 0.0035}
    predicted = {"one_point_rate": -0.75, "one_point_T": math.exp(-0.75), "u0": 0.5, "threshold": 0.9}
    rows = motion_rows(measured, reference, predicted)
    assert len(rows) == 4 and all(r.verdict == HOLDS for r in rows)
    # a wrong one-point law (rate −κ(1)(d−1), as without the factor 1/2) fails both one-point rows
    wrong = dict(predicted, one_point_rate=-1.5, one_point_T=math.exp(-1.5))
    assert [r.verdict for r in motion_rows(measured, reference, wrong)[:2]] == [FAILS, FAILS]
    # a wrong two-point law: u moving like one token's coordinate twice over, E u_T = 0.5·e^{−κ(1)(d−1)T},
    # and a tail of that law, fail the two-point rows
    bad_ref = {"u_mean": 0.5 * math.exp(-1.5), "u_mean_se": 0.002, "tail": 0.05, "tail_se": 0.002}
    assert [r.verdict for r in motion_rows(measured, bad_ref, predicted)[2:]] == [FAILS, FAILS]
