"""A user's own activation named by an import string ``"package.module:function"`` in a config
(TOML, ``--set``, every experiment's ``model``): it reaches the kernel, the model and the record
exactly as the callable itself does, and a string that does not name a callable is one clear
``activation`` error before any work. A part of one's own (activation, attention, hook, noise
source, step) whose output has the wrong shape, dtype or device, or is not finite, is refused on
its first call naming it."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from typing import Any, Callable

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stochformer as sf
from stochformer.config import ConfigError, RunConfig, build_config
from stochformer.config.build import make_kernel
from stochformer.core.validation import NonFiniteError, import_object
from stochformer.model.kernel import NoiseKernel, rates

MODULE = textwrap.dedent('''
    import torch

    def pgelu(x):
        return x * torch.sigmoid(1.702 * x)

    class Scaled:
        def __init__(self, a):
            self.a = a
        def __call__(self, x):
            return torch.tanh(self.a * x)

    scaled_tanh = Scaled(0.7)
    NOT_CALLABLE = 3

    def raising(x):
        raise ZeroDivisionError("an activation of one's own that fails")
''')


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_parts.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_parts", None)
    yield tmp_path
    sys.modules.pop("my_parts", None)


@pytest.mark.parametrize("name", ["pgelu", "scaled_tanh"])
def test_an_import_string_is_the_callable_itself(user_module, name):
    """κ(1), κ'(1) and the rates of ``activation = "my_parts:NAME"`` are those of the imported
    callable (the same quadrature), and a run with it equals a run with the callable, bit for bit."""
    import my_parts

    fn = getattr(my_parts, name)
    cfg = RunConfig(activation=f"my_parts:{name}", d=6, sigma_U=0.2, sigma_W=0.1, N=4, L=3, batch=2, m=16)
    by_string, by_object = make_kernel(cfg), NoiseKernel(fn, 6, 0.2, 0.1)
    assert rates(by_string).to_dict() == rates(by_object).to_dict()

    from stochformer.config.build import initial_tokens, make_model
    from stochformer.core.runtime import make_generator
    from stochformer.integrate import SaveAt, solve

    outs = []
    for activation in (None, fn):
        gen = make_generator(3)
        X0 = initial_tokens(cfg.init, cfg.batch, cfg.N, cfg.d, gen, torch.float64, "cpu")
        outs.append(solve(make_model(cfg, activation=activation), X0, cfg.T, cfg.L, SaveAt(), generator=gen)["X_final"].values)
    assert (outs[0] == outs[1]).all()


IDENT = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)


@settings(max_examples=60, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # the module is the same for every input
@given(spec=st.one_of(
    st.tuples(IDENT, IDENT).map(lambda t: f"zz_missing_{t[0]}:{t[1]}"),  # no such module
    st.tuples(IDENT).map(lambda t: f"my_parts:zz_{t[0]}"),  # no such attribute
    st.just("my_parts:NOT_CALLABLE"),
    # callables that are no activation: they raise on a tensor, or return no tensor of its shape
    st.sampled_from(["os:getcwd", "math:sqrt", "builtins:len", "torch:sum", "my_parts:raising", "my_parts:Scaled"]),
    st.text(min_size=1, max_size=40).filter(lambda s: ":" in s),  # anything with a colon
))
def test_a_bad_import_string_is_one_activation_error(user_module, spec):
    """Every string with a colon that does not name a callable mapping a tensor to one of its
    shape — it names nothing importable, or something that is not callable, or a callable that
    raises on a tensor or returns something else — gives one ``ConfigError`` whose message starts
    at ``activation``, before any work (the callable is tried once on a few numbers)."""
    import my_parts  # noqa: F401  (the fixture's module is importable)

    try:
        fn = import_object(spec, "activation")
    except ValueError:
        fn = None
    if callable(fn):
        try:
            works = torch.is_tensor(y := fn(torch.zeros(3, dtype=torch.float64))) and y.shape == (3,)
        except Exception:
            works = False
        if works:
            return  # the text happened to name a real activation: not a bad string
    with pytest.raises(ConfigError, match=r"activation") as err:
        build_config(None, [f"activation={spec}"])
    assert len(str(err.value).splitlines()) == 1


def test_the_command_line_takes_an_import_string(user_module):
    """``stochformer rates --set activation=my_parts:pgelu`` in a fresh process with the module on
    the path prints the same rates as the Python API."""
    import json
    import os

    import my_parts

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(user_module), *sys.path]))
    out = subprocess.run([sys.executable, "-m", "stochformer", "rates", "--set", "activation=my_parts:pgelu", "--set", "d=8",
                          "--json"], capture_output=True, text=True, env=env, check=True).stdout
    assert json.loads(out)["lambda_1"] == pytest.approx(rates(NoiseKernel(my_parts.pgelu, 8)).lambda_1, rel=1e-12)
    bad = subprocess.run([sys.executable, "-m", "stochformer", "rates", "--set", "activation=my_parts:NOT_CALLABLE"],
                         capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "activation" in bad.stderr and "Traceback" not in bad.stderr


# --------------------------------------------------------------------------- attention and noise of one's own

PARTS = textwrap.dedent('''
    import torch
    from stochformer.model.kernel import NoiseKernel
    from stochformer.model.noise import ExactField

    class CosineAttention:
        """softmax of beta <x_i, x_j> with values gamma x_j (a user's copy of the softmax attention)"""
        def __init__(self, beta=1.0, gamma=1.0):
            self.beta, self.gamma = beta, gamma
        def __call__(self, X, keys=None):
            keys = X if keys is None else keys
            return self.gamma * torch.softmax(self.beta * X @ keys.mT, dim=-1) @ keys

    def tanh_field(d, scale=1.0):
        return ExactField(NoiseKernel("tanh", d, 0.2, 0.1, scale))

    class NoKernel:
        def reset(self, batch, d, generator, dtype, device):
            pass
        def increment(self, X, dt, draws):
            return torch.zeros_like(X)

    def broken(**kw):
        raise RuntimeError("cannot build")

    class NotAnAttention:
        pass
''')


@pytest.fixture
def parts_module(tmp_path, monkeypatch):
    (tmp_path / "my_layers.py").write_text(PARTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_layers", None)
    yield tmp_path
    sys.modules.pop("my_layers", None)


@settings(max_examples=8, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(beta=st.floats(0.0, 4.0), gamma=st.floats(-1.0, 1.0), dynamics=st.sampled_from(["transformer", "sde"]))
def test_attention_and_noise_by_import_string_are_the_objects_themselves(parts_module, beta, gamma, dynamics):
    """A run whose config names ``attention_kind = "my_layers:CosineAttention"`` (with
    ``attention_args``) and ``noise = "my_layers:tanh_field"`` (with ``noise_args``) gives, bit for
    bit, the numbers of ``model=`` built by hand from the same objects; its record keeps the strings
    and the arguments; and the user's attention equals the built-in softmax attention it copies."""
    import my_layers

    from stochformer.experiments.simulate import run_simulate
    from stochformer.model.attention import SoftmaxAttention
    from stochformer.model.sde import INTEGRATORS, LimitSDE
    from stochformer.model.transformer import Transformer

    common = dict(N=5, d=4, L=4, batch=3, seed=11, dynamics=dynamics)
    cfg = RunConfig(attention_kind="my_layers:CosineAttention", attention_args={"beta": beta, "gamma": gamma},
                    noise="my_layers:tanh_field", noise_args={"d": 4, "scale": 0.7}, **common)
    att, noise = my_layers.CosineAttention(beta, gamma), my_layers.tanh_field(4, 0.7)
    model = Transformer(att, noise) if dynamics == "transformer" else \
        LimitSDE(att, noise, INTEGRATORS[cfg.integrator], noise.noise_kernel(4).kappa1)
    by_string, by_object = run_simulate(cfg), run_simulate(cfg, model=model)
    assert set(by_string.data.data_vars) == set(by_object.data.data_vars) >= {"X_final", "mean_cosine"}
    for name in by_string.data.data_vars:
        assert np.array_equal(by_string.data[name].values, by_object.data[name].values), name
    assert by_string.config.model_dump()["attention_args"] == {"beta": beta, "gamma": gamma}
    assert rates(make_kernel(cfg)).to_dict() == rates(noise.noise_kernel(4)).to_dict()
    X = torch.nn.functional.normalize(torch.randn(2, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0)), dim=-1)
    assert torch.allclose(att(X), SoftmaxAttention(beta=beta, gamma=gamma)(X), atol=1e-12)


@pytest.mark.parametrize("overrides, field", [
    ({"attention_kind": "my_layers:broken"}, "attention_kind"),
    ({"attention_kind": "my_layers:NotAnAttention"}, "attention_kind"),
    ({"attention_kind": "my_layers:CosineAttention", "attention_args": {"delta": 1.0}}, "attention_kind"),
    ({"attention_kind": "softmax", "attention_args": {"beta": 1.0}}, "attention_args"),
    ({"attention_kind": "softmx"}, "attention_kind"),
    ({"noise": "my_layers:NotAnAttention"}, "noise"),
    ({"noise": "my_layers:zz_missing"}, "noise"),
    ({"noise": "exact", "noise_args": {"d": 4}}, "noise_args"),
])
def test_a_bad_part_is_one_error_naming_its_field(parts_module, overrides, field):
    """A factory that fails, gives an object without the part's method, takes other arguments or is
    not there, arguments without an import string, and an unknown name: one ``ConfigError`` that
    names the field, from the API and from ``--set``-style overrides alike."""
    with pytest.raises(ConfigError, match=rf"\b{field}\b"):
        build_config(overrides, [])


def test_a_noise_without_its_kernel_runs_but_refuses_a_prediction(parts_module):
    """A noise source without ``noise_kernel(d)`` steps the transformer; what needs κ (the SDE's
    drift, the rates) is refused naming ``noise``."""
    from stochformer.experiments.simulate import run_simulate

    cfg = RunConfig(noise="my_layers:NoKernel", N=3, d=3, L=2, batch=2, mlp=True)
    assert run_simulate(cfg).data["X_final"].shape == (2, 3, 3)
    with pytest.raises(ValueError, match=r"^noise: .*noise_kernel"):
        make_kernel(cfg)


def test_the_command_line_takes_parts_by_import_string(parts_module):
    """``stochformer simulate --set attention_kind=my_layers:CosineAttention --set
    'attention_args={beta = 2.0}'`` in a fresh process: the run is recorded with its string and
    arguments; a failing factory is one line naming the field (exit 2, no traceback)."""
    import json
    import os

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(parts_module), *sys.path]))
    out = parts_module / "run"
    args = ["simulate", "--quiet", "--set", "attention_kind=my_layers:CosineAttention", "--set", "attention_args={beta = 2.0}",
            "--set", "N=4", "--set", "L=2", "--set", "batch=2", "--out", str(out)]
    subprocess.run([sys.executable, "-m", "stochformer", *args], capture_output=True, text=True, env=env, check=True)
    record = json.loads((out / "config.json").read_text())
    config = record["config"]
    assert record["custom_parts"] and config["attention_kind"] == "my_layers:CosineAttention" and config["attention_args"] == {"beta": 2.0}
    bad = subprocess.run([sys.executable, "-m", "stochformer", "simulate", "--set", "attention_kind=my_layers:broken",
                          "--out", str(parts_module / "bad")], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "attention_kind" in bad.stderr and "Traceback" not in bad.stderr
    assert not (parts_module / "bad").exists()


# --------------------------------------------------------------------------- user callables


BAD_OUTPUTS = {
    "drops a token": lambda Y: Y[..., :-1, :],
    "drops a coordinate": lambda Y: Y[..., :-1],
    "adds an axis": lambda Y: Y.unsqueeze(0),
    "is a scalar": lambda Y: Y.sum(),
    "keeps one row": lambda Y: Y[..., :1, :],
    "is NaN": lambda Y: Y * math.nan,
    "is infinite": lambda Y: Y / 0.0,
    "is a numpy array": lambda Y: Y.detach().numpy(),
    "is a list": lambda Y: Y.tolist(),
    # the right shape, but not the dtype or device of the input (float64 tokens on the CPU)
    "is float32": lambda Y: Y.float(),
    "is float16": lambda Y: Y.half(),
    "is bfloat16": lambda Y: Y.bfloat16(),
    "is integer": lambda Y: Y.round().long(),
    "is bool": lambda Y: Y > 0,
    "is complex": lambda Y: Y.to(torch.complex128),
    "is on the meta device": lambda Y: Y.to("meta"),
    # no output: the callable raises (its own error, Python's, torch's)
    "raises TypeError": lambda Y: _raise(TypeError("takes no arguments")),
    "raises KeyError": lambda Y: _raise(KeyError("k")),
    "raises ZeroDivisionError": lambda Y: 1 / 0,
    "raises torch's RuntimeError": lambda Y: Y @ torch.ones(7, 5, dtype=Y.dtype),
    "raises its own exception": lambda Y: _raise(type("UserError", (Exception,), {})("a user's failure")),
}


def _raise(exc: Exception) -> Any:
    raise exc


def _named(fn: Callable, name: str) -> Callable:
    fn.__name__ = fn.__qualname__ = name
    return fn


def _model_with(kind: str, bad: Callable) -> tuple[Any, dict]:
    """A run whose user callable of ``kind`` returns ``bad(what it should return)``."""
    fn_name = f"user_{kind}"
    if kind == "activation":
        return sf.Transformer(None, sf.RandomMLP(width=8, activation=_named(lambda x: bad(torch.tanh(x)), fn_name))), {}
    if kind == "feature activation":
        return sf.LimitSDE(None, sf.RandomFeatureField(activation=_named(lambda x: bad(torch.tanh(x)), fn_name), features=8)), {}
    if kind == "attention":
        return sf.Transformer(_named(lambda X, keys=None: bad(X.flip(-2)), fn_name), None), {}
    if kind == "sde attention":
        return sf.LimitSDE(_named(lambda X, keys=None: bad(X.flip(-2)), fn_name), None), {}
    if kind == "hook":
        return sf.Transformer(), {"hook": _named(lambda k, X: bad(X), fn_name)}

    class UserNoise:
        def reset(self, batch, d, generator, dtype, device):
            pass

        def increment(self, X, dt, draws):
            return bad(math.sqrt(dt) * torch.ones_like(X))

        def noise_kernel(self, d):
            return sf.NoiseKernel("linear", d)

    class UserStep:
        def reset(self, batch, d, generator, dtype, device):
            pass

        def step(self, X, dt, draws):
            return bad(X.flip(-2))

    UserNoise.__qualname__, UserStep.__qualname__ = f"user_{kind}", f"user_{kind}"
    if kind == "noise":
        return sf.LimitSDE(None, UserNoise()), {}
    if kind == "mlp":
        return sf.Transformer(None, UserNoise()), {}
    return UserStep(), {}


KINDS = {"activation": "activation", "feature activation": "activation", "attention": "attention", "sde attention": "attention",
         "hook": "hook", "noise": "noise", "mlp": "noise", "step": "model.step"}


@settings(max_examples=180, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(kind=st.sampled_from(list(KINDS)), bad=st.sampled_from(list(BAD_OUTPUTS)), N=st.integers(2, 4), d=st.integers(2, 4))
def test_a_user_callable_of_wrong_output_or_raising_is_refused_naming_it(kind: str, bad: str, N: int, d: int) -> None:
    """An activation, attention, hook, noise source or step function whose output has the wrong
    shape (or type), another dtype or device than its input (integer, bool, complex, half or
    float32 numbers for float64 tokens, the meta device) or is not finite, or that raises, is
    refused on its first call with one line naming what it is and the callable (never broadcast,
    never a NaN run, never torch's error or the user's exception as it was)."""
    model, extra = _model_with(kind, BAD_OUTPUTS[bad])
    with pytest.raises(ValueError) as exc:
        sf.solve(model, sf.sphere.uniform(batch=2, N=N, d=d, seed=0), 1.0, 3, seed=0, **extra)
    text = str(exc.value)
    assert type(exc.value) in (ValueError, NonFiniteError) and len(text.splitlines()) == 1, repr(exc.value)
    assert KINDS[kind] in text and f"user_{kind}" in text, text


def test_a_user_callable_of_the_right_shape_runs() -> None:
    """The same callables returning the right shape and finite numbers run (the check costs
    nothing later: one first call)."""
    for kind in KINDS:
        model, extra = _model_with(kind, lambda Y: Y)
        ds = sf.solve(model, sf.sphere.uniform(batch=2, N=3, d=3, seed=0), 1.0, 3, seed=0, **extra)
        assert np.all(np.isfinite(ds["mean_cosine"].values)), kind
