"""Theorem 1.4's bound ε + λ̄' wherever it is judged: Assumption 2's ε for the attention of a
config (and where it is not derived), the largest energy a cloud can have (the reach of a bound
row), ``sync``'s table, report rows and command line (no z-score for the inequality)."""

from __future__ import annotations

import math

import pytest
import torch
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from stochformer.cli import main
from stochformer.config import RunConfig, build_config
from stochformer.measure.diagnostics import energy
from stochformer.experiments.sync import SyncConfig, energy_max, epsilon, predicted_rates, run_sync
from stochformer.report.sections.paper import sync_rows
from stochformer.measure.verdict import FAILS, HOLDS, NOT_TESTABLE
from stochformer.core.sphere import uniform

#: ReLU d = 12, σ_U = 0.4, σ_W = 0.1, repulsive γ = −0.5 (ε = 1): λ̄' = −0.347
REPULSIVE = {"activation": "relu", "d": 12, "sigma_U": 0.4, "sigma_W": 0.1, "gamma": -0.5, "attention": True}


def test_epsilon_is_two_delta_for_repulsive_attention_and_zero_otherwise():
    for gamma, eps in ((-0.5, 1.0), (-2.0, 4.0), (0.0, 0.0), (0.7, 0.0)):
        assert epsilon(build_config({**REPULSIVE, "gamma": gamma}))[0] == eps
    assert epsilon(build_config({**REPULSIVE, "attention": False}))[0] == 0.0
    # not derived: another β for the energy than the attention's, an explicit V, a variant
    eps, why = epsilon(build_config({**REPULSIVE, "energy_beta": 2.0}))
    assert eps is None and "attention β = 1 differs from the energy's β = 2" in why
    assert epsilon(build_config({**REPULSIVE, "V": [[-0.5 if i == j else 0.0 for j in range(12)] for i in range(12)]}))[0] is None
    assert epsilon(build_config({**REPULSIVE, "attention_kind": "usa"}))[0] is None


def test_predicted_bound_adds_epsilon_to_lambda_bar_prime():
    p = predicted_rates(build_config(REPULSIVE))
    assert p["lambda_bar_prime_pred"] == pytest.approx(-0.347, abs=5e-4)
    assert p["epsilon"] == 1.0 and p["bound_pred"] == pytest.approx(1.0 + p["lambda_bar_prime_pred"], abs=1e-15)
    assert predicted_rates(build_config({**REPULSIVE, "energy_beta": 2.0}))["bound_pred"] is None


def test_the_bound_row_holds_against_epsilon_plus_lambda_bar_prime_and_fails_against_lambda_bar_prime_alone():
    """The measured −0.178 ± 0.034 (SE) from uniform tokens: within the theorem's bound 0.653; judged
    against λ̄' = −0.347 alone it would fail; with the bound above the energy's reach it is not testable."""
    row = {"quantity": "energy rate from uniform (bound ε + λ̄', Δt → 0)", "measured": -0.178, "se": 0.034, "err": 0.0,
           "predicted": 0.653, "rule": "at_most", "reach": 1.0, "lambda_bar_prime": -0.347, "note": "ε = −2γ = 1"}
    [judged] = sync_rows([row], extrapolated=True)
    assert judged.rule == "at_most" and judged.verdict == HOLDS and "ε + λ̄'" in judged.quantity
    assert sync_rows([{**row, "predicted": -0.347}], extrapolated=True)[0].verdict == FAILS
    assert sync_rows([{**row, "reach": 0.064}], extrapolated=True)[0].verdict == NOT_TESTABLE


@settings(max_examples=60, deadline=None)
@given(N=st.integers(2, 12), d=st.integers(2, 8), beta=st.floats(0.1, 5.0), seed=st.integers(0, 2**31))
def test_no_cloud_has_more_energy_than_energy_max(N, d, beta, seed):
    """E_β of any N unit tokens is at most ½(1 − 1/N)(e^β − e^{−β/(N−1)}): random clouds, and a regular
    simplex (N ≤ d + 1, every cosine −1/(N−1)) reaches it."""
    X = uniform(16, N, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    top = energy_max(N, beta)
    assert float(energy(X, beta).max()) <= top * (1 + 1e-12)
    if N <= d + 1:
        centred = torch.eye(N, dtype=torch.float64) - 1.0 / N  # the vertices of a regular simplex in 1⊥ ⊂ R^N
        basis = torch.linalg.svd(centred)[2][: N - 1]  # an orthonormal basis of 1⊥
        pts = torch.nn.functional.pad(centred @ basis.T, (0, d - (N - 1)))
        pts = pts / torch.linalg.vector_norm(pts, dim=-1, keepdim=True)
        assert float(energy(pts[None], beta)[0]) == pytest.approx(top, rel=1e-9)


def test_run_sync_with_repulsive_attention_judges_the_theorems_bound(tmp_path):
    """A real run with γ = −0.5: the table's bound row is ε + λ̄' with its reach and no z-score, the
    report row judges it against that bound, and the command line prints no z for it."""
    overrides = ["model.activation=relu", "model.d=12", "model.sigma_U=0.4", "model.sigma_W=0.1", "model.gamma=-0.5",
                 "model.attention=true", "model.dynamics=sde", "model.N=4", "model.batch=8", "pairs=8", "model.L=8",
                 "model.T=1", "bootstrap=20"]
    res = run_sync(build_config({}, overrides, model=SyncConfig))
    rows = {r["rule"]: r for r in res.table()}
    bound = rows["at_most"]
    assert bound["predicted"] == pytest.approx(1.0 + res.predicted["lambda_bar_prime_pred"])
    assert bound["z"] is None and rows["matches"]["z"] is not None
    reach = res.measured["energy_rate_uniform_reach"]
    assert bound["reach"] == reach and math.isfinite(reach)
    judged = sync_rows(res.table(), extrapolated=True)[-1]
    assert judged.predicted == bound["predicted"] and judged.reach == reach
    assert (judged.verdict == NOT_TESTABLE) == (bound["predicted"] >= reach)
    out = tmp_path / "run"
    r = CliRunner().invoke(main, ["sync", "--quiet", "--out", str(out)] + [a for o in overrides for a in ("--set", o)])
    assert r.exit_code == 0, r.output
    [line] = [x for x in r.output.splitlines() if "bound" in x]
    assert line.split()[-1] == "—" and f"{bound['predicted']:.5g}" in line


def test_sync_bound_is_not_derived_for_another_energy_beta():
    cfg = RunConfig.model_validate({**REPULSIVE, "energy_beta": 3.0})
    p = predicted_rates(cfg)
    assert p["epsilon"] is None and p["bound_pred"] is None and "differs" in p["epsilon_note"]
