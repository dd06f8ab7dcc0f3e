"""One ``build.setup(cfg)`` per run (device, dtype and the run's generators, resolved once), and a
model built by hand handed to a run with ``model=``: the same numbers as the config's own model,
the same numbers again when the object is reused, recorded by name and parameters, and refused
before any work when it is not the config's kind of model or not built for its ``d``."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from stochformer.config import ConfigError, RunConfig
from stochformer.config.build import Setup, check_model, make_model, make_noise, model_record
from stochformer.config.build import setup as run_setup  # a module-level name `setup` is a nose-style hook to pytest 7
from stochformer.core.runtime import child_seeds, make_generator, named_seed
from stochformer.experiments import simulate as simulate_module
from stochformer.experiments import sync as sync_module
from stochformer.experiments.simulate import run_simulate
from stochformer.experiments.sync import SyncConfig, run_sync
from stochformer.model.attention import SoftmaxAttention
from stochformer.model.sde import LimitSDE
from stochformer.model.transformer import Transformer

SMALL = dict(N=4, d=3, L=8, T=1.0, m=16, batch=3)  # T/(L/4) = 0.5: a small step for sync


# --------------------------------------------------------------------------- setup


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**63 - 1), other=st.integers(0, 2**32), n=st.integers(1, 5),
       dtype=st.sampled_from(["float64", "float32"]))
def test_setup_hands_out_the_streams_the_runtime_functions_give(seed, other, n, dtype):
    # the run's generators and seeds are those of make_generator / child_seeds / named_seed: a run
    # that takes them from its Setup draws bit for bit what it drew before
    env = run_setup(RunConfig(seed=seed, dtype=dtype))
    assert env == Setup(torch.device("cpu"), getattr(torch, dtype), seed)
    assert env.seeds(n) == child_seeds(seed, n) and env.seeds(n, other) == child_seeds(other, n)
    assert env.named_seed("attention_batch") == named_seed(seed, "attention_batch")
    assert torch.equal(torch.randn(4, generator=env.generator()), torch.randn(4, generator=make_generator(seed)))
    assert torch.equal(torch.randn(4, generator=env.generator(other)), torch.randn(4, generator=make_generator(other)))
    drawn = [torch.randn(3, generator=g) for g in env.generators(n, other)]
    assert all(torch.equal(a, torch.randn(3, generator=make_generator(s))) for a, s in zip(drawn, child_seeds(other, n)))


def test_setup_of_an_experiment_reads_its_model_and_is_frozen_and_picklable():
    cfg = SyncConfig(model=dict(SMALL, seed=7, dtype="float32"))
    env = run_setup(cfg)
    assert (env.seed, env.dtype, env.device) == (7, torch.float32, torch.device("cpu"))
    assert pickle.loads(pickle.dumps(env)) == env
    with pytest.raises(AttributeError):
        env.seed = 1  # type: ignore[misc]
    assert env.provenance()["device"].startswith("cpu")
    with pytest.raises(TypeError, match="cfg: setup takes a RunConfig or an ExperimentConfig"):
        run_setup({"seed": 0})  # type: ignore[arg-type]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_setup_refuses_cuda_where_there_is_none_naming_device():
    with pytest.raises(ValueError, match="device: 'cuda' requested but no CUDA device"):
        run_setup(RunConfig(device="cuda"))


# --------------------------------------------------------------------------- model= of run_simulate


MODELS = st.fixed_dictionaries({
    "dynamics": st.sampled_from(["transformer", "sde"]),
    "attention_kind": st.sampled_from(["softmax", "resampled", "l2", "averaged"]),
    "order": st.sampled_from(["post_ln", "parallel"]),
    "activation": st.sampled_from(["relu", "tanh"]),
    "gamma": st.sampled_from([-0.5, 1.0]),
    "seed": st.integers(0, 2**32),
})


def _config(fields: dict) -> RunConfig:
    fields = dict(fields)
    if fields["dynamics"] == "sde":
        fields.pop("order")
        if fields["attention_kind"] == "resampled":  # per-layer draws: the transformer's; its SDE limit is averaged
            fields["attention_kind"] = "averaged"
    return RunConfig(**SMALL, **fields)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow], phases=(Phase.explicit, Phase.generate))
@given(fields=MODELS)
def test_simulate_with_the_configs_own_model_gives_its_numbers_and_again_when_reused(fields):
    cfg = _config(fields)
    plain = run_simulate(cfg)
    model = make_model(cfg)
    given_once, given_again = run_simulate(cfg, model=model), run_simulate(cfg, model=model)
    assert set(plain.data.data_vars) == set(given_once.data.data_vars) >= {"X_final", "mean_cosine", "energy"}
    for name in plain.data.data_vars:
        assert np.array_equal(plain.data[name].values, given_once.data[name].values), name
        assert np.array_equal(given_once.data[name].values, given_again.data[name].values), name
    other_seed = run_simulate(cfg.with_updates(seed=cfg.seed + 1), model=model)  # the seed still drives the draws
    assert not np.array_equal(other_seed.data["X_final"].values, given_once.data["X_final"].values)
    assert "model" not in plain.meta and given_once.meta["model"]["given"] is True


def test_simulate_records_a_given_model_by_qualified_name_and_parameters(tmp_path):
    cfg = RunConfig(**SMALL, seed=2)
    record = run_simulate(cfg, model=make_model(cfg)).meta["model"]
    assert record["description"]["type"] == "stochformer.model.transformer.Transformer"
    assert record["description"]["noise"] == {**record["description"]["noise"], "type": "stochformer.model.noise.RandomMLP",
                                              "width": 16}
    assert record["custom_parts"] == []
    res = run_simulate(cfg, model=make_model(cfg))
    res.save(tmp_path / "out")
    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert saved["model"] == json.loads(json.dumps(record))


class Scaled:
    """A user activation with one parameter (a non-dataclass callable)."""

    def __init__(self, a: float) -> None:
        self.a = a

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.a * x)


def test_a_user_part_is_recorded_with_its_parameters_or_marked_unrecorded():
    cfg = RunConfig(**SMALL, seed=3)
    kept = model_record(Transformer(SoftmaxAttention(), make_noise(cfg, activation=Scaled(0.7))))
    assert kept["description"]["noise"]["activation"] == {"callable": f"{__name__}.Scaled", "parameters": {"a": 0.7}}
    assert kept["custom_parts"] == [f"model.noise.activation: {__name__}.Scaled"]
    a = 0.7
    closure = model_record(Transformer(None, make_noise(cfg, activation=lambda x: torch.tanh(a * x))))
    assert closure["description"]["noise"]["activation"]["parameters"].startswith("unrecorded")
    ran = run_simulate(cfg, model=Transformer(SoftmaxAttention(), make_noise(cfg, activation=Scaled(0.7))))
    assert ran.meta["model"] == kept and ran.meta["custom_parts"] == kept["custom_parts"]


# --------------------------------------------------------------------------- refusals, before any work


@pytest.fixture
def no_work(monkeypatch):
    """Any solve call fails the test: the refusals come before any work."""
    def solve(*args, **kwargs):
        raise AssertionError("work started before the model was checked")
    for module in (simulate_module, sync_module):
        monkeypatch.setattr(module, "solve", solve)


@pytest.mark.parametrize("bad", [3, "transformer", object()])
def test_a_model_of_the_wrong_type_is_one_error_naming_model(bad, no_work):
    cfg = RunConfig(**SMALL)
    with pytest.raises(TypeError, match=r"^model: must be an object with reset\(\.\.\.\), step\(\.\.\.\) \(Model\) or a callable"):
        run_simulate(cfg, model=bad)
    with pytest.raises(TypeError, match=r"^model: must be an object with reset\(\.\.\.\), step\(\.\.\.\) \(Model\) or a callable"):
        run_sync(SyncConfig(model=SMALL, pairs=4), model=bad)
    with pytest.raises(TypeError, match=r"^model: must be a Transformer .*LimitSDE.*or a model of one's own with step"):
        check_model(bad, cfg)


@pytest.mark.parametrize("bad", [torch.nn.Linear(3, 3), None.__class__, Transformer])
def test_a_callable_that_is_no_factory_is_one_error_naming_model(bad, no_work):
    # a callable that is not a model is taken for a factory cfg -> model, called before any work
    cfg = RunConfig(**SMALL)
    with pytest.raises((TypeError, ValueError), match=r"^model: the factory .* (failed on the run's config|must build)"):
        run_simulate(cfg, model=bad)
    with pytest.raises((TypeError, ValueError), match=r"^model: the factory .* (failed on the run's config|must build)"):
        run_sync(SyncConfig(model=SMALL, pairs=4), model=bad)


class Rotate:
    """A deterministic model of one's own (the protocol's example): accepted for either dynamics."""

    def reset(self, batch, d, generator, dtype, device):
        pass

    def step(self, X, dt, draws):
        return torch.roll(X, 1, dims=-1)


def test_a_model_of_ones_own_runs_and_is_recorded_as_a_custom_part():
    cfg = RunConfig(**SMALL, path_stride=1)
    res = run_simulate(cfg, model=Rotate())
    X0 = res.data["X"].values[:, 0]
    assert np.array_equal(res.data["X_final"].values, np.roll(X0, cfg.L % cfg.d, axis=-1))
    assert res.meta["model"]["custom_parts"] == [f"model: {__name__}.Rotate"]


def test_a_model_of_the_other_dynamics_is_refused_naming_what_is_accepted(no_work):
    cfg = RunConfig(**SMALL)
    sde = make_model(cfg.with_updates(dynamics="sde"))
    with pytest.raises(TypeError, match=r"model: must be a Transformer \(the config has dynamics = 'transformer'.*LimitSDE"):
        run_simulate(cfg, model=sde)
    with pytest.raises(TypeError, match=r"model: must be a LimitSDE \(the config has dynamics = 'sde'"):
        run_sync(SyncConfig(model=dict(SMALL, dynamics="sde"), pairs=4), model=make_model(cfg))
    assert isinstance(check_model(sde, cfg.with_updates(dynamics="sde")), LimitSDE)


def test_a_model_built_for_another_d_is_refused_naming_the_field(no_work):
    cfg = RunConfig(**SMALL)
    wide = Transformer(SoftmaxAttention.from_matrices(4, 1.0, 1.0, np.eye(4).tolist()), None)
    with pytest.raises(ConfigError, match=r"^d: the given model's attention \(SoftmaxAttention\) is built for d = 4, "
                                          r"the config has d = 3"):
        run_simulate(cfg, model=wide)
    with pytest.raises(ConfigError, match=r"^model\.d: the given model's attention"):
        run_sync(SyncConfig(model=SMALL, pairs=4), model=wide)
    with pytest.raises(ValueError, match="activation: give the activation inside the model"):
        run_simulate(cfg, model=make_model(cfg), activation=torch.tanh)


# --------------------------------------------------------------------------- model= of run_sync


@pytest.mark.parametrize("dynamics,extrapolate,attention_kind", [
    ("transformer", True, "softmax"), ("sde", True, "softmax"), ("transformer", False, "resampled"), ("sde", False, "l2"),
])
def test_sync_with_the_configs_own_model_gives_its_numbers_and_again_when_reused(dynamics, extrapolate, attention_kind):
    cfg = SyncConfig(model=dict(SMALL, dynamics=dynamics, attention_kind=attention_kind, seed=4), pairs=4, bootstrap=20,
                     extrapolate=extrapolate)
    plain = run_sync(cfg)
    model = make_model(cfg.model)
    once, again = run_sync(cfg, model=model), run_sync(cfg, model=model)
    assert plain.measured == once.measured == again.measured
    for name in ("log_growth_pairs", "energy_near", "energy_uniform"):
        assert np.array_equal(np.asarray(getattr(plain, name)), np.asarray(getattr(once, name))), name
        assert np.array_equal(np.asarray(getattr(once, name)), np.asarray(getattr(again, name))), name
    assert once.meta["model"] == model_record(model) and plain.meta == {}


def test_the_given_model_is_the_one_that_runs():
    # a model with another γ than the config's: its numbers, not the config's (so the equalities
    # above cannot hold by ignoring the model)
    cfg = RunConfig(**SMALL, seed=5)
    other = make_model(cfg.with_updates(gamma=-2.0))
    assert np.array_equal(run_simulate(cfg.with_updates(gamma=-2.0)).data["X_final"].values,
                          run_simulate(cfg, model=other).data["X_final"].values)
    assert not np.array_equal(run_simulate(cfg).data["X_final"].values, run_simulate(cfg, model=other).data["X_final"].values)
    sync = SyncConfig(model=dict(SMALL, seed=5), pairs=4, bootstrap=20, extrapolate=False, uniform_start=False)
    assert run_sync(sync, model=other).measured["lambda_1"] != run_sync(sync).measured["lambda_1"]
