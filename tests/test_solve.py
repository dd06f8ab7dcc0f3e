"""``solve``, the one stepping loop: its input checks, the per-run reset of the noise source, a
non-finite state and what it is blamed on, the progress meter, the run's metadata (parts without
``__qualname__`` or ``__module__`` described honestly) and the dataset's dimensions and
coordinates, exactly; and its observables of one's own, ``SaveAt(fn=…)``, by property: the
recorded variables are ``fn`` of the states a hook sees at the same steps, with dims (sample,
time, NAME_0, …), whatever the observables' shapes and the steps kept; recording changes neither
the run's numbers nor its statistics; every malformed output is one ``ValueError`` naming
``SaveAt.fn`` before the run goes on. (The Brownian driver: tests/test_brownian.py.)"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import stochformer as sf
from stochformer.config import RunConfig
from stochformer.core.brownian import BrownianPath
from stochformer.core.progress import ProgressMeter
from stochformer.core.sphere import normalize
from stochformer.core.validation import NonFiniteError, blamed_on, likely_fields, part_name
from stochformer.integrate import RESERVED, SaveAt, custom_parts, describe, run_attrs, solve
from stochformer.measure.diagnostics import STATISTICS
from stochformer.model import SoftmaxAttention
from stochformer.model.noise import RandomFeatureField, RandomMLP
from stochformer.model.sde import LimitSDE
from stochformer.model.transformer import Transformer
from stochformer.measure.diagnostics import mean_cosine, pair_statistics

from conftest import close


def _model() -> sf.Transformer:
    return sf.Transformer(sf.SoftmaxAttention(1.0, 1.0), sf.RandomMLP(8, "tanh", 0.1, 0.1))


@settings(max_examples=25, deadline=None, database=None, derandomize=True)
@given(B=st.integers(1, 3), N=st.integers(2, 4), d=st.integers(2, 4), steps=st.integers(1, 7), every=st.integers(1, 3),
       extra=st.lists(st.integers(1, 3), max_size=2), stats=st.booleans())
def test_fn_records_what_a_hook_sees(B, N, d, steps, every, extra, stats):
    """``fn``'s values at the kept steps equal ``fn`` applied to the states a hook is given at those
    steps (and to X0 at step 0), in float64 with dims (sample, time, obs_0, …); the final state and
    the statistics are those of the run without ``fn``."""
    X0 = sf.sphere.uniform(B, N, d, seed=1)
    weights = torch.randn(d, *extra, generator=torch.Generator().manual_seed(2), dtype=torch.float64)

    def obs(X: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"obs": torch.tensordot(X[:, 0], weights, dims=1), "first": X[:, 0, 0]}

    seen = {0: obs(X0)}
    kept = SaveAt(every=every, stats=STATISTICS if stats else (), fn=obs)
    ds = solve(_model(), X0, 1.0, steps, kept, seed=3, hook=lambda k, X: seen.__setitem__(k, obs(X)))
    plain = solve(_model(), X0, 1.0, steps, SaveAt(every=every, stats=STATISTICS if stats else ()), seed=3)
    steps_kept = ds["step"].values.tolist()
    assert steps_kept == sorted(set(range(0, steps + 1, every)) | {steps})
    assert ds["obs"].dims == ("sample", "time", *(f"obs_{i}" for i in range(len(extra)))) and ds["obs"].dtype == "float64"
    for j, k in enumerate(steps_kept):
        assert torch.equal(torch.from_numpy(ds["obs"].values[:, j]), seen[k]["obs"])
        assert torch.equal(torch.from_numpy(ds["first"].values[:, j]), seen[k]["first"])
    assert (ds["X_final"].values == plain["X_final"].values).all()
    for name in STATISTICS if stats else ():
        assert (ds[name].values == plain[name].values).all()


BAD_NAMES = st.one_of(st.sampled_from(sorted(RESERVED | set(STATISTICS))), st.just("1x"), st.just("a b"), st.just(""),
                      st.integers())


@settings(max_examples=40, deadline=None, database=None, derandomize=True)
@given(case=st.one_of(
    BAD_NAMES.map(lambda n: ("name", n)),
    st.sampled_from(["not a mapping", "empty", "scalar", "wrong batch", "numpy", "changes"]).map(lambda c: ("output", c)),
))
def test_a_malformed_output_is_one_error_naming_fn(case):
    kind, what = case
    X0 = sf.sphere.uniform(2, 3, 3, seed=0)
    calls = []

    def fn(X):
        calls.append(1)
        if kind == "name":
            return {what: X[:, 0, 0]}
        return {"not a mapping": [1.0], "empty": {}, "scalar": {"a": X[0, 0, 0]}, "wrong batch": {"a": X[0]},
                "numpy": {"a": X[:, 0, 0].numpy()},
                "changes": {"a": X[:, 0, 0]} if len(calls) == 1 else {"a": X[:, 0]}}[what]

    with pytest.raises(ValueError, match=r"^SaveAt\.fn \("):
        solve(_model(), X0, 1.0, 3, SaveAt(fn=fn), seed=0)


def test_a_variable_may_not_take_another_variables_dim_name():
    X0 = sf.sphere.uniform(2, 3, 3, seed=0)
    with pytest.raises(ValueError, match="name both a variable and a dim"):
        solve(_model(), X0, 1.0, 2, SaveAt(fn=lambda X: {"g": X[:, :, 0], "g_0": X[:, 0, 0]}), seed=0)


def test_fn_must_be_callable():
    with pytest.raises(TypeError, match="fn: must be a callable"):
        SaveAt(fn=3)


def test_the_dataset_describes_itself():
    """Every variable and coordinate of ``solve``'s own has a ``long_name`` and ``units`` (so
    xarray's plots label their axes), the energy its β; a round trip through NetCDF keeps them."""
    import xarray as xr

    X0 = sf.sphere.uniform(2, 4, 3, seed=0)
    ds = solve(_model(), X0, 1.0, 4, SaveAt(tokens_every=2, energy_beta=2.5), seed=0)
    own = [n for n in ds.variables if n not in ("token", "dim")]
    assert own and all({"long_name", "units"} <= set(ds[n].attrs) for n in own), {n: ds[n].attrs for n in own}
    assert "β = 2.5" in ds["energy"].attrs["long_name"]
    back = xr.Dataset.from_dict(ds.to_dict())
    assert back["time"].attrs == ds["time"].attrs


# ----------------------------------------------------------------- solve: input and the per-run reset


def re_repr(value) -> str:
    return re.escape(repr(value))


@pytest.mark.parametrize("T", [0, 0.0, -1.0, math.inf, math.nan, "1"])
def test_solve_refuses_a_time_that_is_not_finite_and_positive(tokens, T):
    """T must be a finite number > 0: zero, negative, infinite, NaN or a string is refused with
    one message naming T and the valid range, before the model is reset."""
    field_ = RandomFeatureField("relu", features=3)
    with pytest.raises(ValueError, match=rf"^T: must be a finite number and > 0 \(got {re_repr(T)}\)$"):
        solve(Transformer(None, field_), tokens(1, 2, 3), T, 2, seed=0)
    assert field_._u is None  # nothing drawn


@pytest.mark.parametrize("steps", [0, -3, 2.0])
def test_solve_refuses_steps_that_are_not_a_positive_integer(tokens, steps):
    """steps must be an integer >= 1: zero, negative or a float is refused with one message."""
    with pytest.raises(ValueError, match=rf"^steps: must be an integer >= 1 \(got {re_repr(steps)}\)$"):
        solve(Transformer(), tokens(1, 2, 3), 1.0, steps, seed=0)


@pytest.mark.parametrize("model", ["layer", "sde"])
def test_solve_resets_the_noise_source_from_the_run(tokens, model):
    """Before the first step the noise source draws its per-run state with the run's batch, d,
    generator (from the seed), the tokens' dtype and device (whatever torch's default device: the
    meta device here): a random-feature field's u (B, d, M) and b = σ_U ξ (B, 1, M), in float64
    on the CPU for float64 CPU tokens."""
    B, N, d, M = 2, 3, 4, 5
    field_ = RandomFeatureField("tanh", features=M, sigma_U=0.4)
    stepped = Transformer(None, field_) if model == "layer" else LimitSDE(None, field_, kappa1=0.0)
    with torch.device("meta"):
        solve(stepped, tokens(B, N, d, seed=3), 0.2, 1, SaveAt(stats=(), final=False), seed=21)
    ref = torch.Generator().manual_seed(21)
    u = torch.randn(B, d, M, generator=ref, dtype=torch.float64)
    b = 0.4 * torch.randn(B, 1, M, generator=ref, dtype=torch.float64)
    assert field_._u.dtype == torch.float64 and field_._u.device.type == "cpu"
    assert torch.equal(field_._u, u) and torch.equal(field_._b, b)


@pytest.mark.parametrize("model", ["layer", "sde"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_reset_passes_batch_d_generator_dtype_and_device_to_the_noise(replay, model, dtype):
    """Transformer.reset and LimitSDE.reset hand every argument to the noise source: its features
    are drawn from the generator given, of shape (batch, d, M), in the dtype and on the device
    given, whatever torch's default device (the meta device here)."""
    gen = torch.Generator().manual_seed(5)
    ref = replay(gen)
    field_ = RandomFeatureField("relu", features=3, sigma_U=0.5)
    stepped = Transformer(None, field_) if model == "layer" else LimitSDE(None, field_, kappa1=0.0)
    with torch.device("meta"):
        stepped.reset(2, 4, gen, dtype, "cpu")
    assert field_._u.dtype == dtype and field_._u.device.type == "cpu"
    assert torch.equal(field_._u, torch.randn(2, 4, 3, generator=ref, dtype=dtype))


# ----------------------------------------------------------------- solve: non-finite states


class Blowup:
    """A model whose state becomes infinite at step 2."""

    def reset(self, batch, d, generator, dtype, device):
        pass

    def step(self, X, dt, draws):
        return X / 0.0 if draws.k == 1 else X


def test_non_finite_state_names_what_is_stepped_and_the_likely_fields(tokens):
    """A non-finite state stops the run with a message naming the state, the step, and the model's
    likely parameters; within ``blamed_on(cfg, what)`` the caller's state name and the likely fields
    of its config instead — at step 0 (the initial state) and at a later step."""
    cfg = RunConfig()
    cause, default = re.escape(likely_fields(cfg)), re.escape(likely_fields(None))
    assert cause != default
    with pytest.raises(NonFiniteError, match=rf"^non-finite tokens at layer 2: .*; likely cause: {default}$"):
        solve(Blowup(), tokens(1, 3, 3), 1.0, 3, seed=0)
    with pytest.raises(NonFiniteError, match=rf"^non-finite particles at layer 2: .*; likely cause: {cause}$"):
        with blamed_on(cfg, "particles"):
            solve(Blowup(), tokens(1, 3, 3), 1.0, 3, seed=0)
    bad = tokens(1, 3, 3).clone()
    bad[0, 1, 2] = math.inf
    with pytest.raises(NonFiniteError, match=rf"^non-finite particles at layer 0: .*; likely cause: {default}$"):
        with blamed_on(None, "particles"):
            solve(Transformer(), bad, 1.0, 3, seed=0)
    with pytest.raises(NonFiniteError, match=rf"^non-finite tokens at layer 0: .*; likely cause: {cause}$"):
        with blamed_on(cfg):
            solve(Transformer(), bad, 1.0, 3, seed=0)


@pytest.mark.parametrize("field", ["sigma_W", "noise_scale", "gain"])
def test_an_experiment_blames_a_breakdown_on_its_config_fields(field):
    """run_simulate's breakdown names the config's field (``sigma_W = 1e+200``), not the model's
    parameter (``noise.sigma_W``): the experiment blames its config around solve."""
    from stochformer.experiments.simulate import run_simulate

    with pytest.raises(NonFiniteError, match=rf"^tokens left the sphere at layer 1 .*likely cause: {field} = 1e\+200, "):
        run_simulate(RunConfig(N=4, d=3, batch=1, L=3, **{field: 1e200}))


def test_a_model_with_large_parameters_is_blamed_by_them_unless_a_config_is_named(tokens):
    """Without a config, the breakdown names the model's large parameters (here β = 1e6); an error of
    a part's own first output (no state named) keeps its event within ``blamed_on``, and its cause
unless the config's fields name one; the error
    pickles whole (a run in another process)."""
    import pickle

    model = Transformer(attention=SoftmaxAttention(beta=1e6, gamma=1.0))
    err = NonFiniteError("non-finite {what} at layer 2", likely_fields(model), "tokens")
    assert "attention.beta = 1e+06" in str(err)
    assert str(pickle.loads(pickle.dumps(err))) == str(err)
    part = NonFiniteError("non-finite noise increment on its first call", "noise.scale = 1e+06")
    with pytest.raises(NonFiniteError) as caught:
        with blamed_on(RunConfig(), "particles"):
            raise part
    assert caught.value is part and str(part).endswith("likely cause: noise.scale = 1e+06")
    with pytest.raises(NonFiniteError) as caught:  # a config whose fields name the cause: blamed on them
        with blamed_on(RunConfig(noise_scale=1e6), "particles"):
            raise part
    assert str(caught.value) == ("non-finite noise increment on its first call: the run was stopped and nothing was "
                                 "written; likely cause: noise_scale = 1e+06")


# ----------------------------------------------------------------- solve: the progress bar


def test_progress_bar_only_when_asked_labelled_and_transient(tokens, capsys, monkeypatch):
    """solve prints nothing by default; with ``progress=ProgressMeter(desc)`` it draws a bar on stderr
    labelled ``desc`` (default "steps") that is erased when the run ends (the last line left blank);
    ``progress=True`` (the older flag) is refused naming the field. The
    captured stderr is not a terminal: the bar is forced (``STOCHFORMER_PROGRESS=always``)."""
    monkeypatch.setenv("STOCHFORMER_PROGRESS", "always")
    X0 = tokens(1, 2, 3)
    solve(Transformer(), X0, 1.0, 3, SaveAt(stats=()), seed=0)
    assert capsys.readouterr() == ("", "")
    for meter, label in ((ProgressMeter(), "steps"), (ProgressMeter("lyapunov"), "lyapunov")):
        solve(Transformer(), X0, 1.0, 3, SaveAt(stats=()), seed=0, progress=meter)
        out, err = capsys.readouterr()
        assert out == "" and err.startswith(f"\r{label}:   0%|") and err.endswith("\r")
        assert "100%" not in err and err.split("\r")[-2].strip() == ""
    with pytest.raises(TypeError, match=r"^progress: must be .*ProgressMeter.* \(got True\)$"):
        solve(Transformer(), X0, 1.0, 3, SaveAt(stats=()), seed=0, progress=True)


# ----------------------------------------------------------------- run metadata


class Gain:
    """A callable part defined outside stochformer (an instance: no __qualname__ or __name__)."""

    def __call__(self, x):
        return 2.0 * x

    def __repr__(self) -> str:
        return "Gain(2.0)"


def halve(x):
    return 0.5 * x


@dataclass
class Mixed:
    """A part with a private field first (its custom callable is neither described nor listed),
    a field hidden from repr, stochformer's own callable and plain values after them."""

    _inner: object = halve
    gain: object = field(default_factory=Gain)
    hidden: int = field(default=3, repr=False)
    project: object = likely_fields  # a module mutation testing leaves alone (its trampolines are closures)
    grid: object = field(default_factory=lambda: np.arange(60.0))
    path: object = field(default_factory=lambda: BrownianPath((2,), 1, seed=0))


def test_describe_fallbacks_for_parts_without_names():
    """describe: a dataclass by its public repr fields in order (private and repr=False fields
    skipped, whatever their place); a callable by module.qualified name, where the module is the
    object's or else its type's and the name its __qualname__, else its __name__, else its repr
    (its type's name where that repr is the default one, with an address), with its parameters;
    any other object by its type and its repr cut to 200 characters."""
    here = __name__
    grid_repr = repr(np.arange(60.0))
    assert len(grid_repr) > 200
    assert describe(Mixed()) == {
        "type": f"{here}.Mixed",
        "gain": {"callable": f"{here}.Gain(2.0)"},
        "project": {"callable": "stochformer.core.validation.likely_fields"},
        "grid": {"type": "numpy.ndarray", "repr": grid_repr[:200]},
        "path": {"type": "stochformer.core.brownian.BrownianPath", "repr": "BrownianPath(shape=(2,), steps=1)"},
    }
    # a method descriptor has no __module__ (its type's: builtins) and __qualname__ ≠ __name__
    assert describe(torch.Tensor.relu) == {"callable": "builtins.TensorBase.relu"}
    # a numpy ufunc from frompyfunc: no __module__ (its type's: numpy), no __qualname__, a __name__
    assert describe(np.frompyfunc(halve, 1, 1)) == {"callable": "numpy.halve (vectorized)"}
    # a torch module instance: its class's module, no __qualname__ or __name__: its repr (not the
    # default one), and its public attributes as parameters
    assert describe(torch.nn.Tanh()) == {"callable": "torch.nn.modules.activation.Tanh()", "parameters": {"training": True}}
    assert part_name(halve) == f"{here}.halve" and part_name(Gain) == f"{here}.Gain"

    def local(x):
        return x

    assert describe(local) == {"callable": f"{here}.test_describe_fallbacks_for_parts_without_names.<locals>.local"}


def test_custom_parts_of_unnamed_and_own_objects():
    """custom_parts lists the public, repr fields' parts whose class or callable is not
    stochformer's (private fields skipped even when they hold one), not stochformer's own callables
    or objects; a callable without __module__ is not stochformer's."""
    here = __name__
    assert custom_parts(Mixed(), "m") == [f"m: {here}.Mixed", f"m.gain: {here}.Gain(2.0)",
                                          "m.grid: numpy.ndarray"]
    assert custom_parts(RandomMLP(4, torch.Tensor.relu), "mlp") == ["mlp.activation: builtins.TensorBase.relu"]
    assert custom_parts(normalize, "f") == [] and custom_parts(BrownianPath((2,), 1, seed=0), "p") == []


def test_run_attrs_without_a_path():
    """run_attrs of a run without a path records it as drawn from the generator and leaves seed None
    out; other extras are kept as given (numbers as numbers, a seed above 2⁶³ − 1 as uint64)."""
    attrs = run_attrs(Transformer(), T=1.5, steps=3, seed=None, device="cpu")
    assert attrs["path"] == "none (normals from the generator)"
    assert (attrs["T"], attrs["steps"]) == (1.5, 3) and "seed" not in attrs and attrs["device"].startswith("cpu")
    assert run_attrs(Transformer(), seed=2**64 - 1)["seed"] == np.uint64(2**64 - 1)
    assert json.loads(attrs["model"]) == {"type": "stochformer.model.transformer.Transformer", "attention": None,
                                          "noise": None, "order": "post_ln"}


def test_dataset_dimensions_and_coordinates(tokens):
    """The dataset's dims are exactly sample, time, snapshot, token, dim (with their sizes), and its
    coordinates exactly sample (0..B−1), time and step along time, snapshot_time and snapshot_step
    along snapshot, and the indices of snapshot, token and dim (0..n−1)."""
    B, N, d = 2, 3, 4
    ds = solve(Transformer(), tokens(B, N, d), 1.0, 4, SaveAt(every=2, tokens_at=[1, 4]), seed=0)
    assert dict(ds.sizes) == {"sample": B, "time": 3, "snapshot": 2, "token": N, "dim": d}
    assert {name: ds.coords[name].dims for name in ds.coords} == {
        "sample": ("sample",), "time": ("time",), "step": ("time",),
        "snapshot_time": ("snapshot",), "snapshot_step": ("snapshot",), "snapshot": ("snapshot",),
        "token": ("token",), "dim": ("dim",)}
    assert ds.coords["sample"].values.tolist() == [0, 1] and ds.coords["snapshot"].values.tolist() == [0, 1]
    assert ds.coords["token"].values.tolist() == list(range(N)) and ds.coords["dim"].values.tolist() == list(range(d))


# ----------------------------------------------------------------- what SaveAt keeps, bad input, the run's attributes and custom parts


def test_save_schedule():
    """Statistics every k steps plus step 0 and the last; explicit steps sorted and deduplicated,
    each in 0..L (one message naming the range otherwise)."""
    assert SaveAt(every=3).stat_steps(7) == [0, 3, 6, 7]
    assert SaveAt(every=1).stat_steps(2) == [0, 1, 2]
    assert SaveAt(every=4).stat_steps(8) == [0, 4, 8]
    assert SaveAt(at=[5, 0, 2, 5]).stat_steps(5) == [0, 2, 5]
    assert SaveAt(stats=()).stat_steps(5) == []
    assert SaveAt(tokens_every=2).token_steps(5) == [0, 2, 4, 5]
    assert SaveAt(tokens_at=[1]).token_steps(5) == [1]
    for at, got in (([0, 3, 9], "0..9"), ([-1, 3], "-1..3"), ([2, 3, 9], "2..9"), ([-1], "-1..-1")):
        with pytest.raises(ValueError, match=rf"^SaveAt: steps to save must lie in 0\.\.5 \(got {got}\)$"):
            SaveAt(at=at).stat_steps(5)


def test_solve_records_what_save_asks_and_describes_the_run(tokens):
    """solve with a hook: the hook sees (k, X_k) and its result replaces X_k; statistics (β and
    block from SaveAt) of the states at the saved steps, in float64 from the renormalised state
    whatever the model's dtype; snapshots; time = step · Δt; attributes T, steps, seed, path and
    the model's description (fields, tensors by shape and dtype, callables by name)."""
    B, N, d, T, L = 2, 4, 3, 0.3, 3
    X0 = tokens(B, N, d, seed=48)
    A = torch.from_numpy(np.random.default_rng(49).standard_normal((d, d)))
    model = Transformer(SoftmaxAttention(A=A, V=torch.eye(d, dtype=torch.float64)), None, "post_ln")
    seen: list[int] = []

    def hook(k, X):
        seen.append(k)
        return normalize(X + 0.1) if k == 2 else None

    save = SaveAt(every=2, tokens_every=1, energy_beta=2.0, block=4)
    ds = solve(model, X0, T, L, save, seed=5, hook=hook)
    states = [X0]
    for k in range(1, L + 1):
        X = model.step(states[-1], T / L, torch.Generator())
        states.append(normalize(X + 0.1) if k == 2 else X)
    assert seen == [1, 2, 3]
    close(ds["X_final"].values, states[-1].numpy())
    close(ds["X"].values, torch.stack(states, 1).numpy())
    assert ds["step"].values.tolist() == [0, 2, 3] and ds["snapshot_step"].values.tolist() == [0, 1, 2, 3]
    assert ds["X"].dims == ("sample", "snapshot", "token", "dim") and ds["X_final"].dims == ("sample", "token", "dim")
    assert ds["energy"].dims == ("sample", "time") and ds["step"].dims == ("time",) and ds["snapshot_time"].dims == ("snapshot",)
    assert ds["sample"].values.tolist() == [0, 1] and ds["snapshot_step"].dims == ("snapshot",) and ds["time"].dims == ("time",)
    close(ds["time"].values, np.array([0.0, 0.2, 0.3]))
    close(ds["snapshot_time"].values, np.array([0.0, 0.1, 0.2, 0.3]))
    for name in ("mean_cosine", "energy", "min_cosine"):
        ref = torch.stack([pair_statistics(states[k], 2.0)[name] for k in (0, 2, 3)], -1)
        close(ds[name].values, ref.numpy())
    assert (ds.attrs["T"], ds.attrs["steps"], ds.attrs["seed"]) == (T, L, 5)
    assert ds.attrs["path"] == "none (normals from the generator)" and json.loads(ds.attrs["custom_parts"]) == []
    assert json.loads(ds.attrs["model"]) == {
        "type": "stochformer.model.transformer.Transformer", "noise": None, "order": "post_ln",
        "attention": {"type": "stochformer.model.attention.SoftmaxAttention", "beta": 1.0, "gamma": 1.0,
                      "A": {"tensor": [3, 3], "dtype": "float64"}, "V": {"tensor": [3, 3], "dtype": "float64"},
                      "chunk": None, "sdpa": False}}
    assert describe([likely_fields, "x", 2]) == [{"callable": "stochformer.core.validation.likely_fields"}, "x", 2]
    assert describe(RandomMLP(4))["activation"] == "relu" and "_phi" not in describe(RandomMLP(4))
    # float32 states: statistics of the state renormalised in float64
    X32 = X0.float()
    ds = solve(Transformer(None, None), X32, T, 1, SaveAt(), seed=5)
    close(ds["mean_cosine"].values[:, 0], mean_cosine(normalize(X32.double())).numpy())
    close(ds["min_cosine"].values[:, 0], pair_statistics(normalize(X32.double()))["min_cosine"].numpy())


def test_solve_refuses_bad_input_and_stops_on_a_non_finite_state(tokens):
    X0 = tokens(1, 3, 3)
    with pytest.raises(ValueError, match=r"^seed: give a seed or a generator \(every run is seeded\)$"):
        solve(Transformer(), X0, 1.0, 2)
    with pytest.raises(ValueError, match=r"^X0: expected tokens of shape \(batch, N, d\), got \(3, 3\)$"):
        solve(Transformer(), X0[0], 1.0, 2, seed=0)

    class Blowup:
        def reset(self, batch, d, generator, dtype, device):
            pass

        def step(self, X, dt, draws):
            return X / 0.0 if draws.k == 1 else X

    with pytest.raises(NonFiniteError, match=r"^non-finite particles at layer 2: the run was stopped and nothing was "
                       r"written; likely cause: the step size and the scales of the attention and the noise$"):
        with blamed_on(None, "particles"):
            solve(Blowup(), X0, 1.0, 3, seed=0)
    bad = X0.clone()
    bad[0, 0, 0] = math.nan
    with pytest.raises(NonFiniteError, match=r"^non-finite tokens at layer 0: .* likely cause: the step T/L and the scales"):
        with blamed_on(RunConfig()):
            solve(Transformer(), bad, 1.0, 3, seed=0)


def gelu_tanh(x):
    return torch.tanh(x) * 0.5


@dataclass
class Damped:
    """A noise source defined outside stochformer (a dataclass with a public and a private field)."""

    scale: float = 0.0
    activation: object = gelu_tanh
    _hidden: int = 3

    def reset(self, batch, d, generator, dtype, device):
        pass

    def increment(self, X, dt, draws):
        return self.scale * X


def test_run_attributes_and_custom_parts(tokens):
    """The attributes of a run with a generator and a path: seed "none", the path's repr, versions
    and device; parts not defined by stochformer (a class, a callable, a dataclass's fields) are
    listed by where they sit, named by module and qualified name; stochformer's own and the named
    activations are not."""
    X0 = tokens(1, 2, 3)
    path = BrownianPath.from_normals(torch.zeros(2, 1, 2, 3, dtype=torch.float64))
    model = LimitSDE(None, Damped(), kappa1=0.0)
    ds = solve(model, X0, 1.0, 2, SaveAt(stats=()), generator=torch.Generator(), path=path)
    assert "seed" not in ds.attrs and ds.attrs["path"] == repr(path) == "BrownianPath(shape=(1, 2, 3), steps=2)"
    versions = json.loads(ds.attrs["versions"])
    assert ds.attrs["device"] == versions["device"] and ds.attrs["device"].startswith("cpu") and versions["torch"] == torch.__version__
    here = f"{__name__}"
    assert json.loads(ds.attrs["custom_parts"]) == [f"model.noise: {here}.Damped", f"model.noise.activation: {here}.gelu_tanh"]
    assert json.loads(ds.attrs["model"])["noise"] == {"type": f"{here}.Damped", "scale": 0.0,
                                                      "activation": {"callable": f"{here}.gelu_tanh"}}
    assert custom_parts(Transformer(SoftmaxAttention(), RandomMLP(4, "tanh"))) == []
    assert custom_parts(RandomMLP(4, torch.relu)) == []  # a named activation passed as the function
    assert custom_parts(Transformer(None, RandomMLP(4, gelu_tanh)), "m") == [f"m.noise.activation: {here}.gelu_tanh"]
    assert custom_parts(Damped(), "x") == [f"x: {here}.Damped", f"x.activation: {here}.gelu_tanh"]
    assert custom_parts(object(), "o") == ["o: builtins.object"]


def test_save_at_refuses_bad_fields():
    SaveAt(every=1, tokens_every=1)
    for kw in ({"every": 0}, {"tokens_every": 0}):
        with pytest.raises(ValueError, match=rf"^{next(iter(kw))}: must be an integer >= 1 \(got 0\)$"):
            SaveAt(**kw)
    with pytest.raises(ValueError, match=r"^stats: unknown names 'foo'; valid: mean_cosine, energy, min_cosine$"):
        SaveAt(stats=("energy", "foo"))
