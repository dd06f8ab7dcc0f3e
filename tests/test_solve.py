"""``solve``'s observables of one's own, ``SaveAt(fn=…)``: what a hook used to record by hand.

Properties: the recorded variables are ``fn`` of the states a hook sees at the same steps, with
dims (sample, time, NAME_0, …), whatever the observables' shapes and the steps kept; recording
changes neither the run's numbers nor its statistics; every malformed output is one
``ValueError`` naming ``SaveAt.fn`` before the run goes on."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import stochformer as sf
from stochformer.integrate import RESERVED, SaveAt, solve
from stochformer.measure.diagnostics import STATISTICS


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
