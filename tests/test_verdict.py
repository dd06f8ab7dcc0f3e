"""The verdict rules at their boundaries: each rule holds exactly up to its stated inequality and
fails just past it, the tolerance enters with its sign, and missing or non-finite numbers give
"not measured" / "undetermined", never a verdict."""

from __future__ import annotations

import math

import pytest

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
