"""The report's ``neighbours`` section (docs/neighbours.md) at the tiny size: every check gives its
rows, the rows are one family, and each rule says "does not hold at this size" when the prediction
is replaced by a wrong one or the model by a wrong model (the same wrong predictions as
tests/test_neighbours.py), judged within the whole family (Holm)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from pydantic import ValidationError

from figure_audit import audit
from stochformer.experiments.neighbours import (
    NeighboursConfig,
    NeighboursResult,
    antipodal_angle,
    angle,
    forcing_rate,
    logistic,
    run_neighbours,
)
from stochformer.measure.verdict import FAILS, HOLDS
from stochformer.model.quadratic import QuadraticField
from stochformer.plotting import neighbours as plots
from stochformer.report import registered
from stochformer.report.registry import get_section
from stochformer.report.sections.neighbours import neighbours_output
from stochformer.theory import PairDiffusion
from stochformer.theory.evolution import expectation


@pytest.fixture(scope="module")
def section():
    registered()  # imports the sections (they register themselves)
    return get_section("neighbours")


@pytest.fixture(scope="module")
def result(section) -> NeighboursResult:
    """Every check at the section's tiny sizes (seed 0)."""
    return run_neighbours(NeighboursConfig(**section.sizes["tiny"]))


def _verdicts(res: NeighboursResult, where: str) -> list[str]:
    """The verdicts of the rows whose quantity contains ``where``, judged within the whole family."""
    return [r.verdict for r in res.rows() if where in r.quantity]


def test_section_is_last_and_runs_at_tiny_size(section, result):
    """Registered last; the section's output holds 29 rows (8 + 8 quadratic forms, 4 common/independent,
    4 m(t), 2 large β, 3 value noise), five figures and a table; no row fails at the tiny size."""
    assert registered()[-1].name == "neighbours"
    cfg = NeighboursConfig(**section.sizes["tiny"])
    out = neighbours_output(result, cfg.seed).to_dict()
    rows = out["comparisons"]
    assert len(rows) == 29 and all(r["family"] == 29 for r in rows)
    assert [r["verdict"] for r in rows].count(FAILS) == 0
    assert [r["verdict"] for r in rows].count(HOLDS) >= 27
    assert len(out["figures"]) == 5 and len(out["tables"][0]["rows"]) == len(cfg.value_points)


def test_quadratic_rows_reject_the_wrong_generator_and_a_faster_bound(result):
    """Unforced: the exact law of the unsymmetrised field (generator L₀/2, the law at t/2) fails;
    forced: the unforced law fails, and a bound with twice the published rate λ_γ fails."""
    d = result.unforced.d
    half = expectation(PairDiffusion(QuadraticField(0.0).pair_kernel(d)), antipodal_angle, result.unforced.times / 2,
                       z0=0.0, distances=True)
    wrong = dataclasses.replace(result, unforced=dataclasses.replace(result.unforced, exact=half))
    assert FAILS in _verdicts(wrong, f"(quadratic forms, d = {d}) vs exact")
    unforced_law = expectation(PairDiffusion(QuadraticField(0.0).pair_kernel(d)), angle, result.forced.times, z0=-0.99,
                               distances=True)
    wrong = dataclasses.replace(result, forced=dataclasses.replace(result.forced, exact=unforced_law))
    assert FAILS in _verdicts(wrong, "γ = 1) vs exact")
    fast = math.pi * np.exp(-2 * forcing_rate(result.forced.gamma, d) * result.forced.times)
    wrong = dataclasses.replace(result, forced=dataclasses.replace(result.forced, bound=fast))
    assert FAILS in _verdicts(wrong, "γ = 1) vs the published bound")
    assert _verdicts(result, "published bound") == [HOLDS] * 8


def test_contrast_rows_reject_swapped_predictions(result):
    """Swapping the common and the independent predictions (no synchronisation under the common
    field, synchronisation under independent ones) fails on both sides, in both d."""
    swapped = [dataclasses.replace(c, common_exact=c.independent_exact, independent_exact=c.common_exact)
               for c in result.contrast]
    verdicts = _verdicts(dataclasses.replace(result, contrast=swapped), "E z_T")
    assert verdicts == [FAILS] * 4


def test_homogenized_rows_reject_wrong_time_scales(result):
    """β = 0: the rate 2u(1 − u) and the frozen m (time scale σ_V² t, without the factor d) fail;
    large β: the frozen pair (z₀, z₀²) fails."""
    o = result.overlap
    for factor in (2.0, 1.0 / (o.d - 1)):
        pred = logistic(1.0 / o.N, factor * o.sigma_V**2 * (o.d - 1) * o.times)
        wrong = dataclasses.replace(result, overlap=dataclasses.replace(o, predicted=pred))
        assert FAILS in _verdicts(wrong, "m(t = ")
    z0 = result.large_beta.z0
    frozen = dataclasses.replace(result.large_beta, exact={"z": z0, "z2": z0 * z0})
    assert FAILS in _verdicts(dataclasses.replace(result, large_beta=frozen), "(s = ")


def test_value_rows_reject_the_linear_kernel(result):
    """At every (d, β), below the threshold too, the linear kernel's P = arccos(z₀)/π = ½ fails."""
    wrong = [dataclasses.replace(v, predicted=0.5) for v in result.value]
    assert _verdicts(dataclasses.replace(result, value=wrong), "P(antipodal)") == [FAILS] * len(result.value)
    below = [v for v in result.value if v.beta <= 0.5 * math.acosh(max(v.d - 2, 1))]
    assert below and all(v.predicted == 0.0 for v in below)


def test_figures_keep_the_figure_rules(result):
    """Each of the section's five figures: no breach of the report's figure rules (tests/figure_audit.py)."""
    import matplotlib.pyplot as plt

    n = result.to_dict()
    c = n["curves"]
    figs = [plots.plot_logistic(n["overlap"], c["logistic"]),
            plots.plot_large_beta(n["large_beta"], c["linear"], c["aligned"]),
            plots.plot_attractor(n["unforced"], n["forced"], c),
            plots.plot_value_transition(c["value"], n["value"]),
            plots.plot_contrast(n["contrast"])]
    try:
        for fig in figs:
            assert audit(fig) == []
    finally:
        for fig in figs:
            plt.close(fig)


@pytest.mark.parametrize("field, value, match", [
    ("value_points", [[1, 1.0]], "value_points"),
    ("value_points", [[3, 0.0]], "value_points"),
    ("value_betas", [0.5, -1.0], "value_betas"),
    ("gamma", 0.0, "gamma"),
    ("large_beta_dt", 0.5, "large_beta_dt"),
])
def test_config_refuses_bad_fields(field, value, match):
    with pytest.raises(ValidationError, match=match):
        NeighboursConfig(**{field: value})
