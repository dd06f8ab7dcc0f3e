"""The ``chaos`` experiment: config validation, a tiny end-to-end run through the CLI, per-seed
reproducibility, and the decorrelation estimator on a case with a known answer."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from stochformer.cli import main
from stochformer.config import ConfigError, build_config
from stochformer.experiments import chaos
from stochformer.experiments.chaos import ChaosConfig, coupling_task, decorrelation_task, run_chaos

TINY = ["model.N=64", "sizes=[8,16,32]", "dims=[3,5]", "model.batch=3", "dims_batch=2", "w2_batch=2", "model.L=4",
        "records=2", "model.features=32", "decor_sizes=[4,8]", "decor_repeats=64", "decor_fields=2", "bootstrap=100"]


def _cfg(extra=()) -> ChaosConfig:
    return build_config(None, TINY + list(extra), model=ChaosConfig)


@pytest.mark.parametrize(
    "override, field",
    [("sizes=[8,96]", "sizes"), ("model.noise=mlp", "model.noise: chaos needs one of"), ("dims=[4]", "dims"), ("decor_sizes=[2,4]", "decor_sizes"),
     ("model.batch=1", "model.batch: must be >= 2"), ("model.integrator=rk4", "model.integrator"),
     ("model.init.kind=cluster", "model.init.kind")],
)
def test_bad_config_names_the_field(override, field):
    with pytest.raises(ConfigError, match=field):
        _cfg([override])


def test_cli_tiny_run_writes_tables(tmp_path):
    out = tmp_path / "run"
    res = CliRunner().invoke(main, ["chaos", "--quiet", "--out", str(out), *sum((["--set", s] for s in TINY), [])])
    assert res.exit_code == 0, res.output
    data = json.loads((out / "chaos.json").read_text())
    assert isinstance(data["exponent_coupling"], float)
    lo, hi = data["exponent_coupling_ci"]
    assert lo <= data["exponent_coupling"] <= hi
    for d in ("3", "5"):
        row = data["coupling"][d]
        assert np.asarray(row["err2_mean"]).shape == (3, 3)  # (records + 1, sizes)
        assert np.asarray(row["w2_mean"]).shape == (2, 3)  # (w2_records + 1, sizes)
        assert row["w2_method"] == "exact" and row["w2_warnings"] == []
        assert np.all(np.asarray(row["err2_mean"])[0] == 0)  # shared initial points
        assert len(row["r_d"]) == 3
    assert set(data["fits"]) >= {"coupling", "w2", "sliced_w2", "r_d", "decorrelation"}
    assert len(data["decorrelation"]["rho"]) == 2
    for name in ("config.json", "dataset.nc", "chaos.png", "density.png"):
        assert (out / name).is_file()
    assert not (tmp_path / "run.tasks").exists()
    assert json.loads((out / "config.json").read_text())["command"] == "chaos"


def test_cli_bad_input_leaves_no_folder(tmp_path):
    res = CliRunner().invoke(main, ["chaos", "--out", str(tmp_path / "x"), "--set", "sizes=[4,5000]"])
    assert res.exit_code != 0 and "sizes" in res.output
    assert not (tmp_path / "x").exists()


def test_killed_run_resumes_from_store(tmp_path, monkeypatch):
    """Finished tasks are stored: a second run with the same store recomputes nothing (the
    particle evolution is replaced by one that fails) and gives the same tables."""
    cfg = _cfg(["dims=[3]"])
    first = run_chaos(cfg, store=tmp_path / "tasks")

    def boom(*args, **kwargs):
        raise AssertionError("task recomputed")

    monkeypatch.setattr(chaos, "solve", boom)
    second = run_chaos(cfg, store=tmp_path / "tasks")
    assert np.array_equal(first.coupling["3"]["err2"], second.coupling["3"]["err2"])
    assert first.exponent_coupling == second.exponent_coupling


def test_coupling_task_reproducible_per_seed():
    config = _cfg().model_dump(mode="json")
    a = coupling_task(config, 3, seed=5, with_w2=True, keep_cloud=False)
    b = coupling_task(config, 3, seed=5, with_w2=True, keep_cloud=False)
    c = coupling_task(config, 3, seed=6, with_w2=True, keep_cloud=False)
    for k in ("err2", "w2", "sw2", "energy"):
        assert np.array_equal(a[k], b[k])
    assert not np.array_equal(a["err2"], c["err2"])
    assert np.all(a["err2"][1:] > 0)  # attention makes the N-systems differ from the reference


def test_coupling_vanishes_without_interaction():
    """Without attention nothing couples the tokens, so the N-systems follow the reference's
    tokens exactly: the coupled error is 0 up to rounding (the field is shared)."""
    r = coupling_task(_cfg(["model.attention=false"]).model_dump(mode="json"), 3, seed=1, with_w2=False, keep_cloud=False)
    assert np.max(r["err2"]) < 1e-26


def test_decorrelation_estimator_zero_without_interaction():
    """Known answer: without attention the tokens are conditionally independent given the field,
    so the correlation of tokens 1 and 2 over 512 initial draws is 0; the estimate must lie within
    4.5 of its standard errors (delta method, exact at ρ = 0)."""
    config = _cfg(["model.attention=false", "decor_repeats=512"]).model_dump(mode="json")
    for n, seed in ((4, 3), (8, 4)):
        r = decorrelation_task(config, n, seed)
        assert abs(r["rho"]) < 4.5 * r["se"]
        assert 0 < r["se"] < 0.1
