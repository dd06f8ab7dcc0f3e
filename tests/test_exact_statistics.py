"""Exact tests of what is measured and how a stored verdict is re-derived: the cloud summary
against SPEC §5's formulas and its blocking, the recomputed verdict rows field by field, the
weighted power fit against its construction (defaults, start, evaluation cap, a refit that fails,
float64 whatever the input dtype), and the messages of exact W₂ when POT's iteration cap is
reached. float64, deterministic."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import stochformer.measure.diagnostics as diagnostics
from stochformer.measure.diagnostics import cloud_summary
from stochformer.measure.distances import w2_exact
from stochformer.measure.verdict import FAILS, HOLDS, UNDETERMINED, Comparison, judge, recompute
from stochformer.measure.stats import fit_power_law_weighted

from test_contracts import TOL, close

# ----------------------------------------------------------------- cloud_summary


def _energy_reference(X: torch.Tensor, beta: float) -> torch.Tensor:
    """E_β(μ) = ½ (1/N²) Σ_ij (e^β − e^{β⟨x_i, x_j⟩}) (SPEC §5), diagonal included, from the full Gram matrix."""
    G = X @ X.transpose(-1, -2)
    return 0.5 * (math.exp(beta) - torch.exp(beta * G)).mean(dim=(-1, -2))


def test_cloud_summary_is_the_energy_and_the_mean_token(tokens):
    """cloud_summary(X, β) returns exactly the three entries E_β(μ), the mean token (1/N) Σ x_i:
    (batch, d) and its norm (batch,); β = 1 by default."""
    X = tokens(3, 40, 4, seed=181)
    for kw, beta in (({"beta": 1.5}, 1.5), ({}, 1.0)):
        s = cloud_summary(X, **kw)
        assert set(s) == {"energy", "mean_token", "mean_token_norm"}
        close(s["energy"], _energy_reference(X, beta).numpy())
        m = X.numpy().mean(axis=1)
        close(s["mean_token"], m)
        close(s["mean_token_norm"], np.sqrt((m**2).sum(axis=-1)))


def test_cloud_summary_forms_no_gram_block_over_its_budget(tokens, monkeypatch):
    """The energy is summed over blocks of Gram rows with at most ``block`` entries each (no (N, N)
    matrix) and equals the whole-matrix value: batch 10, N = 50, d = 8, block = 200 (4 rows a block)."""
    X = tokens(10, 50, 8, seed=182)
    shapes: list[tuple[int, ...]] = []
    gram_rows = diagnostics._gram_rows

    def recording(X, rows):
        for s, G in gram_rows(X, rows):
            shapes.append(tuple(G.shape))
            yield s, G

    monkeypatch.setattr(diagnostics, "_gram_rows", recording)
    s = cloud_summary(X, beta=0.7, block=200)
    assert len(shapes) > 1 and all(r * n <= 200 for _, r, n in shapes)
    assert sum(r for _, r, _ in shapes) == 50
    close(s["energy"], _energy_reference(X, 0.7).numpy())


# ----------------------------------------------------------------- recompute


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


# ----------------------------------------------------------------- fit_power_law_weighted

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


# ----------------------------------------------------------------- w2_exact


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
