"""Datasets describe themselves: every dataset a command writes, at its smallest size, read back
from its dataset.nc with xarray: every variable and coordinate has a long_name and units, every dim
an index coordinate, numbers are stored as numbers, and the shared names are those of the one
table (stochformer.io.names.NAMES, which docs/datasets.md lists)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from stochformer.config import RunConfig, build_config
from stochformer.io.names import NAMES, attr_value, describe, numeric_attrs
from stochformer.io.results import DATASET, write_dataset

ROOT = Path(__file__).resolve().parents[1]
#: attributes that are numbers wherever a dataset has them
NUMERIC = ("seed", "samples", "samples_per_task", "elapsed_s", "T", "steps", "kappa1_unit_sphere", "lambda_1",
           "lambda_1_se", "energy_rate", "energy_rate_se", "lambda_1_pred", "lambda_bar_pred")
#: names the datasets no longer use (each replaced by a name of the table)
OLD_NAMES = {"value", "se", "err", "measured", "predicted", "gamma_value", "sigma_value", "layer"}
#: a number written as text (what must not be an attribute's value)
NUMBER_TEXT = re.compile(r"\s*[-+]?(\d+\.?\d*(e[-+]?\d+)?|\.\d+|nan|inf|none)\s*", re.IGNORECASE)


def _written(result, tmp_path: Path) -> xr.Dataset:
    """The result saved as a command saves it, read back from dataset.nc with xarray (h5netcdf)."""
    result.save(tmp_path)
    with xr.open_dataset(tmp_path / DATASET, engine="h5netcdf") as ds:
        return ds.load()


def check_dataset(ds: xr.Dataset, own_old: set[str] = OLD_NAMES) -> None:
    """The checks of the module docstring on one dataset read back from disk."""
    for name in ds.variables:
        attrs = ds[name].attrs
        for key in ("long_name", "units"):
            assert isinstance(attrs.get(key), str) and attrs[key].strip(), f"{name}: no {key} ({attrs})"
        if name in NAMES and name != "energy":  # energy's long_name names its β
            assert {k: attrs[k] for k in ("long_name", "units")} == NAMES[name], name
    for dim in ds.dims:
        assert dim in ds.indexes, f"dim {dim} has no index coordinate"
    assert not (set(map(str, ds.variables)) | set(map(str, ds.dims))) & own_old, sorted(set(ds.variables) & own_old)
    for key, value in ds.attrs.items():
        if isinstance(value, str):
            assert not NUMBER_TEXT.fullmatch(value), f"attribute {key} = {value!r} is a number stored as text"
    for key in NUMERIC:
        if key in ds.attrs:
            assert isinstance(ds.attrs[key], (np.integer, np.floating, int, float)), (key, ds.attrs[key])


def test_the_docs_table_is_the_code_table():
    """docs/datasets.md lists exactly the names of NAMES, with their long_name and units."""
    text = (ROOT / "docs" / "datasets.md").read_text(encoding="utf-8")
    text = text.split("## One name per quantity", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| (.+?) \| (.+?) \|$", text, flags=re.MULTILINE)
    table = {name: {"long_name": long.replace("\\|", "|"), "units": units.strip("`")} for name, long, units in rows}
    assert table == NAMES
    assert "datasets.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


def test_attributes_keep_their_kind_through_netcdf(tmp_path):
    """Seeds up to 2⁶⁴ − 1, ints, floats, bools, lists and dicts survive h5netcdf as what they were
    (numbers as numbers); None is left out."""
    values = {"seed": 2**64 - 1, "small": -3, "x": 0.25, "flag": True, "list": [1.0, 2.5], "nested": {"a": [1, {"b": None}]},
              "text": "abc", "gone": None}
    ds = xr.Dataset({"v": ("time", np.zeros(2))}, attrs=numeric_attrs(values))
    write_dataset(describe(ds), tmp_path / "a.nc")
    with xr.open_dataset(tmp_path / "a.nc", engine="h5netcdf") as back:
        a = back.attrs
        assert int(a["seed"]) == 2**64 - 1 and a["seed"].dtype == np.uint64
        assert int(a["small"]) == -3 and isinstance(a["small"], np.integer) and float(a["x"]) == 0.25
        assert int(a["flag"]) == 1 and list(a["list"]) == [1.0, 2.5] and a["text"] == "abc" and "gone" not in a
        assert a["nested"] == '{"a": [1, {"b": null}]}'
        assert list(back["time"].values) == [0, 1] and back["time"].attrs["units"] == NAMES["time"]["units"]
    assert attr_value(float("nan")) != attr_value(float("nan"))  # NaN stays a float


def test_describe_leaves_an_unknown_name_undescribed():
    """A name in no table gets no description (so the checks above fail on it), and describe adds
    the index coordinates."""
    ds = describe(xr.Dataset({"mystery": (("sample", "zz"), np.zeros((2, 3)))}))
    assert "long_name" not in ds["mystery"].attrs and list(ds["zz"].values) == [0, 1, 2]
    with pytest.raises(AssertionError, match="mystery: no long_name"):
        check_dataset(ds)
    described = describe(xr.Dataset({"energy_near_se": ("time", np.zeros(2))}), {"energy_near": {"long_name": "E", "units": "1"}})
    assert described["energy_near_se"].attrs == {"long_name": "standard error of E", "units": "1"}


def test_check_dataset_fails_on_a_number_stored_as_text():
    ds = describe(xr.Dataset({"energy": ("time", np.zeros(2))}, attrs={"seed": "5"}))
    ds["energy"].attrs.update(NAMES["energy"])
    with pytest.raises(AssertionError, match="seed"):
        check_dataset(ds)


# --------------------------------------------------------------------------- every command, tiny


def test_simulate(tmp_path):
    from stochformer.experiments.simulate import run_simulate

    ds = _written(run_simulate(RunConfig(L=3, N=4, d=3, batch=2, m=8, path_stride=1)), tmp_path)
    check_dataset(ds)
    assert {"time", "step", "sample", "snapshot", "token", "dim"} <= set(ds.coords)
    assert int(ds.attrs["seed"]) == 0 and int(ds.attrs["steps"]) == 3


def test_sync_keeps_the_pair_paths(tmp_path, monkeypatch):
    from stochformer.experiments import sync
    from stochformer.experiments.sync import PAIR_PATHS, SyncConfig, run_sync

    cfg = build_config({}, ["model.d=3", "model.N=3", "model.batch=4", "model.dynamics=sde", "pairs=3", "model.L=8",
                            "model.T=1", "bootstrap=10"], model=SyncConfig)
    res = run_sync(cfg)
    ds = _written(res, tmp_path)
    check_dataset(ds)
    assert ds["log_growth"].dims == ("pair", "time") and ds["log_growth"].shape == (min(3, PAIR_PATHS), 9)
    assert (ds["log_growth"].values[:, 0] == 0).all() and list(ds["step"].values) == list(range(9))
    # the mean curve is the mean of the kept paths (all pairs are kept at this size)
    np.testing.assert_allclose(ds["log_growth"].mean("pair").values, ds["log_growth_mean"].values, rtol=1e-12, atol=1e-15)
    assert float(ds.attrs["lambda_1"]) == res.measured["lambda_1"]
    monkeypatch.setattr(sync, "PAIR_PATHS", 2)  # the bound: only the first PAIR_PATHS pairs are kept
    bounded = run_sync(cfg)
    np.testing.assert_array_equal(bounded.to_dataset()["log_growth"].values, ds["log_growth"].values[:2])
    assert bounded.measured == res.measured  # the rates do not depend on what is kept


def test_phase_names_its_axes_by_their_fields(tmp_path):
    from stochformer.experiments.phase import PhaseConfig, run_phase

    cfg = build_config({}, ["model.d=3", "model.N=3", "model.L=8", "model.T=1", "model.dynamics=sde", "pairs=3",
                            "x_field=gamma", "x_values=[0, 1]", "y_field=sigma", "y_values=[0.5]", "boundary_points=5"],
                       model=PhaseConfig)
    res = run_phase(cfg)
    ds = _written(res, tmp_path)
    check_dataset(ds)
    assert ds["lambda_1"].dims == ("sigma", "gamma") and ds["fine_lambda_1"].dims == ("fine_sigma", "fine_gamma")
    np.testing.assert_array_equal(ds["lambda_1"].values, res.value)
    assert ds["gamma"].attrs == NAMES["gamma"]


def test_sweep_has_a_step_coordinate(tmp_path):
    from stochformer.experiments.sweep import SweepConfig, run_sweep

    cfg = SweepConfig.model_validate({"model": {"N": 3, "d": 3, "L": 4, "T": 2.0, "m": 8}, "samples": 2,
                                      "samples_per_task": 2, "grid": {"gamma": [-1, 1], "sigma_W": [0.5]}})
    ds = _written(run_sweep(cfg), tmp_path)
    check_dataset(ds)
    assert list(ds["step"].values) == [0, 1, 2, 3, 4] and ds["step"].dims == ("time",)
    assert ds["mean_cosine"].dims == ("gamma", "sigma_W", "sample", "time")
    assert isinstance(ds.attrs["samples"], np.integer) and int(ds.attrs["samples"]) == 2


def test_sweep_over_depth_has_a_step_per_point(tmp_path):
    """With L swept, the same time is a different step at each point: ``step`` is (L, time), NaN
    where a point has no record at that time."""
    from stochformer.experiments.sweep import SweepConfig, run_sweep

    cfg = SweepConfig.model_validate({"model": {"N": 3, "d": 3, "L": 4, "T": 1.0, "m": 8}, "samples": 2,
                                      "samples_per_task": 2, "grid": {"L": [2, 4]}})
    ds = _written(run_sweep(cfg), tmp_path)
    check_dataset(ds)
    assert ds["step"].dims == ("L", "time")
    np.testing.assert_array_equal(ds["step"].values, [[0, np.nan, 1, np.nan, 2], [0, 1, 2, 3, 4]])


def test_converge(tmp_path):
    from stochformer.experiments.converge import ConvergeConfig, run_converge

    cfg = build_config({}, ["model.batch=4", "samples_per_task=4", "depths=[2,4]", "widths=[4,8]", "refine=2",
                            "bootstrap=100", "model.N=3", "model.d=3", "model.T=0.5"], model=ConvergeConfig)
    check_dataset(_written(run_converge(cfg), tmp_path))


def test_bridge(tmp_path):
    from stochformer.experiments.bridge import BridgeConfig, run_bridge

    cfg = BridgeConfig(block="paper", d=4, heads=2, m=8, N=3, depths=[2], samples=4, pred_samples=4)
    ds = _written(run_bridge(cfg), tmp_path)
    check_dataset(ds)
    assert ds["measured_L2"].dims == ("sample", "step_L2")


def test_spectrum(tmp_path):
    from stochformer.experiments.spectrum import SpectrumConfig, run_spectrum

    cfg = build_config(None, ["model.dynamics=sde", "model.d=3", "model.batch=8", "model.L=12", "bootstrap=10"],
                       model=SpectrumConfig)
    ds = _written(run_spectrum(cfg), tmp_path)
    check_dataset(ds)
    assert ds["lyapunov"].dims == ("exponent",) and list(ds["exponent"].values) == [1, 2]


def test_chaos(tmp_path):
    pytest.importorskip("ot")
    from stochformer.experiments.chaos import ChaosConfig, run_chaos

    cfg = build_config(None, ["model.N=16", "sizes=[4,6,8]", "dims=[3]", "model.batch=2", "dims_batch=2", "w2_batch=2",
                              "model.L=2", "records=2", "model.features=8", "decor_sizes=[4,8]", "decor_repeats=16",
                              "decor_fields=2", "bootstrap=100"], model=ChaosConfig)
    ds = _written(run_chaos(cfg), tmp_path)
    check_dataset(ds)
    assert ds["step"].dims == ("time",) and ds["w2_step"].dims == ("w2_time",)


# ------------------------------------------ the experiments of the report's sections, tiny


def _motions():
    from stochformer.config import validate
    from stochformer.experiments.motions import MotionsConfig, run_motions

    return run_motions(validate(MotionsConfig, {"model": {"batch": 20, "L": 8, "seed": 3}, "reference_steps": 16,
                                                "reference_paths": 100, "bootstrap": 100}))


def _joint(store):
    from stochformer.experiments.joint import JointConfig, run_joint

    return run_joint(JointConfig(model={"batch": 4, "activation": "tanh"}, path_N=[4, 8, 16], path_L=[2, 4, 8],
                                 path_m=[4, 8, 16], samples_per_task=2, refine=2, N_ref=48, bootstrap=100), store=store)


def _repulsion(store):
    from stochformer.experiments.repulsion import RepulsionConfig, run_repulsion

    return run_repulsion(RepulsionConfig(model={"d": 4, "N": 4, "L": 8, "T": 1.0, "batch": 2}, gammas=[-1.0, 0.0],
                                         sigmas=[0.1], probe=(-1.0, 0.1), pairs=4, slope_time=0.5), store=store)


def _clusters(store):
    from stochformer.experiments import paper

    return paper.run_clusters(paper.ClustersConfig(seed=1, tol=0.05, sizes=dict(N=6, L=10, T=2.0, m=8, batch=2)))


def _scenarios(store):
    from stochformer.experiments import paper

    return paper.run_scenarios(paper.ScenariosConfig(sizes=dict(N=4, L=4, m=8, batch=1, ds=[5], sigmas=[0.0])), store=store)


def _table(store):
    from stochformer.experiments import paper

    return paper.run_table(paper.TableConfig(activations=["relu"],
                                             sizes=dict(draws=400, pairs=8, energy_pairs=8, L=8, m=8, ds=[5], sigmas=[0.1])))


def _variants(store):
    from stochformer.experiments.variants import VariantsConfig, run_variants

    return run_variants(VariantsConfig(flow_steps=20, law_d=8, law_m=16, law_draws=4, depths=[2, 4], samples=4,
                                       attention_draws=4))


def _exact(store):
    from stochformer.experiments.exact import ExactConfig, run_exact

    return run_exact(ExactConfig(model={"batch": 20, "L": 20}, betas=[0.5, 2.0], beta_grid=5, spectrum_batch=8,
                                 spectrum_L=16, energy_batch=4, energy_L=10, energy_every=5, energy_levels=1, gains=[0.5, 8.0],
                                 sigmas=[0.0, 0.5], phase_points=[[2.0, 0.0]]))


#: the result of each experiment behind a report section, at its smallest size (``store``: a task folder)
SECTION_RESULTS = {
    "MotionsResult": lambda store: _motions(),
    "JointResult": _joint,
    "RepulsionResult": _repulsion,
    "ClustersResult": _clusters,
    "ScenariosResult": _scenarios,
    "TableResult": _table,
    "ExactResult": _exact,
    "VariantsResult": _variants,
}
#: the results whose datasets the command tests above check
COMMAND_RESULTS = {"SimulationResult", "SyncResult", "PhaseResult", "SweepResult", "ConvergeResult", "BridgeResult",
                   "SpectrumResult", "ChaosResult"}
#: the dims of each section result's dataset (beside its variables, every one described)
SECTION_DIMS = {
    "MotionsResult": {"dynamics", "time", "pair", "path"},
    "JointResult": {"sample", "point"},
    "RepulsionResult": {"sigma", "gamma"},
    "ClustersResult": {"activation", "step", "sample", "token", "dim"},
    "ScenariosResult": {"scenario", "step"},
    "TableResult": {"row"},
    "ExactResult": {"beta", "time", "sigma_U", "gain"},
    "VariantsResult": {"flow", "time", "law", "depth"},
}


def _results() -> set[str]:
    """Every concrete result class of the experiments (a subclass of Result with a dataset of its own)."""
    import importlib
    import pkgutil

    import stochformer.experiments as experiments
    from stochformer.io.results import Result

    for mod in pkgutil.iter_modules(experiments.__path__):
        importlib.import_module(f"stochformer.experiments.{mod.name}")
    found, todo = set(), list(Result.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__.startswith("stochformer.experiments") and "_dataset" in vars(cls):
            found.add(cls.__name__)
    return found


def test_every_experiment_dataset_is_checked():
    """Every result class that writes a dataset.nc has a test of its dataset in this module: a new
    experiment without one fails here (and so cannot leave its variables undescribed)."""
    found = _results()
    assert found == COMMAND_RESULTS | set(SECTION_RESULTS), (found - COMMAND_RESULTS - set(SECTION_RESULTS),
                                                              COMMAND_RESULTS | set(SECTION_RESULTS) - found)


def test_the_completeness_check_finds_an_unchecked_experiment():
    """A result class of an experiment with a dataset and no test here is found (so the test above
    fails on it)."""
    import gc

    from stochformer.io.results import Result

    class Unchecked(Result):
        def _dataset(self):
            return xr.Dataset()

    Unchecked.__module__ = "stochformer.experiments.unchecked"
    try:
        assert "Unchecked" in _results() - COMMAND_RESULTS - set(SECTION_RESULTS)
    finally:
        del Unchecked
        gc.collect()
    assert "Unchecked" not in _results()


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in ("JointResult", "ClustersResult") else n
                                  for n in sorted(SECTION_RESULTS)])
def test_section_experiment(name, tmp_path):
    """The dataset.nc of each experiment behind a report section: every variable and coordinate has
    a long_name and units (the shared ones those of NAMES), every dim an index coordinate."""
    res = SECTION_RESULTS[name](tmp_path / "tasks")
    assert type(res).__name__ == name
    ds = _written(res, tmp_path / "out")
    check_dataset(ds)
    assert set(ds.dims) == SECTION_DIMS[name] and ds.data_vars
    assert int(ds.attrs["seed"]) >= 0 and isinstance(ds.attrs["elapsed_s"], np.floating)


def test_report_dataset(tmp_path):
    """The report's dataset.nc (built here from a one-section report: the run of every section is
    the slow test below)."""
    from stochformer.measure.verdict import Comparison
    from stochformer.report.runner import report_dataset, report_json

    row = Comparison.from_mean_se("q", 1.0, 1.1, 0.1, n=20).to_dict()
    report = {"profile": "tiny", "seed": 3, "sections": [{"name": "one", "status": "computed", "comparisons": [row]},
                                                         {"name": "two", "status": "skipped"}]}
    ds = report_dataset(report)
    write_dataset(ds, tmp_path / DATASET)
    with xr.open_dataset(tmp_path / DATASET, engine="h5netcdf") as back:
        back.load()
        check_dataset(back, OLD_NAMES - {"measured", "predicted"})  # a comparison row has both
        assert report_json(back)["sections"][0]["comparisons"][0]["measured"] == row["measured"]


