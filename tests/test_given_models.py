"""``model=`` of every experiment whose runs are built from a RunConfig (``config.build.GivenModels``):
a model object or a factory ``factory(cfg) -> model``. The config's own model given as a factory
(``model=make_model``) gives the numbers of the run without ``model=`` bit for bit, in every
experiment; an object reused gives the same numbers again; what ran is recorded (the factory by
qualified name and parameters, or an "unrecorded" mark for a closure, and each run's model); a wrong
model or factory, an object where the runs differ, an unpicklable factory with a process scheduler
and a store are each refused naming ``model`` before any work."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from typing import Any, Callable

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import stochformer.experiments as experiments
from stochformer.config import ConfigError, RunConfig, validate
from stochformer.config.build import GivenModels, make_model, model_record
from stochformer.experiments import paper
from stochformer.experiments.exact import ExactConfig, run_exact
from stochformer.experiments.motions import MotionsConfig, run_motions
from stochformer.experiments.phase import PhaseConfig, run_phase
from stochformer.experiments.repulsion import RepulsionConfig, run_repulsion
from stochformer.experiments.simulate import run_simulate
from stochformer.experiments.sweep import SweepConfig, run_sweep
from stochformer.experiments.sync import SyncConfig, run_sync
from stochformer.experiments.variants import ResampledConfig, run_resampled
from stochformer.model.attention import SoftmaxAttention
from stochformer.model.transformer import Transformer
from stochformer.tasks import Task

RUN = dict(N=4, d=3, L=8, m=8, batch=2, seed=1)
SWEPT = {k: v for k, v in RUN.items() if k != "batch"}  # a sweep sets the batch of each task


def _numbers(res: Any) -> dict[str, np.ndarray]:
    """Every data variable of a result's dataset (the resampled check has none: its arrays)."""
    if not hasattr(res, "to_dataset"):
        return {"reference": res.reference_curve, **{f"L{k}": v for k, v in res.curves.items()}}
    ds = res.to_dataset()
    return {k: ds[k].values for k in ds.data_vars}


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind in "fc") for k in a)


#: every experiment that takes model=, at a tiny size: (run, config); the runs of the first four
#: can share one model object
CASES: dict[str, tuple[Callable[..., Any], Callable[[], Any]]] = {
    "simulate": (run_simulate, lambda: RunConfig(**RUN)),
    "sync": (run_sync, lambda: SyncConfig(model={**RUN, "L": 20}, pairs=4, bootstrap=20)),  # a small step (T/5)
    "phase_over_T": (run_phase, lambda: PhaseConfig(model=RUN, x_field="T", x_values=[1.0, 2.0], y_field="L", y_values=[4],
                                                    pairs=4, extrapolate=False, boundary_points=5)),
    "sweep_over_L": (run_sweep, lambda: SweepConfig.model_validate({"model": SWEPT, "samples": 2, "samples_per_task": 1,
                                                                    "grid": {"L": [4, 8]}})),
    "phase": (run_phase, lambda: PhaseConfig(model={**RUN, "L": 20}, x_values=[-1.0, 1.0], y_values=[0.5], pairs=4,
                                             boundary_points=5)),  # a small step (T/5)
    "sweep": (run_sweep, lambda: SweepConfig.model_validate({"model": SWEPT, "samples": 2, "samples_per_task": 1,
                                                             "grid": {"gamma": [-1, 1]}})),
    "repulsion": (run_repulsion, lambda: RepulsionConfig(model={"d": 4, "N": 4, "L": 8, "T": 1.0, "batch": 2},
                                                         gammas=[-1.0, 0.0], sigmas=[0.1], probe=(-1.0, 0.1), pairs=4,
                                                         slope_time=0.5)),
    "motions": (run_motions, lambda: validate(MotionsConfig, {"model": {"batch": 8, "L": 8, "seed": 3}, "reference_steps": 10,
                                                              "reference_paths": 100, "bootstrap": 20})),
    "exact": (run_exact, lambda: ExactConfig(model={"batch": 8, "L": 8, "T": 1.0}, betas=[0.5, 2.0], beta_grid=5,
                                             spectrum_batch=4, spectrum_L=8, energy_batch=4, energy_L=8, energy_T=0.5,
                                             energy_every=4, energy_levels=2, gains=[0.5, 8.0], sigmas=[0.0, 0.5],
                                             phase_points=[], cluster_settings=[])),
    "resampled": (run_resampled, lambda: ResampledConfig(model=dict(N=4, d=4, T=1.0, m=8, batch=4, attention_draws=8, seed=5),
                                                         depths=[2, 4])),
    "clusters": (paper.run_clusters, lambda: paper.ClustersConfig(seed=1, tol=0.05, sizes=dict(N=4, L=4, T=8.0, m=8, batch=1,
                                                                                                snapshots=2))),
    "scenarios": (paper.run_scenarios, lambda: paper.ScenariosConfig(sizes=dict(N=4, L=4, m=8, batch=1, ds=[5], sigmas=[0.0]))),
}
SHARED = ("simulate", "sync", "phase_over_T", "sweep_over_L")


@pytest.fixture
def no_work(monkeypatch):
    """Any step, task or simulation of an experiment fails the test: refusals come before any work."""
    def refuse(*args, **kwargs):
        raise AssertionError("work started before model= was checked")
    for info in pkgutil.iter_modules(experiments.__path__):
        module = importlib.import_module(f"stochformer.experiments.{info.name}")
        for name in ("solve", "run_tasks", "run_simulate", "initial_tokens", "measure_lyapunov"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, refuse)


# --------------------------------------------------------------------------- the same numbers


@pytest.fixture
def spectrum_once(monkeypatch):
    """exact's spectrum part (tangent flows: model= does not reach it) run once per config."""
    from stochformer.experiments import exact

    done: dict[str, Any] = {}

    def run_spectrum(cfg, progress=False):
        key = cfg.model_dump_json()
        done[key] = done[key] if key in done else exact.run_spectrum.__wrapped__(cfg, progress)
        return done[key]

    run_spectrum.__wrapped__ = exact.run_spectrum  # type: ignore[attr-defined]
    monkeypatch.setattr(exact, "run_spectrum", run_spectrum)


@pytest.mark.parametrize("name", list(CASES))
def test_the_configs_own_model_as_a_factory_gives_the_numbers_of_the_run_without_it(name, spectrum_once):
    run, config = CASES[name]
    plain = run(config())
    calls: list[RunConfig] = []

    def factory(cfg: RunConfig) -> Any:
        calls.append(cfg)
        return make_model(cfg)

    built = run(config(), model=factory)
    assert _same(_numbers(plain), _numbers(built)), name
    record = built.meta["model"]
    assert record["given"] is True and record["factory"]["callable"].endswith("factory")
    assert record["runs"] and all(r["description"]["type"].startswith("stochformer.model.") for r in record["runs"].values())
    assert record["custom_parts"] == [f"factory: {__name__}.{factory.__qualname__}"]  # the factory is one's own
    assert "model" not in getattr(plain, "meta", {})
    # called for every run recorded (a sweep records a point once, whatever the number of its tasks)
    assert len(record["runs"]) <= len(calls)
    # and what it builds is what runs: another model, other numbers (so the equality cannot hold by
    # ignoring the factory)
    other = run(config(), model=lambda c: make_model(c.with_updates(beta=2 * c.beta, noise_scale=c.noise_scale / 2)))
    assert not _same(_numbers(plain), _numbers(other)), name


@pytest.mark.parametrize("name", SHARED)
def test_one_model_object_reused_gives_the_same_numbers_again(name):
    run, config = CASES[name]
    cfg = config()
    base = cfg if isinstance(cfg, RunConfig) else cfg.model
    model = make_model(base)
    plain, once, again = run(cfg), run(cfg, model=model), run(cfg, model=model)
    assert _same(_numbers(plain), _numbers(once)) and _same(_numbers(once), _numbers(again)), name
    assert once.meta["model"] == model_record(model)


def test_the_given_model_is_the_one_that_runs():
    # a factory building another β than the config's: its numbers, not the config's (so the
    # equalities above cannot hold by ignoring the model)
    cfg = PhaseConfig(model=RUN, x_values=[-1.0, 1.0], y_values=[0.5], pairs=4, boundary_points=5, extrapolate=False)
    other = run_phase(cfg, model=lambda c: make_model(c.with_updates(beta=3.0)))
    assert np.array_equal(other.value, run_phase(cfg.model_copy(update={"model": cfg.model.with_updates(beta=3.0)})).value)
    assert not np.array_equal(other.value, run_phase(cfg).value)


@settings(max_examples=8, deadline=None)
@given(gammas=st.lists(st.sampled_from([-1.0, 0.0, 0.5, 1.0]), min_size=1, max_size=2, unique=True),
       sigma=st.sampled_from([0.0, 0.3]), seed=st.integers(0, 2**32), dynamics=st.sampled_from(["transformer", "sde"]))
def test_a_factory_per_grid_point_gives_each_points_numbers(gammas, sigma, seed, dynamics):
    cfg = SweepConfig.model_validate({"model": dict(SWEPT, seed=seed, dynamics=dynamics, sigma_U=sigma), "samples": 2,
                                      "samples_per_task": 1, "grid": {"gamma": gammas}})
    calls: list[RunConfig] = []

    def factory(c: RunConfig) -> Any:
        calls.append(c)
        return make_model(c)

    plain, built = run_sweep(cfg), run_sweep(cfg, model=make_model)
    assert _same(_numbers(plain), _numbers(built)) and _same(_numbers(built), _numbers(run_sweep(cfg, model=factory)))
    # once per task (each its own seed and batch), and once up front on the first point's config
    assert len(calls) == 2 * len(gammas) + 1 and calls[0] == calls[1].with_updates(seed=calls[0].seed, batch=calls[0].batch)
    runs = built.meta["model"]["runs"]
    assert sorted(runs) == [f"point{i:05d}" for i in range(len(gammas))]
    assert built.meta["model"]["factory"]["callable"] == "stochformer.config.build.make_model"
    assert built.meta["model"]["custom_parts"] == []  # stochformer's own factory and parts


# --------------------------------------------------------------------------- the record


class Scaled:
    """A factory with a parameter (an instance: its attributes are recorded)."""

    def __init__(self, gamma: float) -> None:
        self.gamma = gamma

    def __call__(self, cfg: RunConfig) -> Transformer:
        return Transformer(SoftmaxAttention(beta=cfg.beta, gamma=self.gamma), None)


def test_a_factory_is_recorded_by_name_and_parameters_or_marked_unrecorded():
    cfg = RunConfig(**RUN)
    kept = run_simulate(cfg, model=Scaled(0.5)).meta["model"]
    assert kept["factory"] == {"callable": f"{__name__}.Scaled", "parameters": {"gamma": 0.5}}
    assert kept["runs"]["run"]["description"]["attention"]["gamma"] == 0.5
    partial = run_simulate(cfg, model=functools.partial(make_model, activation=torch.tanh)).meta["model"]["factory"]
    assert partial["callable"] == "stochformer.config.build.make_model" and partial["parameters"]["keywords"]["activation"]
    g = 0.5
    closure = run_simulate(cfg, model=lambda c: Transformer(SoftmaxAttention(gamma=g), None)).meta["model"]
    assert closure["factory"]["parameters"].startswith("unrecorded")
    assert closure["runs"]["run"]["description"]["attention"]["gamma"] == 0.5  # what ran, whatever the closure held


# --------------------------------------------------------------------------- refusals, before any work


@pytest.mark.parametrize("name", list(CASES))
def test_a_factory_of_the_wrong_kind_or_dimension_is_refused_naming_model(name, no_work):
    run, config = CASES[name]
    cfg = config()

    def other_kind(c: RunConfig) -> Any:
        return make_model(RunConfig(d=c.d, dynamics="sde" if c.dynamics == "transformer" else "transformer"))

    def other_d(c: RunConfig) -> Any:
        return make_model(RunConfig(d=c.d + 1, dynamics=c.dynamics, Q=np.eye(c.d + 1).tolist()))

    def broken(c: RunConfig) -> Any:
        return 1 / 0

    with pytest.raises(TypeError, match=r"^model: the factory .*other_kind must build a (Transformer|LimitSDE) \(the config"):
        run(cfg, model=other_kind)
    with pytest.raises(ConfigError, match=r"^(model\.)?d: the model .*other_d built: attention \(SoftmaxAttention\) is built for d = "):
        run(cfg, model=other_d)
    with pytest.raises(ValueError, match=r"^model: the factory .*broken failed on the run's config \(ZeroDivisionError"):
        run(cfg, model=broken)
    with pytest.raises(TypeError, match=r"^model: must be"):
        run(cfg, model=3)


@pytest.mark.parametrize("name", [n for n in CASES if n not in SHARED])
def test_one_object_for_runs_of_different_models_is_refused_naming_model(name, no_work):
    run, config = CASES[name]
    with pytest.raises(ValueError, match=r"^model: \w+ runs models of different configs \(they differ in .+\).*give a factory"):
        run(config(), model=make_model(RunConfig(**RUN)))


@pytest.mark.parametrize("name", SHARED)
def test_an_object_built_for_another_d_is_refused_naming_d(name, no_work):
    run, config = CASES[name]
    wide = Transformer(SoftmaxAttention.from_matrices(4, 1.0, 1.0, np.eye(4).tolist()), None)
    with pytest.raises(ConfigError, match=r"^(model\.)?d: the given model's attention \(SoftmaxAttention\) is built for d = 4"):
        run(config(), model=wide)


@pytest.mark.parametrize("name", ["phase", "sweep", "repulsion", "scenarios"])
def test_with_a_process_scheduler_the_factory_must_pickle_and_a_store_is_refused(name, no_work, tmp_path):
    run, config = CASES[name]
    with pytest.raises(ValueError, match=r"^model: runs on scheduler 'processes:2' .* must pickle, and .*<lambda> does not"):
        run(config(), model=lambda c: make_model(c), scheduler="processes:2")
    with pytest.raises(ValueError, match=r"^model: \w+ with a store keys each task by its config"):
        run(config(), model=make_model, store=tmp_path / "store")


def test_a_picklable_factory_passes_the_check_and_keys_a_task():
    cfgs = [RunConfig(**RUN), RunConfig(**RUN).with_updates(gamma=-1.0)]
    given = GivenModels.check(make_model, cfgs, "test", scheduler="processes:2")
    assert given.task_kwargs() == {"model": make_model}
    # a task holding a model: its Dask key hashes the model's pickle, so two models never share one
    a = Task("t", run_simulate, {"config": {}, "model": make_model(cfgs[0])})
    b = Task("t", run_simulate, {"config": {}, "model": make_model(cfgs[1])})
    assert a.cache_key == Task("t", run_simulate, {"config": {}, "model": make_model(cfgs[0])}).cache_key != b.cache_key
    assert Task("t", run_simulate, {"config": {}}).cache_key == Task("t", run_simulate, {"config": {}}).cache_key
