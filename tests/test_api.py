"""The public API: the example of docs/api.md runs, couplings through one Brownian path, custom
pieces plug in and are recorded, results load back."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
import xarray as xr  # noqa: E402

import stochformer as sf  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def _first_example() -> str:
    return re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)


def test_the_documented_example_runs():
    """The first code block of docs/api.md, as written: labelled output with t = k T/steps."""
    scope: dict = {}
    exec(compile(_first_example(), str(DOC), "exec"), scope)
    out = scope["out"]
    assert dict(out["mean_cosine"].sizes) == {"sample": 16, "time": 31}
    assert out["X_final"].shape == (16, 64, 4)
    np.testing.assert_allclose(out["time"].values, np.arange(31) * 5 * 5.0 / 150)
    assert out.attrs["seed"] == 0 and out.attrs["steps"] == 150
    assert json.loads(out.attrs["custom_parts"]) == []  # torch.tanh is the registry's tanh
    assert len(repr(out)) < 3000


def test_solve_equals_the_loop_it_replaces():
    """solve draws exactly what the model's steps draw: the same numbers as stepping by hand."""
    model = sf.Transformer(sf.SoftmaxAttention(beta=2.0, gamma=0.5), sf.RandomMLP(width=16, sigma_W=0.2))
    X0 = sf.sphere.uniform(3, 5, 4, seed=1)
    out = sf.solve(model, X0, 2.0, 8, sf.SaveAt(stats=()), seed=7)
    g, X = torch.Generator().manual_seed(7), X0
    for _ in range(8):
        X = model.step(X, 0.25, g)
    assert torch.equal(torch.from_numpy(out["X_final"].values), X)


def test_one_path_couples_step_sizes_and_models():
    """A BrownianPath read at n and 2n steps is the same Brownian motion: the limit SDE at Δt and
    Δt/2 ends closer together (pathwise, mean over samples) than two runs on independent paths,
    by more than 5 SE; a custom callable activation is recorded as such."""
    X0 = sf.sphere.uniform(64, 3, 3, seed=2)
    phi = lambda x: torch.tanh(x) + 0.1 * x  # noqa: E731
    sde = sf.LimitSDE(sf.SoftmaxAttention(), sf.ExactField(sf.NoiseKernel(phi, 3)))
    path, other = sf.BrownianPath(X0.shape, 64, seed=3), sf.BrownianPath(X0.shape, 64, seed=4)
    end = lambda n, p: torch.from_numpy(sf.solve(sde, X0, 1.0, n, sf.SaveAt(stats=()), seed=0, path=p)["X_final"].values)  # noqa: E731
    coupled = ((end(32, path) - end(64, path)) ** 2).sum(-1).mean(-1)
    independent = ((end(32, path) - end(64, other)) ** 2).sum(-1).mean(-1)
    diff = independent - coupled
    assert float(diff.mean()) > 5 * float(diff.std() / math.sqrt(len(diff)))
    out = sf.solve(sde, X0, 1.0, 4, seed=0, path=path)
    assert any("<lambda>" in part for part in json.loads(out.attrs["custom_parts"]))


def test_custom_noise_source_plugs_in_and_is_recorded():
    """Any object with reset / increment / noise_kernel drives both models."""

    class Constant:
        def reset(self, batch, d, generator, dtype, device):
            pass

        def increment(self, X, dt, draws):
            return math.sqrt(dt) * torch.ones_like(X)

        def noise_kernel(self, d):
            return sf.NoiseKernel("linear", d)

    X0 = sf.sphere.uniform(2, 4, 3, seed=5)
    for model in (sf.Transformer(None, Constant()), sf.LimitSDE(None, Constant())):
        out = sf.solve(model, X0, 1.0, 10, seed=0)
        assert np.all(out["mean_cosine"].values[:, -1] > out["mean_cosine"].values[:, 0])  # pushed to one side
        assert any("Constant" in part for part in json.loads(out.attrs["custom_parts"]))


class _PGELU:
    """A parametrised activation of a user's own (a callable class, not a dataclass)."""

    def __init__(self, alpha: float, label: str, scale: torch.Tensor):
        self.alpha, self.label, self.scale, self._calls = alpha, label, scale, 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.alpha * x)


@settings(max_examples=15, deadline=None)
@given(alpha=st.floats(0.1, 5.0), label=st.text("abcxyz_", min_size=1, max_size=6), n=st.integers(1, 4),
       closure=st.booleans())
def test_a_custom_activation_is_recorded_with_its_parameters_never_its_address(alpha, label, n, closure):
    """A run's ``model`` attribute records a callable activation's class and public attributes (a
    tensor by shape), a closure as "unrecorded", and never a memory address (``0x…``)."""
    phi = _PGELU(alpha, label, torch.ones(n))
    if closure:
        phi = (lambda a: lambda x: x * torch.sigmoid(a * x))(alpha)  # noqa: E731
    out = sf.solve(sf.Transformer(None, sf.RandomMLP(width=4, activation=phi)), sf.sphere.uniform(1, 3, 3, seed=0),
                   1.0, 2, seed=0)
    record = json.loads(out.attrs["model"])["noise"]["activation"]
    assert "0x" not in out.attrs["model"]
    if closure:
        assert record["parameters"].startswith("unrecorded")
    else:
        assert record == {"callable": f"{__name__}._PGELU",
                          "parameters": {"alpha": alpha, "label": label, "scale": {"tensor": [n], "dtype": "float32"}}}
        assert sf.NoiseKernel(phi, 3).name == f"_PGELU(alpha={alpha}, label={label}, scale={{'tensor': [{n}], 'dtype': 'float32'}})"


def test_bad_arguments_are_refused_before_any_work():
    model, X0 = sf.Transformer(), sf.sphere.uniform(1, 3, 3, seed=0)
    for kwargs, field in ((dict(T=0.0, steps=2), "T"), (dict(T=1.0, steps=0), "steps"), (dict(T=1.0, steps=2, seed=None), "seed")):
        kwargs.setdefault("seed", 0)
        with pytest.raises(ValueError, match=field):
            sf.solve(model, X0, **kwargs)
    with pytest.raises(ValueError, match="divide"):
        sf.solve(sf.LimitSDE(None, sf.ExactField(sf.NoiseKernel("relu", 3))), X0, 1.0, 3, seed=0,
                 path=sf.BrownianPath(X0.shape, 4, seed=0))


def test_results_save_and_load(tmp_path):
    from stochformer.config import RunConfig
    from stochformer.experiments.simulate import run_simulate

    res = run_simulate(RunConfig(N=4, d=3, L=3, batch=2, m=8, seed=9))
    assert len(repr(res)) < 200
    res.save(tmp_path / "run")
    back = sf.load(tmp_path / "run")
    with xr.open_dataset(tmp_path / "run" / "dataset.nc") as opened:
        xr.testing.assert_identical(back, opened.load())
    np.testing.assert_array_equal(back["X_final"].values, res.data["X_final"].values)
    assert json.loads(back.attrs["config"])["seed"] == 9 and back.attrs["command"] == "simulate"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    np.testing.assert_allclose(summary["mean_cosine"], back["mean_cosine_mean"].values)


def test_dir_lists_the_api_and_no_helpers():
    """``dir(stochformer)`` is the public API (every name of ``__all__`` resolves), the version and
    the OpenMP defaults: none of the package's own helpers (``importlib``, ``os``, ``sys``, ``Any``),
    and no subpackage bound to the package by an import (``core``, ``model``, ``integrate``)."""
    import stochformer.integrate  # noqa: F401  (binds the subpackages to the package)
    import stochformer.model  # noqa: F401

    names = dir(sf)
    assert set(sf.__all__) <= set(names) and "__version__" in names
    assert not {"importlib", "os", "sys", "Any", "core", "model", "integrate"} & set(names), names
    assert set(names) == set(sf.__all__) | {"__version__", "OMP_DEFAULTS"}, names
    assert all(not n.startswith("_") or n == "__version__" for n in names), names
    for name in sf.__all__:
        assert getattr(sf, name) is not None
