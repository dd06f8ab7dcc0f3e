"""``stochformer converge``: the coupling of SPEC §3, the output files, resuming, bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from stochformer.cli import main
from stochformer.config import ConfigError, build_config
from stochformer.experiments import converge as cv

TINY = ["model.batch=12", "samples_per_task=6", "depths=[2,4,8]", "widths=[8,32]", "refine=4", "bootstrap=200", "model.N=4",
        "model.T=0.5"]


def _cfg(extra=()):
    return build_config({}, TINY + list(extra), model=cv.ConvergeConfig)


def test_cli_end_to_end_writes_convergence_json(tmp_path):
    out = tmp_path / "run"
    res = CliRunner().invoke(main, ["converge", "--quiet", "--out", str(out), *sum((["--set", s] for s in TINY), [])])
    assert res.exit_code == 0, res.output
    data = json.loads((out / "convergence.json").read_text())
    for key in ("exponent_L", "exponent_m"):
        assert math.isfinite(data[key])
        lo, hi = data[f"{key}_ci"]
        assert lo <= hi
    assert len(data["table"]) == 3 * 3  # depths × (widths + ∞)
    row = data["table"][0]
    assert {"L", "m", "err_layer", "err_layer_se", "err_continuous", "err_continuous_se"} <= set(row)
    assert data["widths"][-1] is None  # m = ∞
    assert {"additive_layer", "additive_continuous", "exponent_L_continuous", "exponent_L_large_m"} <= set(data["fits"])
    assert (out / "convergence.png").stat().st_size > 0
    assert json.loads((out / "config.json").read_text())["command"] == "converge"
    assert not (tmp_path / "run.tasks").exists()  # the task store is removed once the run is complete


def test_errors_are_ordered_and_reproducible():
    """Sanity of the coupling on a tiny grid: every error is ≥ 0, the continuous-time sup is ≥ the
    layer-time sup (it includes the layer times), and the same seed gives the same numbers."""
    cfg = _cfg()
    a, b = cv.run_converge(cfg), cv.run_converge(cfg)
    for kind in cv.KINDS:
        assert np.array_equal(a.errors[kind], b.errors[kind])
        assert (a.errors[kind] >= 0).all()
    assert (a.errors["continuous"] >= a.errors["layer"] - 1e-15).all()
    assert a.errors["layer"].shape == (3, 3, 12)


def test_the_mlp_is_the_configs_own_at_every_width():
    """Every field of the model's MLP reaches the coupled widths: float32 draws of the inner weights
    (``model.draw_precision``) change the finite-width errors and leave m = ∞ (no weights) unchanged."""
    full, single = cv.run_converge(_cfg()), cv.run_converge(_cfg(["model.draw_precision=float32"]))
    for kind in cv.KINDS:
        assert not np.array_equal(full.errors[kind][:, :-1], single.errors[kind][:, :-1])
        assert np.array_equal(full.errors[kind][:, -1], single.errors[kind][:, -1])


def test_coupling_keeps_the_paths_together():
    """The coupling drives both systems with the same Brownian path: at T the m = ∞ transformer
    (L = 8) is far closer to the SDE than two independently driven copies from the same X₀ would be
    (E (1/N)Σ|X − X'|² ≈ 2κ(1)(d−1)T for small noise). A misaligned noise stream would give that
    scale; the coupled error is O(1/L)."""
    from stochformer.model.kernel import NoiseKernel

    cfg = _cfg()
    res = cv.run_converge(cfg)
    mean, se = res.mean_se("layer")
    independent = 2 * NoiseKernel("relu", cfg.model.d).kappa1 * (cfg.model.d - 1) * cfg.model.T
    assert mean[-1, -1] + 4 * se[-1, -1] < 0.1 * independent, (mean[:, -1], independent)
    assert mean[-1, -1] < mean[0, -1]  # finer layers, smaller error (L = 8 against L = 2)


def test_killed_run_resumes_from_the_store(tmp_path, monkeypatch):
    """Finished (depth, part of the samples) tasks are stored; a second run with the store computes nothing."""
    cfg = _cfg()
    store = tmp_path / "tasks"
    first = cv.run_converge(cfg, store=store)
    assert len(list(store.glob("*.json"))) == 3 * 2

    def boom(*args, **kwargs):
        raise AssertionError("a stored task was recomputed")

    monkeypatch.setattr(cv, "_coupled_errors", boom)
    second = cv.run_converge(cfg, store=store)
    assert np.array_equal(first.errors["layer"], second.errors["layer"])


@pytest.mark.parametrize(
    "override, field",
    [("depths=[3,4]", "depths"), ("widths=[8]", "widths"), ("refine=0", "refine"), ("model.mlp=false", "model.mlp"),
     ("model.batch=2", "model.batch: must be >= 4"), ("model.L=16", "model.L: has no effect in converge"),
     ("model.init.kind=npy", "model.init.path: required"), ("N=4", "unknown field")],
)
def test_bad_config_is_one_clear_error_and_no_folder(tmp_path, override, field):
    with pytest.raises(ConfigError, match=field):
        build_config({}, [override], model=cv.ConvergeConfig)
    out = tmp_path / "run"
    res = CliRunner().invoke(main, ["converge", "--out", str(out), "--set", override])
    assert res.exit_code != 0 and field in res.output
    assert not out.exists()


def test_fit_recovers_known_exponents():
    """The fitting code on synthetic per-sample errors err = (a/L + b/m)·(1 + noise): exponents 1."""
    rng = np.random.default_rng(0)
    depths, widths = [8, 16, 32, 64], [16.0, 64.0, 256.0, math.inf]
    L = np.asarray(depths, float)[:, None, None]
    inv_m = np.asarray([1 / w for w in widths])[None, :, None]
    clean = 0.05 / L + 0.8 * inv_m
    errors = {k: clean * rng.lognormal(0, 0.3, size=(4, 4, 400)) for k in cv.KINDS}
    fits = cv.fit_convergence(depths, widths, errors, 300, 0)
    lo, hi = fits["exponent_L"]["ci"]
    assert lo - 0.05 < 1.0 < hi + 0.05
    a = fits["additive_layer"]
    assert abs(a["a"]["value"] / 0.05 - 1) < 0.1 and abs(a["b"]["value"] / 0.8 - 1) < 0.1


def test_additive_law_residual_has_an_interval_that_tells_a_cross_term():
    """The largest relative residual of a/L + b/m comes with a Student's t interval over the
    samples: on errors of the additive law it lies below the row's 0.25; on errors with a cross
    term (err = 1/L + 1/m + 20/√(L·m), limits that do not commute at these sizes) it lies above."""
    from stochformer.report.sections.paper import ADDITIVE_RESIDUAL

    rng = np.random.default_rng(1)
    depths, widths = [8, 16, 32, 64], [16.0, 64.0, 256.0, math.inf]
    L = np.asarray(depths, float)[:, None, None]
    m = np.asarray(widths)[None, :, None]
    for clean, holds in ((0.05 / L + 0.8 / m, True), (1 / L + 1 / m + 20 / np.sqrt(L * m), False)):
        errors = {k: clean * rng.lognormal(0, 0.3, size=(4, 4, 16)) for k in cv.KINDS}
        res = cv.fit_convergence(depths, widths, errors, 300, 0)["additive_layer"]["residual"]
        lo, hi = res["ci"]
        assert res["n"] == 16 and lo <= res["value"] <= hi
        assert (hi < ADDITIVE_RESIDUAL) if holds else (lo > ADDITIVE_RESIDUAL), res
