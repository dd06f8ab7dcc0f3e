"""A user's own activation named by an import string ``"package.module:function"`` in a config
(TOML, ``--set``, every experiment's ``model``): it reaches the kernel, the model and the record
exactly as the callable itself does, and a string that does not name a callable is one clear
``activation`` error before any work."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stochformer.config import ConfigError, RunConfig, build_config
from stochformer.config.build import make_kernel
from stochformer.core.validation import import_object
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
    st.text(min_size=1, max_size=40).filter(lambda s: ":" in s),  # anything with a colon
))
def test_a_bad_import_string_is_one_activation_error(user_module, spec):
    """Every string with a colon that does not name an importable callable gives one
    ``ConfigError`` whose message starts at ``activation`` — from the API and from ``--set``."""
    import my_parts  # noqa: F401  (the fixture's module is importable)

    try:
        fn = import_object(spec, "activation")
    except ValueError:
        fn = None
    if callable(fn):
        return  # the text happened to name a real callable (e.g. "os:getcwd"): not a bad string
    with pytest.raises(ConfigError, match=r"activation"):
        build_config(None, [f"activation={spec}"])


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
