"""The report's "exact theory" section (SPEC §8): its rows at tiny sizes (fixed seed), each rule fed
a wrong prediction or a wrong model and seen to fail, rows that the data cannot decide seen
inconclusive, its figures, and its config's errors.

False-failure rate of the rules: every row is judged by `stochformer.measure.verdict` as one
family (Holm at `FAMILY_LEVEL` = 5%), so where every prediction holds at the sizes run, some row
of the section fails with chance at most 5% (each row alone: at most 5%); measured by
``python benchmarks/false_failures.py --sections exact-theory`` (docs/reproduce.md)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from stochformer.config import ConfigError
from stochformer.experiments.exact import ExactConfig, run_exact
from stochformer.experiments.spectrum import predicted_spectrum
from stochformer.measure.verdict import FAILS, HOLDS, INCONCLUSIVE, recompute
from stochformer.model.kernel import NoiseKernel
from stochformer.report.registry import get_section
from stochformer.report.runner import plan
from stochformer.report.sections.theory import (
    PAIR_TOL, energy_rows, pair_rows, phase_rows, spectrum_rows, theory_rows,
)
from stochformer.theory import PairDiffusion, law


@pytest.fixture(scope="module")
def tiny():
    """The section's tiny config (as the report resolves it) and its run's ``to_dict()``."""
    [item] = [p for p in plan("tiny", only=["exact-theory"]) if p.section.name == "exact-theory"]
    res = run_exact(item.config)
    return item.config, res, res.to_dict()


def verdicts(rows) -> list[str]:
    return [r["verdict"] for r in recompute([c.to_dict() for c in rows])]


def test_rows_at_tiny_sizes_hold_or_are_inconclusive_and_their_count(tiny):
    cfg, _, numbers = tiny
    rows = theory_rows(numbers)
    d = cfg.model.d
    kept = sum(1 for t in numbers["energy"]["times"] if t > 0)
    assert len(rows) == len(cfg.betas) + (d - 1) + 2 + kept + 1 + 2 * len(cfg.phase_points) + len(cfg.cluster_settings)
    v = verdicts(rows)
    assert FAILS not in v and v.count(HOLDS) >= len(rows) // 2
    # the predictions are the theory's own: P(Z_T < 0) of the exact law, the antipode's threshold
    pair = numbers["pair"]
    kern = NoiseKernel("erf", d)
    assert pair["beta_star"] == pytest.approx(PairDiffusion(kern, 1.0, 1.0).beta_star)
    assert pair["beta_star"] > 0.5 and pair["p_antipodal"][0] == 0.0  # β = 0.5 < β*: the antipode repels
    assert pair["p_antipodal"][1] > 0  # β = 2 > β*
    assert pair["p_T"][1] == pytest.approx(law(PairDiffusion(kern, 2.0, 1.0), 0.0, cfg.model.T).cdf(0.0))
    assert pair["p_T_free"][0] == pytest.approx(0.5, abs=1e-6)  # odd κ, no attention, z0 = 0: symmetric
    ph = numbers["phase"]
    assert len(ph["g_c"]) == len(cfg.sigmas) and ph["g_c"][0] == pytest.approx(8.00689, rel=1e-4)


def test_a_wrong_pair_law_does_not_hold(tiny):
    _, _, numbers = tiny
    pair = copy.deepcopy(numbers["pair"])
    assert verdicts(pair_rows(pair)).count(FAILS) == 0
    pair["p_T"] = list(pair["p_T_free"])  # the law without attention: 1/2 where the runs give ~0 and ~0.15
    assert verdicts(pair_rows(pair)).count(FAILS) == len(pair["beta"])


def test_a_wrong_spectrum_does_not_hold(tiny):
    _, res, numbers = tiny
    spec = copy.deepcopy(numbers["spectrum"])
    p = res.spectrum.predictions
    wrong = predicted_spectrum(p["kappa"], -p["kappa_prime"], spec["d"])  # κ' of the wrong sign
    spec["predicted"] = list(wrong["spectrum"])
    spec["law"]["spacing"]["predicted"] = wrong["spacing"]
    v = verdicts(spectrum_rows(spec))
    assert v[0] == FAILS and v[-1] == FAILS


def test_a_wrong_energy_or_a_too_tight_bound_does_not_hold(tiny):
    _, _, numbers = tiny
    energy = copy.deepcopy(numbers["energy"])
    assert FAILS not in verdicts(energy_rows(energy))
    energy["lambda_bar_prime"] = 3 * energy["rate"]  # a "bound" below the true decay rate
    assert verdicts(energy_rows(energy))[-1] == FAILS
    energy = copy.deepcopy(numbers["energy"])
    energy["exact"] = [3 * x for x in energy["exact"]]  # three times the exact energy
    assert verdicts(energy_rows(energy))[0] == FAILS


def test_a_point_on_the_wrong_side_of_the_critical_gain_does_not_hold(tiny):
    _, _, numbers = tiny
    points = copy.deepcopy(numbers["points"])
    assert FAILS not in verdicts(phase_rows(points))
    for pt in points:
        pt["predicted"] = -pt["predicted"]  # the phases swapped
    v = verdicts(phase_rows(points))
    assert v[1] == FAILS and v[3] == FAILS  # the sign rows of both points


def test_rows_the_data_cannot_decide_are_inconclusive(tiny):
    _, _, numbers = tiny
    pair = copy.deepcopy(numbers["pair"])
    pair["n"] = [2] * len(pair["beta"])  # fewer than MIN_SAMPLES pairs: no interval
    assert set(verdicts(pair_rows(pair))) == {INCONCLUSIVE}
    # an interval wider than the distance to the alternative (no attention): inconclusive, not "holds"
    pair = copy.deepcopy(numbers["pair"])
    pair["p_T"][0] = pair["p_hat"][0] = 0.45
    pair["ci"][0] = [0.45 - 0.2, 0.45 + 0.2]
    assert verdicts(pair_rows(pair))[0] == INCONCLUSIVE
    assert PAIR_TOL < 0.05


def test_figures_are_drawn(tiny):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from stochformer.plotting import theory as theory_plots

    _, res, numbers = tiny
    for fig in (theory_plots.plot_antipodal(numbers["pair"]), theory_plots.plot_energy(numbers["energy"]),
                theory_plots.plot_phase_measured(res.phase, numbers["points"])):
        assert fig.axes and fig.axes[0].lines
        plt.close(fig)
    fig, ax = plt.subplots()
    assert theory_plots.plot_antipodal(numbers["pair"], ax=ax) is fig
    plt.close(fig)


def test_section_output_is_finite_and_registered(tiny):
    from stochformer.report.registry import SectionContext
    from stochformer.report.runner import nonfinite_paths

    section = get_section("exact-theory")
    cfg, _, _ = tiny
    out = section.run(cfg, SectionContext())
    d = out.to_dict()
    assert not nonfinite_paths(d["numbers"]) and len(d["figures"]) == 4 and len(d["tables"]) == 2
    assert all(math.isfinite(c["measured"]) for c in d["comparisons"] if c["measured"] is not None)
    ds = tiny[1].to_dataset()  # every variable described, the run record attached
    assert ds["p_below"].shape == (len(cfg.betas),) and ds["lambda_1_gain"].dims == ("sigma_U", "gain")
    assert ds.attrs["command"] == "exact"


@pytest.mark.parametrize("field, value, match", [
    ("betas", [1.0, -1.0], "betas: every value must be finite and > 0"),
    ("phase_points", [[1.0]], "phase_points: each point is"),
    ("spectrum_L", 30, "spectrum_L: must be a multiple of 4"),
    ("energy_L", 101, "energy_L, energy_every: must be even"),
    ("cluster_settings", [["relu", 2, 0.0]], "cluster_settings: each is"),
    ("cluster_settings", [["relu", 5, -0.1]], "cluster_settings: each is"),
    ("cluster_settings", [["nonesuch", 5, 0.0]], "activation"),
])
def test_bad_config_names_the_field(field, value, match):
    with pytest.raises((ValueError, ConfigError), match=match):
        ExactConfig(**{field: value})
    with pytest.raises((ValueError, ConfigError), match="model.N"):
        ExactConfig(model={"N": 3})
    assert np.isfinite(ExactConfig().z0)


def test_cluster_rows_follow_the_criterion_and_a_wrong_one_does_not_hold():
    """The section's cluster rows on stored numbers (the measurement itself: tests/test_cluster_spectrum.py):
    a setting predicted stable whose relative exponent is clearly negative holds, and the same numbers
    stored with the wrong prediction (spreads) do not hold; too few samples are inconclusive."""
    from stochformer.report.sections.theory import cluster_rows

    base = {"activation": "sigmoid", "d": 64, "sigma": 0.0, "delta": 1.0, "lambda_1": -7.876, "predicted_stable": True,
            "measured": -5.4, "se": 0.05, "n": 16, "centre": -6.3, "contracted": 1.0}
    assert [r.verdict for r in cluster_rows([base])] == [HOLDS]
    assert [r.verdict for r in cluster_rows([{**base, "predicted_stable": False}])] == [FAILS]
    assert [r.verdict for r in cluster_rows([{**base, "measured": -0.01, "se": 0.05}])] == [INCONCLUSIVE]


def test_energy_mean_is_extrapolated_from_two_step_sizes(tiny):
    """The section's energy mean is 2m(L) − m(L/2) of the two levels' independent runs (the Heun step's
    first-order bias removed), the SE √(4 SE_L² + SE_{L/2}²) ≥ 2 SE_L; the levels are L and L/2."""
    cfg, _, numbers = tiny
    e = numbers["energy"]
    assert e["levels"] == [cfg.energy_L, cfg.energy_L // 2]
    m_fine, m_coarse = (np.asarray(m) for m in e["mean_by_level"])
    np.testing.assert_allclose(e["mean"], 2 * m_fine - m_coarse, rtol=1e-12)
    assert np.all(np.asarray(e["se"])[1:] > 0)
