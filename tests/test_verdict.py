"""The verdict model: each rule's p-value against the interval it is read from, Holm's family-wise
adjustment, "inconclusive" (too few samples, an interval too wide to tell the prediction from the
alternative), "not testable" (a bound beyond the observable's reach), "not measured" /
"undetermined"; and the report's row builders failing on a wrong prediction or a wrong model and
holding on the right one."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm, t as student

from stochformer.report.sections.paper import coupling_row, scenario_row, w2_row
from stochformer.report.sections.rows import SLOPE_TOL, fit_row, rate_row
from stochformer.measure.verdict import (
    FAILS, FAMILY_LEVEL, HOLDS, INCONCLUSIVE, LEVEL, NOT_MEASURED, NOT_TESTABLE, RULES, UNDETERMINED, Z95, Comparison,
    RowTest, decide, family_verdicts, holm, judge, recompute, row_test,
)

TOL = 0.5
Z90 = norm.ppf(0.95)

finite = st.floats(-50, 50, allow_nan=False)
positive = st.floats(1e-3, 10)


@settings(max_examples=300, deadline=None)
@given(p=finite, m=finite, h=positive, tol=st.floats(0, 5), gap=st.floats(0.02, 3))
def test_matches_fails_exactly_when_the_interval_clears_the_band(p, m, h, tol, gap):
    """Alone, "matches" does not hold iff p lies outside [lo − tol, hi + tol] (checked a margin
    ``gap``·h either side of that boundary), and its p-value is 2Φ̄ of the distance beyond tol over SE."""
    lo, hi = m - h, m + h
    for q, outside in ((lo - tol - gap * h, True), (hi + tol + gap * h, True), (lo - tol + gap * h * 0.5, False),
                       (hi + tol - gap * h * 0.5, False)):
        if not outside and not lo - tol <= q <= hi + tol:
            continue
        row = Comparison("q", q, m, (lo, hi), tol=tol)
        assert (row.verdict == FAILS) == outside
        excess = max(0.0, abs(m - q) - tol)
        assert row.p_value == pytest.approx(min(1.0, 2 * norm.sf(excess / (h / Z95))) if excess else 1.0, rel=1e-9, abs=1e-300)


@settings(max_examples=300, deadline=None)
@given(rule=st.sampled_from(["at_most", "at_least"]), p=finite, m=finite, h=positive, tol=st.floats(0, 5),
       gap=st.floats(0.02, 3))
def test_one_sided_bounds_fail_beyond_the_one_sided_5_percent_point(rule, p, m, h, tol, gap):
    """A bound fails alone iff m − 1.645 SE > p + tol (at_most; mirrored for at_least)."""
    se = h / Z95
    sign = 1 if rule == "at_most" else -1
    edge = m - sign * Z90 * se  # the one-sided 95% end facing the bound
    for q, fails in ((edge - sign * (tol + gap * se), True), (edge - sign * (tol - gap * se), False)):
        row = Comparison("q", q, m, (m - h, m + h), rule=rule, tol=tol, alternative=q + sign * (tol + 100 * h))
        assert (row.verdict == FAILS) == fails
        assert row.p_value == pytest.approx(norm.sf(sign * (m - q) / se - tol / se), rel=1e-6, abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(rule=st.sampled_from(["below", "above"]), p=finite, m=finite, h=positive)
def test_directional_rules_hold_only_when_the_interval_is_on_the_predicted_side(rule, p, m, h):
    """"below"/"above": holds iff the whole CI is on the predicted side of p, does not hold iff it is
    significantly on the other (one-sided 5%), inconclusive otherwise."""
    lo, hi = m - h, m + h
    row = Comparison("q", p, m, (lo, hi), rule=rule)
    side = hi < p if rule == "below" else lo > p
    against = (m - p if rule == "below" else p - m) / (h / Z95) > Z90
    expected = HOLDS if side else FAILS if against else INCONCLUSIVE
    if abs(abs(m - p) / (h / Z95) - Z90) > 1e-6 and abs(abs(m - p) - h) > 1e-9:
        assert row.verdict == expected


def test_inconclusive_when_the_interval_cannot_tell_the_prediction_from_the_alternative():
    """A row inside its band holds only when its half-width is at most the distance from the band to
    the alternative; wider, it is inconclusive (for each two- and one-sided rule)."""
    # the tiny report's exponent: 17.3 [−1.11, 35.74] against 1 ± 0.1, alternative 1/2
    assert Comparison("exponent", 1.0, 17.3, (-1.11, 35.74), "matches", 0.1, alternative=0.5).verdict == INCONCLUSIVE
    assert Comparison("λ̄", 0.74, 0.74, (-0.66, 2.14), "matches", 0.074).verdict == INCONCLUSIVE
    for rule, a in (("matches", 2.0), ("at_most", 2.0), ("at_least", 0.0)):
        d = abs(a - 1.0) - 0.1  # distance from the band to the alternative
        assert Comparison("q", 1.0, 1.0, (1.0 - 0.99 * d, 1.0 + 0.99 * d), rule, 0.1, alternative=a).verdict == HOLDS
        assert Comparison("q", 1.0, 1.0, (1.0 - 1.01 * d, 1.0 + 1.01 * d), rule, 0.1, alternative=a).verdict == INCONCLUSIVE
    # an alternative inside the band cannot be told apart by any interval of positive width
    assert Comparison("q", 1.0, 1.0, (0.99, 1.01), tol=0.1, alternative=1.05).verdict == INCONCLUSIVE
    # the default alternative p ± max(|p|/2, 2 tol)
    assert Comparison("q", 2.0, 2.0, (1.1, 2.9)).verdict == HOLDS
    assert Comparison("q", 2.0, 2.0, (0.9, 3.1)).verdict == INCONCLUSIVE


def test_no_interval_from_fewer_than_three_samples_and_students_t_above():
    """The tiny report's count [3, 3] from 2 samples: no interval, inconclusive; from 3 or more, the
    interval is Student's t (wider than 1.96 SE) and its p-value the t tail."""
    row = Comparison.from_samples("count", 3.0, [3.0, 3.0])
    assert row.ci is None and row.n == 2 and row.verdict == INCONCLUSIVE
    assert Comparison.from_mean_se("f", 0.1, 0.6, 0.3, n=2, rule="above").verdict == INCONCLUSIVE
    x = np.array([1.0, 1.2, 0.9, 1.1, 1.3])
    row = Comparison.from_samples("mean", 1.0, x)
    se = x.std(ddof=1) / math.sqrt(5)
    assert row.ci == pytest.approx((x.mean() - student.ppf(0.975, 4) * se, x.mean() + student.ppf(0.975, 4) * se))
    assert row.p_value == pytest.approx(2 * student.sf((x.mean() - 1.0) / se, 4))


def test_a_bound_the_observable_cannot_exceed_is_not_testable():
    """at_most with p + tol at or above the observable's reach cannot fail: "not testable", whatever
    was measured; just below the reach the same measurement is judged (and fails)."""
    for m in (-1.0, 0.05, 0.064):
        assert Comparison("rate", 0.653, m, (m - 0.01, m + 0.01), "at_most", reach=0.064).verdict == NOT_TESTABLE
    assert Comparison("rate", 0.06, 0.064, (0.063, 0.065), "at_most", reach=0.064).verdict == FAILS
    assert Comparison("rate", -0.5, -0.6, (-0.7, -0.5), "at_least", reach=-0.4).verdict == NOT_TESTABLE
    assert Comparison("d", 0.0, -0.1, (-0.2, -0.05), "below", reach=-0.01).verdict == NOT_TESTABLE
    assert Comparison("d", 0.0, -0.1, (-0.2, -0.05), "below", reach=1.0).verdict == HOLDS


@settings(max_examples=200, deadline=None)
@given(ps=st.lists(st.floats(0, 1), min_size=1, max_size=12))
def test_holm_is_the_step_down_of_its_definition(ps):
    """Adjusted p-values: at least the raw ones, in the raw order, the smallest k·p_min, and a row is
    rejected at level α exactly when Holm's step-down p_(i) ≤ α/(k − i) rejects it."""
    adj = holm(ps)
    k = len(ps)
    assert all(a >= p - 1e-15 for a, p in zip(adj, ps)) and all(a <= 1 for a in adj)
    order = sorted(range(k), key=lambda i: ps[i])
    assert all(adj[order[i]] <= adj[order[i + 1]] for i in range(k - 1))
    assert adj[order[0]] == pytest.approx(min(1.0, k * ps[order[0]]))
    for alpha in (0.01, 0.05, 0.2):
        rejected, stop = set(), False
        for i, j in enumerate(order):
            stop = stop or ps[j] > alpha / (k - i)
            if not stop:
                rejected.add(j)
        assert {i for i in range(k) if adj[i] <= alpha} == rejected


def test_holm_keeps_the_family_wise_false_failure_rate_at_its_level():
    """8 true "matches" hypotheses (the motions' family) measured with normal noise, 4000 seeded
    families: alone each row fails 5% of the time, about a third of the families show a failure;
    as one family (recompute), at most 5% (+ 3 binomial SE) do."""
    rng = np.random.default_rng(7)
    any_alone = any_family = 0
    families = 4000
    for _ in range(families):
        m = rng.standard_normal(8)  # true value 0, SE 1
        rows = [Comparison("q", 0.0, x, (x - Z95, x + Z95), alternative=10.0).to_dict() for x in m]
        any_alone += any(Comparison.from_dict(r).verdict == FAILS for r in rows)
        any_family += any(r["verdict"] == FAILS for r in recompute(rows))
    se = math.sqrt(0.05 * 0.95 / families)
    assert abs(any_alone / families - (1 - 0.95**8)) < 4 * math.sqrt(0.34 * 0.66 / families)
    assert any_family / families <= FAMILY_LEVEL + 3 * se


def test_a_row_significant_alone_but_not_in_its_family_is_inconclusive():
    """P(u_T > 0.9) at z = −2.65 (p = 0.008) beside seven rows that hold: × 8 rows, 0.064 > 0.05, so
    the row is inconclusive, not "does not hold"; a wrong law (z = 10) still fails in the family."""
    good = [Comparison("ok", 0.0, 0.1, (0.1 - Z95, 0.1 + Z95), alternative=20.0) for _ in range(7)]
    se = (0.1317 - 0.118) / 2.65
    odd = Comparison("tail", 0.1317, 0.118, (0.118 - Z95 * se, 0.118 + Z95 * se), alternative=0.2)
    assert odd.verdict == FAILS  # alone
    judged = judge([*good, odd])
    assert judged[-1].verdict == INCONCLUSIVE and judged[-1].p_adjusted == pytest.approx(8 * odd.p_value)
    assert all(r.verdict == HOLDS for r in judged[:-1]) and judged[0].family == 8
    wrong = Comparison("tail", 0.1317, 0.0817, (0.0817 - Z95 * 0.005, 0.0817 + Z95 * 0.005))
    assert judge([*good, wrong])[-1].verdict == FAILS
    # rows without a test (not measured, inconclusive for too few samples) are no part of the family
    extra = [Comparison("none", 1.0), Comparison.from_samples("few", 1.0, [1.0, 2.0])]
    assert judge([odd, *extra])[0].family == 1


def test_non_finite_missing_and_unknown():
    for p, lo, hi in ((math.nan, 1.0, 2.0), (1.5, math.nan, 2.0), (1.5, 1.0, math.inf), (None, 1.0, 2.0)):
        assert decide("matches", p, lo, hi, 10.0) == UNDETERMINED
    assert decide("matches", 1.0, None, None) == NOT_MEASURED
    assert Comparison("q", 1.0).verdict == NOT_MEASURED
    with pytest.raises(ValueError, match=r"^rule: unknown rule 'roughly'; valid: " + ", ".join(RULES) + "$"):
        decide("roughly", 1.0, 0.0, 2.0)
    with pytest.raises(ValueError, match="ci: lo must be <= hi"):
        Comparison("q", 1.0, 1.0, (2.0, 1.0))
    with pytest.raises(ValueError, match="tol: must be a finite number >= 0"):
        Comparison("q", 1.0, 1.0, (0.0, 2.0), tol=-1.0)


def test_comparison_cleans_numbers_and_uses_an_exact_measurement_as_its_interval():
    row = Comparison("count", 3, measured=3)
    assert (row.ci, row.verdict) == ((3.0, 3.0), HOLDS)
    assert Comparison("count", 3, measured=4).verdict == FAILS
    assert Comparison("count", 3, measured=4, tol=1.0, alternative=5.5).verdict == HOLDS
    row = Comparison("x", math.inf, measured=math.nan)
    assert (row.predicted, row.measured, row.ci, row.verdict) == (None, None, None, UNDETERMINED)
    row = Comparison("x", 1.0, measured=1.0, ci=(math.nan, 2.0))
    assert (row.ci, row.verdict) == ((None, 2.0), UNDETERMINED)
    row = Comparison("x", 1.0, ci=(0.5, 2.0), alternative=4.0)
    assert (row.measured, row.verdict) == (None, HOLDS)


def test_from_mean_se_and_round_trip():
    row = Comparison.from_mean_se("λ", -1.0, 0.2, 0.5, rule="below", tol=0.1, note="n")
    assert row.quantity == "λ" and row.measured == 0.2
    assert row.ci == (0.2 - Z95 * 0.5, 0.2 + Z95 * 0.5)
    assert (row.rule, row.tol, row.note, row.verdict) == ("below", 0.1, "n", FAILS)
    d = row.to_dict()
    assert list(d)[-1] == "verdict" and d["verdict"] == FAILS and d["hypothesis"] == "θ < p"
    back = Comparison.from_dict({**d, "ci": list(d["ci"]), "verdict": "ignored", "p_value": 9.0})
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
    assert rate_row("λ₁", -1.0, -0.97, 0.02).verdict == HOLDS
    assert rate_row("λ₁", -1.3, -0.97, 0.02).verdict == FAILS
    # measured decorrelation exponent of the quick report with the old fit: 0.53 [0.28, 0.87]
    fit = {"exponent": 0.53, "ci": [0.28, 0.87]}
    assert fit_row("ρ exponent", 1.0, fit, "at_least", SLOPE_TOL, "").verdict == FAILS
    # against 1/2 the interval holds it and tells it from no decorrelation (exponent 0), not from 1/4
    assert fit_row("ρ exponent", 0.5, fit, "at_least", SLOPE_TOL, "", alternative=0.0).verdict == HOLDS
    assert fit_row("ρ exponent", 0.5, fit, "at_least", SLOPE_TOL, "", alternative=0.25).verdict == INCONCLUSIVE
    # a fit from fewer than 3 samples has no interval
    assert fit_row("ρ exponent", 0.5, {**fit, "n": 2}, "at_least", SLOPE_TOL, "").verdict == INCONCLUSIVE


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
    [row] = scenario_row(coords, e, se, 5.0, _pred(-1.0, -0.6, -0.3))
    assert row.rule == "at_most" and row.measured == pytest.approx(-0.5) and row.verdict == HOLDS
    # a wrong (too fast) predicted rate, or a wrong model whose energy decays too slowly, fails
    assert scenario_row(coords, e, se, 5.0, _pred(-1.0, -0.6, -0.8))[0].verdict == FAILS
    e_slow, se_slow = _energy(-0.1)
    assert scenario_row(coords, e_slow, se_slow, 5.0, _pred(-1.0, -0.6, -0.3))[0].verdict == FAILS
    # from 2 runs no interval is formed
    assert scenario_row(coords, e, se, 5.0, _pred(-1.0, -0.6, -0.3), n=2)[0].verdict == INCONCLUSIVE


def test_scenario_row_with_repulsive_attention_judges_epsilon_plus_lambda_bar_prime():
    """γ = −1 with coercive noise: the bound is ε + λ̄' = 2 − 0.3, beyond the largest rate E_β can show
    from its start (N = 16, β = 1): not testable; the decrease of E_β is judged beside it. Judged
    against λ̄' alone (the bound without ε), the same decay −0.2 does not hold."""
    coords = {"activation": "relu", "d": 64, "sigma": 0.1, "gamma": -1.0}
    e, se = _energy(-0.2, e0=0.8)
    pred = {**_pred(-1.0, -0.6, -0.3), "bound_pred": 1.7}
    bound, decrease = scenario_row(coords, e, se, 5.0, pred, N=16, n=8)
    assert bound.rule == "at_most" and bound.predicted == 1.7 and bound.verdict == NOT_TESTABLE
    assert bound.reach == pytest.approx(math.log(0.5 * (15 / 16) * (math.e - math.exp(-1 / 15)) / 0.8) / 5.0)
    assert decrease.rule == "below" and decrease.verdict == HOLDS
    wrong = scenario_row(coords, e, se, 5.0, {**pred, "bound_pred": -0.3}, N=16, n=8)[0]
    assert wrong.verdict == FAILS


def test_scenario_rate_stops_where_the_energy_reaches_float64s_floor():
    """E_β decaying at −20 until it reaches 1.5e-13·E_β(0), then flat (rounding): the rate is that
    of the resolved part, −20, within the bound −10; the average over the whole run (−5.9) would
    fail it. A bound faster than −20 still fails."""
    coords = {"activation": "sigmoid", "d": 128, "sigma": 0.0, "gamma": 0.0}
    t = np.linspace(0, 5.0, 151)
    e = np.maximum(0.84 * np.exp(-20 * t), 0.84 * 1.5e-13)
    [row] = scenario_row(coords, e, 0.01 * e, 5.0, _pred(-1.0, -31.0, -10.0))
    assert row.measured == pytest.approx(-20, rel=1e-9) and row.verdict == HOLDS and "float64" in row.note
    assert scenario_row(coords, e, 0.01 * e, 5.0, _pred(-1.0, -31.0, -25.0))[0].verdict == FAILS
    e_slow = 0.84 * np.exp(-5.9 * t)  # a wrong model: the slower decay, resolved throughout
    assert scenario_row(coords, e_slow, 0.01 * e_slow, 5.0, _pred(-1.0, -31.0, -10.0))[0].verdict == FAILS


def test_scenario_row_without_a_rate_tests_the_decrease_and_skips_unclear_cases():
    coords = {"activation": "relu", "d": 5, "sigma": 0.0, "gamma": -1.0}  # repulsive: no ε, no rate
    e, se = _energy(-0.5)
    [row] = scenario_row(coords, e, se, 5.0, _pred(-1.0, -0.6, -0.3))
    assert row.rule == "below" and row.verdict == HOLDS
    e_up, se_up = _energy(+0.1)  # a wrong model: the energy grows
    assert scenario_row(coords, e_up, se_up, 5.0, _pred(-1.0, -0.6, -0.3))[0].verdict == FAILS
    assert scenario_row(coords, e, se, 5.0, _pred(-0.4, -0.6, -0.3)) == []  # (λ₁ − γ)T = −2 > −2.5
    assert math.isfinite(row.ci[0])


def test_cluster_count_row_tests_the_attractor_itself():
    from types import SimpleNamespace

    from stochformer.measure.clusters import count_clusters
    from stochformer.report.sections.paper import cluster_count_row

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
    from stochformer.report.sections.paper import sync_rows

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
    from stochformer.report.sections.paper import attractor_row

    course = {"up_to_sign": True, "horizon": 117.2, "lambda_1": -0.1706, "long_times": [0.0, 60.0, 120.0],
              "long_counts": [[30, 2, 1], [28, 1, 1], [29, 3, 1], [27, 1, 1]]}
    row = attractor_row("tanh", course)
    assert row.verdict == HOLDS and row.measured == 1.0 and "120" in row.note
    # counted on the sphere instead of projective space (two antipodal clusters), or a wrong model
    # that keeps the tokens apart (no noise: about N clusters), does not hold
    assert attractor_row("tanh", dict(course, long_counts=[[30, 2, 2]] * 4)).verdict == FAILS
    apart = [[30, 29, 28], [28, 27, 29], [29, 28, 27]]
    assert attractor_row("relu", dict(course, up_to_sign=False, long_counts=apart)).verdict == FAILS
    # two samples give no interval
    assert attractor_row("relu", dict(course, up_to_sign=False, long_counts=apart[:2])).verdict == INCONCLUSIVE
    # one stray sample at this sample size: the interval decides
    assert attractor_row("tanh", dict(course, long_counts=[[30, 1, 1]] * 7 + [[29, 4, 3]])).verdict == HOLDS
    assert attractor_row("tanh", dict(course, long_counts=[])).verdict == NOT_MEASURED


def test_motion_rows_fail_on_a_wrong_law():
    from stochformer.report.sections.paper import motion_rows

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


def test_fraction_rows_use_wilsons_interval_inside_zero_one():
    """A fraction of independent trials: Wilson's interval, inside [0, 1] also at 0 successes (a
    normal interval from 0 of 20 would be [0, 0]); fewer than 3 trials give none."""
    from stochformer.measure.stats import clopper_pearson_interval, wilson_interval

    row = Comparison.from_fraction("tail", 0.1, 0, 20, alternative=0.5)
    lo, hi = wilson_interval(0, 20)
    assert row.ci == (lo, hi) and lo == 0.0 and 0.1 < hi < 0.2 and row.verdict == HOLDS
    assert Comparison.from_fraction("tail", 0.5, 0, 20).verdict == FAILS
    assert Comparison.from_fraction("tail", 0.5, 1, 2).verdict == INCONCLUSIVE
    cp = clopper_pearson_interval(0, 20)
    assert cp[0] == 0.0 and cp[1] > hi  # exact, wider


@settings(max_examples=40, deadline=None)
@given(n=st.integers(3, 60), p=st.floats(0.05, 0.95), seed=st.integers(0, 2**31))
def test_fraction_intervals_cover_at_their_level(n, p, seed):
    """Coverage of the 95% fraction intervals over 4000 seeded binomial draws: Clopper–Pearson at
    least 95% at every n >= 3; Wilson's dips below near 0 and 1 at small n (its known minimum, about
    0.84 at n = 3), and stays above 0.91 from n = 30 (a normal interval covers far less there)."""
    from stochformer.measure.stats import clopper_pearson_interval, wilson_interval

    ks = np.random.default_rng(seed).binomial(n, p, 4000)
    table = {k: (wilson_interval(int(k), n), clopper_pearson_interval(int(k), n)) for k in set(ks.tolist())}
    wil = np.mean([table[k][0][0] <= p <= table[k][0][1] for k in ks])
    cp = np.mean([table[k][1][0] <= p <= table[k][1][1] for k in ks])
    se = math.sqrt(0.05 * 0.95 / 4000)
    assert cp >= 0.95 - 4 * se and wil >= (0.83 if n < 30 else 0.91) - 4 * se


def test_motion_tail_rows_use_newcombes_interval_when_the_counts_are_stored():
    from stochformer.report.sections.paper import motion_rows
    from stochformer.measure.stats import newcombe_interval

    measured = {"sde": {"one_point_rate": -0.755, "one_point_rate_se": 0.017, "one_point_T": 0.4707,
                        "one_point_T_se": 0.0078, "u_mean": 0.7147, "u_mean_se": 0.0080, "tail": 0.411, "tail_se": 0.011,
                        "n": 2000, "tail_count": 822}}
    reference = {"u_mean": 0.7222, "u_mean_se": 0.0024, "tail": 0.405, "tail_se": 0.0035, "n": 20000, "tail_count": 8100}
    predicted = {"one_point_rate": -0.75, "one_point_T": math.exp(-0.75), "u0": 0.5, "threshold": 0.9}
    tail = motion_rows(measured, reference, predicted)[3]
    lo, hi = newcombe_interval(822, 2000, 8100, 20000)
    assert tail.ci == pytest.approx((0.405 + lo, 0.405 + hi)) and tail.verdict == HOLDS and "Newcombe" in tail.note
    wrong = dict(reference, tail=0.30, tail_count=6000)  # another law's tail
    assert motion_rows(measured, wrong, predicted)[3].verdict == FAILS


def test_phase_rows_name_the_limit_they_judge_and_the_table_shows_the_finite_depth_shift():
    """Rows of λ̂₁ extrapolated to Δt → 0 are named as the L → ∞ boundary; the shift table gives the
    value at L steps, the shift and whether its sign is the predicted one (the transformer near
    the boundary: +0.015 at L = 50 against the limit's −0.037)."""
    from types import SimpleNamespace

    from stochformer.experiments.phase import PhaseConfig
    from stochformer.report.sections.phase import phase_rows, phase_shift_table

    cfg = PhaseConfig.model_validate({"model": {"dynamics": "transformer", "d": 12, "L": 48, "T": 5.0},
                                      "x_field": "gamma", "y_field": "sigma", "x_values": [-0.5], "y_values": [0.4]})
    res = SimpleNamespace(x=np.array([-0.5]), y=np.array([0.4]), pred_lambda_1=np.array([[-0.037]]),
                          value=np.array([[-0.035]]), se=np.array([[0.002]]), err=np.array([[0.001]]),
                          value_at_L=np.array([[0.015]]))
    [row] = phase_rows(cfg, res)
    assert "L → ∞ boundary" in row.quantity and row.verdict == HOLDS
    [line] = phase_shift_table(cfg, res)["rows"]
    dt = 5.0 / 48
    assert line[4] == 0.015 and line[5] == pytest.approx(0.05) and line[-1] == "no"
    assert line[6] == pytest.approx(-math.log1p(-0.5 * dt) / dt - 0.5)
    assert phase_shift_table(cfg.model_copy(update={"extrapolate": False}), res) is None


def test_the_page_shows_every_verdict_state_the_family_level_and_the_error_rates():
    from stochformer.report.render import comparison_table, summary_table

    rows = [Comparison("a", 1.0, 1.0, (0.9, 1.1)).to_dict(), Comparison("b", 1.0, 3.0, (2.9, 3.1)).to_dict(),
            Comparison("c", 1.0, 1.0, (-5.0, 7.0)).to_dict(),
            Comparison("d", 2.0, 0.0, (-0.1, 0.1), "at_most", reach=0.5).to_dict()]
    html = comparison_table(rows)
    for verdict, cls in ((HOLDS, "holds"), (FAILS, "fails"), (INCONCLUSIVE, "inconclusive"), (NOT_TESTABLE, "untestable")):
        assert f"<td class='{cls}'>{verdict}</td>" in html
    assert "The 3 tested rows of this section are one family" in html and "Holm" in html
    assert "false failure ≤ 0.05 (family of 3)" in html and "power at a" in html
    record = {"name": "s", "title": "S", "spec": "§", "status": "computed", "elapsed_s": 1.0, "comparisons": rows}
    summary = summary_table([record])
    assert "<th>inconclusive</th><th>not testable</th>" in summary
    assert summary.count("<td class='holds'>1</td>") == 1 and "<td class='untestable'>1</td>" in summary


# ----------------------------------------------------------------- recompute: stored rows judged again


def _row(quantity, **kw) -> dict:
    """A stored row as Comparison.to_dict writes it (its stored fields; the verdict last)."""
    base = {"quantity": quantity, "predicted": None, "measured": None, "ci": None, "rule": "matches", "tol": 0.0,
            "note": "", "alternative": None, "reach": None, "n": None}
    return base | kw


def _stored(rows: list[dict]) -> list[dict]:
    """The stored fields and the verdict of recomputed rows (the test's numbers are derived from them)."""
    keys = ("quantity", "predicted", "measured", "ci", "rule", "tol", "note", "alternative", "reach", "n", "verdict")
    return [{k: r[k] for k in keys} for r in rows]


def test_recompute_derives_every_verdict_again():
    """A valid stored row comes back as Comparison.from_dict(row).to_dict(): its stored verdict is
    replaced by the one its numbers give (a CI away from the prediction fails; a contained one holds)."""
    stored = [_row("far", predicted=1.0, measured=5.0, ci=[4.9, 5.1], verdict=HOLDS),
              _row("near", predicted=1.0, measured=1.02, ci=[0.9, 1.1], verdict=FAILS)]
    out = recompute(stored)
    assert _stored(out) == [_row("far", predicted=1.0, measured=5.0, ci=(4.9, 5.1), verdict=FAILS),
                            _row("near", predicted=1.0, measured=1.02, ci=(0.9, 1.1), verdict=HOLDS)]
    assert out == [r.to_dict() for r in judge([Comparison.from_dict(r) for r in stored])]


def test_recompute_turns_each_invalid_row_into_an_undetermined_row_that_says_so():
    """A row that is not a valid Comparison (a bad number, an unknown field, no quantity, not a dict)
    becomes exactly the row of Comparison(quantity or '?', None, note='invalid stored row'),
    verdict 'undetermined'; the rows keep their order and a valid row among them is recomputed."""
    invalid = _row("?", note="invalid stored row", verdict=UNDETERMINED)
    stored = [{"quantity": "bad number", "predicted": "x", "verdict": HOLDS},
              {"quantity": "unknown field", "predicted": 1.0, "colour": "red"},
              {"predicted": 1.0, "measured": 1.0},
              _row("ok", predicted=2.0, measured=2.0, verdict=FAILS),
              {"quantity": "", "predicted": "x"},
              "not a row", 5, None]
    assert _stored(recompute(stored)) == [invalid | {"quantity": "bad number"}, invalid | {"quantity": "unknown field"},
                                          invalid, _row("ok", predicted=2.0, measured=2.0, ci=(2.0, 2.0), verdict=HOLDS),
                                          invalid, invalid, invalid, invalid]


def test_recompute_of_a_table_that_is_not_a_list_is_empty():
    """A stored table that is not a list (missing, a dict, a string) has no rows."""
    for table in (None, {"quantity": "q", "predicted": 1.0}, "rows", 3):
        assert recompute(table) == []
    assert recompute([]) == []


# ------------------------------------------------- a row's p-value and power, from their definitions

#: values on a coarse grid, so that ties (m = p, hi = p, the band's edge) occur
grid = st.integers(-12, 12).map(lambda k: k / 4)


def _reference(rule, p, m, lo, hi, tol, a, n):
    """p-value, power, low-power flag and on-side flag of one row, written from the definitions
    (module docstring of measure.verdict) with scipy: the SE is the half-interval facing the
    hypothesis over the two-sided 95% quantile (normal, or Student-t with n − 1 degrees); the
    p-value is the one-sided tail of the excess beyond the hypothesis (twice it, capped at 1, for
    `matches`); the power is that of a level-5% test (two-sided for `matches`) at the alternative a,
    with the SE of the interval's mean half-width."""
    dist = norm if n is None else student(n - 1)
    q = dist.ppf(0.975)
    excess = {"matches": abs(m - p) - tol, "at_most": m - p - tol, "at_least": p - tol - m, "below": m - p,
              "above": p - m}[rule]
    faces_lower = {"matches": p < m, "at_most": True, "at_least": False, "below": True, "above": False}[rule]
    se = max(0.0, (m - lo) if faces_lower else (hi - m)) / q
    if se == 0:
        pval = 0.0 if excess > 0 else 1.0
    elif rule == "matches":
        pval = 1.0 if excess <= 0 else min(1.0, 2 * dist.sf(excess / se))
    else:
        pval = dist.sf(excess / se)
    if rule in ("below", "above"):
        return pval, None, False, (hi < p if rule == "below" else lo > p)
    distance = {"matches": abs(a - p), "at_most": a - p, "at_least": p - a}[rule] - tol
    width = (hi - lo) / 2
    crit = q if rule == "matches" else dist.ppf(0.95)
    if distance <= 0:
        power = 0.0
    elif width == 0:
        power = 1.0
    else:
        power = dist.cdf(distance / (width / q) - crit)
    return pval, power, width > distance or (width > 0 and distance <= 0), False


@settings(max_examples=400, deadline=None)
@given(rule=st.sampled_from(sorted(RULES)), p=grid, m=grid, below=st.sampled_from([0.0, 0.25, 0.5, 1.5]),
       above=st.sampled_from([0.0, 0.25, 0.5, 1.5]), tol=st.sampled_from([None, 0.0, 0.25, 1.0]),
       a=st.one_of(st.none(), grid), n=st.sampled_from([None, 3, 4, 10, 40]))
def test_row_p_value_and_power_follow_their_definitions(rule, p, m, below, above, tol, a, n):
    """For every rule, interval (ties included: m = p, hi = p, an edge of the band) and sample
    count: the row's p-value, power, low-power and on-side flags are those of their definitions."""
    from stochformer.measure.verdict import default_alternative, row_test
    lo, hi = m - below, m + above
    kwargs = {} if tol is None else {"tol": tol}
    t = row_test(rule, p, m, lo, hi, alternative=a, n=n, **kwargs)
    tol = 0.0 if tol is None else tol
    # the default alternative, from its definition: p ± max(ALT_RTOL·|p|, 2·tol) on the guarded side
    shift = max(0.5 * abs(p), 2 * tol)
    default = {"matches": p + shift, "at_most": p + shift, "at_least": p - shift}.get(rule)
    assert default_alternative(rule, p, tol) == default
    alt = default if a is None else a
    pval, power, low_power, on_side = _reference(rule, p, m, lo, hi, tol, alt, n)
    assert t.state is None
    assert t.p_value == pytest.approx(pval, rel=1e-9, abs=1e-12)
    assert (t.power is None) == (power is None)
    if power is not None:
        assert t.power == pytest.approx(power, rel=1e-9, abs=1e-12)
    assert (t.low_power, t.on_side) == (low_power, on_side)



@settings(max_examples=150, deadline=None)
@given(predicted=st.one_of(st.none(), grid), successes=st.integers(0, 12), extra=st.integers(0, 12),
       rule=st.sampled_from(["matches", "at_most", "at_least"]), tol=st.sampled_from([0.0, 0.1]),
       se=st.sampled_from([0.0, 0.1, 1.0]), n=st.one_of(st.none(), st.integers(1, 8)))
def test_constructors_keep_every_field_at_every_sample_count(predicted, successes, extra, rule, tol, se, n):
    """from_fraction, from_mean_se and from_samples keep the prediction, the measured value (s/t,
    the mean), the sample count and the caller's fields (rule, tol, note), with or without an
    interval (none below MIN_SAMPLES: then inconclusive, with the value still shown)."""
    from stochformer.measure.stats import wilson_interval
    trials = successes + extra
    kw = dict(rule=rule, tol=tol, note="n")
    if trials > 0:
        c = Comparison.from_fraction("q", predicted, successes, trials, **kw)
        assert (c.predicted, c.measured, c.rule, c.tol, c.note) == (predicted, successes / trials, rule, tol, "n")
        if trials < 3:
            assert c.ci is None and c.n == trials and c.verdict == INCONCLUSIVE
        else:
            assert c.ci == pytest.approx(wilson_interval(successes, trials))
    c = Comparison.from_mean_se("q", predicted, 0.5, se, n=n, **kw)
    assert (c.predicted, c.measured, c.n, c.rule, c.tol, c.note, c.family) == (predicted, 0.5, n, rule, tol, "n", 1)
    if n is not None and n < 3:
        assert c.ci is None and c.verdict == INCONCLUSIVE
    else:
        h = (Z95 if n is None else student(n - 1).ppf(0.975)) * se
        assert c.ci == pytest.approx((0.5 - h, 0.5 + h))
    samples = np.arange(float(max(n or 1, 1)))
    c = Comparison.from_samples("q", predicted, samples, **kw)
    assert (c.measured, c.n, c.rule, c.note) == (pytest.approx(samples.mean()), len(samples), rule, "n")


@pytest.mark.parametrize("kw, error, message", [
    (dict(quantity=3), TypeError, "quantity: must be a string (got int)"),
    (dict(n=0), ValueError, "n: must be a whole number of samples >= 1 (got 0)"),
    (dict(n=2.5), ValueError, "n: must be a whole number of samples >= 1 (got 2.5)"),
    (dict(n=True), ValueError, "n: must be a whole number of samples >= 1 (got True)"),
    (dict(tol=-1.0), ValueError, "tol: must be a finite number >= 0 (got -1.0)"),
    (dict(ci=(2.0, 1.0)), ValueError, "ci: lo must be <= hi (got [2.0, 1.0])"),
])
def test_a_malformed_row_is_refused_naming_its_field(kw, error, message):
    args = dict(quantity="q", predicted=1.0, measured=1.5, ci=(1.0, 2.0)) | kw
    with pytest.raises(error) as err:
        Comparison(**args)
    assert str(err.value) == message
    assert Comparison("q", 1.0, 1.5, (1.0, 2.0), n=1).n == 1  # one sample is a valid count (no interval from it)


def test_a_tested_row_without_a_p_value_is_refused():
    from stochformer.measure.verdict import RowTest, family_verdicts
    with pytest.raises(ValueError) as err:
        family_verdicts([RowTest(None)], ["matches"])
    assert str(err.value) == "RowTest: a tested row (state None) must have a p_value"


def test_decide_passes_the_measured_value_and_its_fields_on():
    """decide(rule, p, lo, hi, tol, measured=…, n=…) judges the row with those fields: a measured
    value without an interval is undetermined (not "not measured"), too few samples inconclusive,
    and the tolerance widens the band."""
    assert decide("matches", 0.0, None, None) == NOT_MEASURED
    assert decide("matches", 0.0, None, None, measured=1.0) == UNDETERMINED
    assert decide("matches", 0.0, -1.0, 1.0, n=2) == INCONCLUSIVE
    assert decide("at_most", 0.0, 0.5, 0.6) == FAILS
    assert decide("at_most", 0.0, 0.5, 0.6, 1.0) == HOLDS


def test_half_open_non_finite_and_passed_on_inputs():
    """An interval with one end, an infinite or NaN tolerance: undetermined, for every rule; a NaN
    measured value is replaced by the interval's midpoint, as a missing one is; ``decide`` passes
    ``n``, ``reach`` and ``alternative`` on (a narrow interval from two samples is inconclusive, a
    bound at the observable's reach not testable)."""
    for rule in RULES:
        for lo, hi in ((0.9, None), (None, 1.1)):
            assert row_test(rule, 1.0, 1.0, lo, hi, 0.1).state == UNDETERMINED
        for tol in (math.inf, math.nan):
            assert row_test(rule, 1.0, 1.0, 0.9, 1.1, tol).state == UNDETERMINED
        assert row_test(rule, 1.0, math.nan, 0.9, 1.3, 0.05) == row_test(rule, 1.0, None, 0.9, 1.3, 0.05)
    assert decide("matches", 1.0, 0.99, 1.01) == HOLDS
    assert decide("matches", 1.0, 0.99, 1.01, n=2) == INCONCLUSIVE
    assert decide("at_most", 1.0, 1.1, 1.3, 0.5) == HOLDS
    assert decide("at_most", 1.0, 1.1, 1.3, 0.5, reach=1.5) == NOT_TESTABLE
    assert decide("at_most", 1.0, 1.1, 1.3, 0.5, alternative=1.55) == INCONCLUSIVE  # half-width 0.1 > 1.55 − 1.5


def test_reach_concerns_bounds_only_and_its_edge_cannot_fail():
    """``reach`` marks a bound row not testable when the observable cannot pass the band's edge:
    at the edge itself too (reach = p + tol for at_most, p − tol for at_least: the excess is
    exactly 0 there); a matches row is always tested, whatever its reach."""
    assert row_test("at_most", 1.0, 1.2, 1.1, 1.3, 0.5, reach=1.5).state == NOT_TESTABLE
    assert row_test("at_most", 1.0, 1.2, 1.1, 1.3, 0.5, reach=1.75).state is None
    assert row_test("at_least", 1.0, 0.8, 0.7, 0.9, 0.5, reach=0.5).state == NOT_TESTABLE
    assert row_test("at_least", 1.0, 0.8, 0.7, 0.9, 0.5, reach=0.25).state is None
    for reach in (1.0, 1.05, 0.0):
        assert row_test("matches", 1.0, 1.0, 0.95, 1.05, 0.5, reach=reach).state is None


def test_family_levels_are_strict_and_untested_rows_keep_their_place():
    """A p-value exactly at the level is not significant: adjusted p = FAMILY_LEVEL does not fail,
    raw p = LEVEL does not make a row inconclusive. Rows fixed alone (not measured, inconclusive)
    keep their verdict and their place among tested rows, which Holm adjusts among themselves."""
    assert LEVEL == FAMILY_LEVEL
    assert family_verdicts([RowTest(None, FAMILY_LEVEL)], ["matches"]) == [(HOLDS, FAMILY_LEVEL)]
    mixed = [RowTest(NOT_MEASURED), RowTest(None, 0.001), RowTest(INCONCLUSIVE), RowTest(None, 0.5)]
    assert family_verdicts(mixed, ["matches"] * 4) == [(NOT_MEASURED, None), (FAILS, 0.002), (INCONCLUSIVE, None),
                                                       (HOLDS, 0.5)]


def test_a_row_uses_its_measured_value_and_an_attempt_without_an_interval_is_undetermined():
    """Comparison: the p-value is computed at the measured value, not the interval's midpoint; a
    measurement attempted from enough samples whose interval came out missing is undetermined
    (not "not measured"); samples are summarised in float64 whatever their dtype."""
    row = Comparison("q", 1.0, 1.3, (1.0, 1.35), tol=0.1)
    assert row.p_value == row_test("matches", 1.0, 1.3, 1.0, 1.35, 0.1).p_value
    assert row.p_value != row_test("matches", 1.0, None, 1.0, 1.35, 0.1).p_value
    for n in (3, 4, None):
        assert Comparison("q", 1.0, None, (None, None), n=n).verdict == UNDETERMINED
        assert Comparison("q", 1.0, None, (math.nan, math.nan), n=n).verdict == UNDETERMINED
    x32 = np.random.default_rng(2).uniform(0.5, 1.5, 9).astype(np.float32)
    a = Comparison.from_samples("q", 1.0, torch.from_numpy(x32))
    b = Comparison.from_samples("q", 1.0, x32.astype(np.float64))
    assert (a.measured, a.ci, a.p_value) == (b.measured, b.ci, b.p_value)
